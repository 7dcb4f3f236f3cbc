"""Fuzzing the API on the real store: no input answers 5xx, and a refused request leaves every
record exactly as it was (compared document by document on the Firestore emulator)."""

from __future__ import annotations

import json
from typing import Any

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tests.integration.api.conftest import ApiRig
from tests.unit.api.contract import documented_statuses, schedule_body

scalars = (
    st.none()
    | st.booleans()
    | st.integers(min_value=-(2**70), max_value=2**70)
    | st.floats(allow_nan=False)
    | st.text(max_size=30)
)
values = st.recursive(
    scalars,
    lambda children: (
        st.lists(children, max_size=3) | st.dictionaries(st.text(max_size=8), children, max_size=3)
    ),
    max_leaves=10,
)
FIELDS = ("job_id", "decision_id", "action", "subject", "params", "due_at", "delay")
names = st.sampled_from((*FIELDS, "max_attempts", "reason", "other"))
near_misses = st.builds(
    lambda overrides, drops: {
        k: v for k, v in {**schedule_body(), **overrides}.items() if k not in drops
    },
    st.dictionaries(names, values, max_size=3),
    st.lists(names, max_size=2),
)
requests_ = st.tuples(
    st.sampled_from(["/v1/jobs", "/v1/jobs/job-1:cancel", "/v1/jobs/job-1:reschedule"]),
    st.one_of(
        near_misses.map(lambda b: json.dumps(b).encode()),
        st.binary(max_size=200),
        st.dictionaries(names, values, max_size=3).map(lambda b: json.dumps(b).encode()),
    ),
)


def snapshot(rig: ApiRig) -> dict[str, Any]:
    return {d.id: d.to_dict() for d in rig.client.collection("jobs").stream()}


@settings(
    max_examples=300,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
@given(request=requests_)
def test_no_input_answers_5xx_or_changes_a_record_when_refused(
    api_rig: ApiRig, request: tuple[str, bytes]
) -> None:
    if api_rig.document("job-1") is None:
        assert api_rig.call("POST", "/v1/jobs", schedule_body()).status_code == 201
    path, raw = request
    before = snapshot(api_rig)
    response = api_rig.call("POST", path, raw=raw)
    assert response.status_code < 500, response.text
    assert str(response.status_code) in (documented_statuses("POST", path) or set())
    error = response.json().get("error") if response.status_code >= 400 else None
    if error is not None:
        assert set(error) >= {"code", "message", "status"}
        assert snapshot(api_rig) == before
