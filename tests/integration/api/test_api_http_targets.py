"""`http.request` scheduled through the API and the Python store on the Firestore emulator: the
API reads its targets from its settings (JOBS_HTTP_TARGETS), refuses an unknown target or a path
that could leave the target with a 400 naming `params.target` / `params.path`, and writes
nothing; a good job is stored deferred."""

from __future__ import annotations

from collections.abc import Iterator
from datetime import UTC, datetime
from typing import Any

import pytest
from google.cloud import firestore

from services.jobs.clock import FakeClock
from services.jobs.errors import ValidationError
from services.jobs.http_targets import parse_targets
from services.jobs.model import NewJob
from services.store.job_store import FirestoreJobStore
from tests.integration.api.conftest import T0, ApiRig, _rig, fields_of

TARGETS = '{"trials": {"url": "https://trials.example.run.app", "rate": 5}}'


@pytest.fixture
def targets_rig(
    firestore_client: firestore.Client, firestore_project: str, oidc_server: Any
) -> Iterator[ApiRig]:
    yield from _rig(
        firestore_client,
        firestore_project,
        oidc_server,
        cloud_run=False,
        http_targets=parse_targets(TARGETS),
    )


def _body(job_id: str, **params: Any) -> dict[str, Any]:
    return {
        "job_id": job_id,
        "action": "http.request",
        "subject": "trial-42",
        "params": params,
        "due_at": "2026-06-15T12:00:00Z",
    }


def test_a_job_to_a_configured_target_is_scheduled(targets_rig: ApiRig) -> None:
    made = targets_rig.call(
        "POST", "/v1/jobs", _body("call-1", target="trials", path="/trials/42:expire", body={})
    )
    assert made.status_code == 201, made.text
    stored = targets_rig.document("call-1")
    assert stored is not None and stored["state"] == "deferred"
    assert stored["params"] == {"target": "trials", "path": "/trials/42:expire", "body": {}}


@pytest.mark.parametrize(
    ("params", "field"),
    [
        ({"target": "billing", "path": "/x"}, "params.target"),
        ({"target": "trials", "path": "/a/../admin"}, "params.path"),
        ({"target": "trials", "path": "//evil.example/x"}, "params.path"),
    ],
)
def test_an_unknown_target_or_a_bad_path_is_400_naming_the_field(
    targets_rig: ApiRig, params: dict[str, Any], field: str
) -> None:
    refused = targets_rig.call("POST", "/v1/jobs", _body("call-bad", **params))
    assert refused.status_code == 400, refused.text
    assert fields_of(refused) == [field]
    assert targets_rig.document("call-bad") is None


def test_the_apis_document_lists_http_request(targets_rig: ApiRig) -> None:
    served = targets_rig.call("GET", "/v1/openapi.json").json()
    action = served["components"]["schemas"]["ScheduleRequest"]["properties"]["action"]
    assert "http.request" in action["enum"]


def test_the_python_store_reads_the_targets_from_its_environment(
    firestore_client: firestore.Client, monkeypatch: pytest.MonkeyPatch
) -> None:
    clock = FakeClock(datetime(2026, 6, 1, tzinfo=UTC))
    job = NewJob("call-py", "http.request", "trial-1", T0, {"target": "trials", "path": "/x"})
    with pytest.raises(ValidationError, match=r"params\.target: unknown target 'trials'"):
        FirestoreJobStore(firestore_client, clock).schedule(job)
    monkeypatch.setenv("JOBS_HTTP_TARGETS", TARGETS)
    store = FirestoreJobStore(firestore_client, clock)
    assert store.schedule(job).created
