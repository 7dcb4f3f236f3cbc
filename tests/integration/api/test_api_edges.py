"""Due times bounded by one rule (services/jobs/horizon.py: not before 1970-01-01T00:00:00Z,
at most ten years ahead), paths that are not UTF-8 refused, and an empty path segment at
either end of the prefix treated alike: through the local Cloud Run front end and directly."""

from __future__ import annotations

from typing import Any

import pytest

from services.jobs.horizon import MAX_AHEAD
from tests.integration.api.conftest import T0, ApiRig
from tests.unit.api.contract import schedule_body


@pytest.fixture(params=["direct", "fronted"])
def rig(request: pytest.FixtureRequest) -> ApiRig:
    name = "api_rig" if request.param == "direct" else "fronted_api_rig"
    found: ApiRig = request.getfixturevalue(name)
    return found


def _violations(response: Any) -> list[str]:
    error = response.json()["error"]
    return [v["field"] for d in error.get("details", []) for v in d["fieldViolations"]]


@pytest.mark.parametrize(
    ("field", "value"),
    [
        ("due_at", "0001-01-01T00:00:00Z"),
        ("due_at", "1969-12-31T23:59:59Z"),
        ("due_at", "9999-12-31T23:59:59Z"),
        ("due_at", "2036-06-02T12:00:00Z"),  # T0 + 10 years + a day
        ("delay", f"{int(MAX_AHEAD.total_seconds()) + 1}s"),
    ],
)
def test_a_due_time_outside_the_horizon_is_refused_and_writes_nothing(
    rig: ApiRig, field: str, value: str
) -> None:
    body = {**schedule_body(job_id="far-1", due_at=...), field: value}
    refused = rig.call("POST", "/v1/jobs", body)
    assert refused.status_code == 400, refused.text
    assert refused.json()["error"]["status"] == "INVALID_ARGUMENT"
    assert _violations(refused) == [field]
    assert rig.document("far-1") is None


def test_the_edges_of_the_horizon_are_accepted(rig: ApiRig) -> None:
    cases = {
        "epoch-1": {"due_at": "1970-01-01T00:00:00Z"},
        "last-1": {"due_at": (T0 + MAX_AHEAD).isoformat().replace("+00:00", "Z")},
        "delay-1": {"delay": f"{int(MAX_AHEAD.total_seconds())}s"},
    }
    for job_id, due in cases.items():
        created = rig.call("POST", "/v1/jobs", {**schedule_body(job_id=job_id, due_at=...), **due})
        assert created.status_code == 201, (job_id, created.text)


def test_reschedule_obeys_the_same_horizon(rig: ApiRig) -> None:
    assert rig.call("POST", "/v1/jobs", schedule_body(job_id="move-1")).status_code == 201
    refused = rig.call("POST", "/v1/jobs/move-1:reschedule", {"due_at": "9999-01-01T00:00:00Z"})
    assert refused.status_code == 400 and _violations(refused) == ["due_at"]
    stored = rig.document("move-1")
    assert stored is not None and stored["due_at"].year == 2026


def test_a_path_that_is_not_utf_8_is_refused_not_read_as_another_job(rig: ApiRig) -> None:
    # `%FF%FE` decoded with replacement would be "\ufffd\ufffd", the ID `%EF%BF%BD%EF%BF%BD`.
    for path in ("/v1/jobs/%FF%FE", "/v1/jobs/%FF%FE:cancel", "/v1/jobs/x?q=%FF"):
        method = "POST" if path.endswith(":cancel") else "GET"
        refused = rig.call(method, path, {} if method == "POST" else None)
        assert refused.status_code == 400, (path, refused.text)
        assert refused.json()["error"]["status"] == "INVALID_ARGUMENT"
    # The valid encoding is another ID, read as such (not the caller's: 403, AIP-211).
    read = rig.call("GET", "/v1/jobs/%EF%BF%BD%EF%BF%BD")
    assert read.json()["error"]["status"] == "PERMISSION_DENIED"


def test_an_empty_segment_is_404(rig: ApiRig) -> None:
    # A leading `//` is folded to `/` by the rig's own HTTP server (Python's http.server does
    # that), not by the API; under gunicorn, as deployed, `//v1/jobs` is 404 as well
    # (tests/integration/cloudrun/test_services_edge.py).
    for path in ("/v1//jobs", "/v1/jobs//x", "/v1//jobs/x"):
        answer = rig.call("POST", path, schedule_body(job_id="slashes-1"))
        assert answer.status_code == 404, (path, answer.text)
        assert answer.json()["error"]["status"] == "NOT_FOUND"
    assert rig.document("slashes-1") is None
