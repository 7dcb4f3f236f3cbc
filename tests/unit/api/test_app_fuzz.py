"""Fuzzing the API with hypothesis: no input answers 5xx, every refusal is in Google's error
format naming a field, and a refused request changes no job."""

from __future__ import annotations

import json
from typing import Any

import jsonschema
from hypothesis import HealthCheck, event, given, settings
from hypothesis import strategies as st

from services.api import document
from services.api.app import create_app
from services.jobs.clock import FakeClock
from tests.unit.api.conftest import SETTINGS, Api
from tests.unit.api.contract import PARAMS, documented_statuses
from tests.unit.api.fakes import T0, FakeStore, FakeVerifier

FIELDS = ["job_id", "decision_id", "action", "subject", "params", "due_at", "delay"]
FIELDS += ["max_attempts", "reason", "extra", ""]

json_values = st.recursive(
    st.none()
    | st.booleans()
    | st.integers(min_value=-(2**70), max_value=2**70)
    | st.floats(allow_nan=False)
    | st.text(max_size=40),
    lambda children: (
        st.lists(children, max_size=4) | st.dictionaries(st.text(max_size=10), children, max_size=4)
    ),
    max_leaves=12,
)
plausible = {
    "job_id": st.sampled_from(["job-1", "", "a/b", " x", "__x__", "job-2"]) | st.text(),
    "action": st.sampled_from(["media.delete_source", "nope", ""]) | json_values,
    "subject": st.sampled_from(["media-1", ""]) | json_values,
    "due_at": st.sampled_from(["2026-07-01T12:00:00Z", "2026-13-01T00:00:00Z"]) | json_values,
    "delay": st.sampled_from(["60s", "-1s", "1e9s"]) | json_values,
    "params": st.dictionaries(st.text(max_size=8), json_values, max_size=3) | json_values,
}
VALID = {
    "job_id": "job-1",
    "action": "media.delete_source",
    "subject": "media-1",
    "params": dict(PARAMS),
    "due_at": "2026-07-01T12:00:00Z",
}


def _mutated(overrides: dict[str, Any], drops: list[str]) -> dict[str, Any]:
    """A valid body with some fields replaced, added or removed: most fuzzed bodies are near
    misses, which is where a validator's holes are."""
    body = {**VALID, **overrides}
    for name in drops:
        body.pop(name, None)
    return body


bodies = st.builds(
    _mutated,
    st.dictionaries(
        st.sampled_from(FIELDS), st.one_of(json_values, *plausible.values()), max_size=3
    ),
    st.lists(st.sampled_from(FIELDS), max_size=2),
)
raw_bodies = st.binary(max_size=300) | bodies.map(lambda b: json.dumps(b).encode())
paths = st.sampled_from(
    [
        "/v1/jobs",
        "/v1/jobs/job-1",
        "/v1/jobs/job-1:cancel",
        "/v1/jobs/job-1:reschedule",
        "/v1/jobs/job-1:other",
        "/v1/openapi.json",
        "/v1/jobs/job-1/x",
    ]
) | st.text(max_size=30).map(lambda t: "/v1/jobs/" + t)
methods = st.sampled_from(["GET", "POST", "PUT", "DELETE", "PATCH", "HEAD", "OPTIONS"])
content_types = st.sampled_from(["application/json", "text/plain", "", "application/json; x=1"])


def fresh_api() -> Api:
    clock = FakeClock(T0)
    store = FakeStore(clock)
    app = create_app(SETTINGS, clock=clock, store=store, verifier=FakeVerifier())
    api = Api(app, store, clock)
    created = api.post("/v1/jobs", VALID)
    assert created.status_code == 201
    return api


def assert_error_format(body: Any) -> None:
    spec = document.document()
    jsonschema.validate(
        body,
        {"$ref": "#/components/schemas/Error", "components": spec["components"]},
        cls=jsonschema.Draft202012Validator,
    )


@settings(max_examples=400, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(method=methods, path=paths, raw=raw_bodies, content_type=content_types)
def test_no_request_answers_5xx_and_refusals_change_nothing(
    method: str, path: str, raw: bytes, content_type: str
) -> None:
    api = fresh_api()
    before = dict(api.store.jobs)
    try:
        response = api.request(method, path, raw=raw, content_type=content_type)
    except UnicodeError:
        return  # the test client cannot even encode this path; no request was made
    assert response.status_code < 500, response.get_data(as_text=True)
    if method == "HEAD":
        return
    if response.status_code >= 400:
        assert_error_format(response.get_json())
        assert api.store.jobs == before
    documented = documented_statuses(method, path)
    if documented is not None:  # the request reached an operation: its answer is in the contract
        assert str(response.status_code) in documented, (method, path, response.status_code)


@settings(max_examples=300, deadline=None)
@given(body=bodies)
def test_any_schedule_body_is_created_existing_or_refused_naming_a_field(
    body: dict[str, Any],
) -> None:
    api = fresh_api()
    before = dict(api.store.jobs)
    response = api.post("/v1/jobs", body)
    event(f"status {response.status_code}")  # --hypothesis-show-statistics shows the spread
    assert response.status_code in {200, 201, 400, 409}, response.get_data(as_text=True)
    if response.status_code in {400, 409}:
        error = response.get_json()
        assert_error_format(error)
        assert error["error"]["details"][0]["fieldViolations"]
        assert api.store.jobs == before
    if response.status_code == 200:
        assert api.store.jobs == before
