"""Issue 24 finding 6: how the API answers the store's faults. A deployment fault (a missing
permission, index or database) was 400 FAILED_PRECONDITION ("do not retry") with no ERROR
line and the store's detail in the body; scheduling over an undecodable record raised a bare
ValueError (500 api_crashed). Now: 503 with Retry-After, an ERROR `store_rejected` line, a
generic message; an undecodable record its own answer, never api_crashed."""

from __future__ import annotations

import logging
from typing import Any

import pytest

from services.jobs import schema
from services.telemetry import metrics
from tests.integration.api.conftest import ApiRig
from tests.unit.api.contract import schedule_body


@pytest.mark.parametrize(
    ("method", "code"),
    [
        ("BatchGetDocuments", "PERMISSION_DENIED"),  # a role missing
        ("BatchGetDocuments", "NOT_FOUND"),  # the database missing
    ],
)
@pytest.mark.builtin_emulator("fault injection")
def test_a_deployment_fault_is_503_with_retry_after_an_error_line_and_no_internal_hint(
    api_rig: ApiRig,
    firestore_emulator: Any,
    caplog: pytest.LogCaptureFixture,
    method: str,
    code: str,
) -> None:
    firestore_emulator.inject_fault(method, code, count=10, message="secret-internal-hint")
    try:
        with caplog.at_level(logging.ERROR):
            response = api_rig.call("GET", "/v1/jobs/job-1")
    finally:
        firestore_emulator.clear_faults()
    assert response.status_code == 503, response.text
    assert response.headers["Retry-After"]
    assert response.json()["error"]["status"] == "UNAVAILABLE"
    assert "secret-internal-hint" not in response.text and code not in response.text
    events = [getattr(r, "fields", {}).get(metrics.LOG_EVENT) for r in caplog.records]
    assert metrics.EVENT_STORE_REJECTED in events
    assert "api_crashed" not in events


def test_scheduling_over_an_undecodable_record_is_a_domain_answer_not_a_crash(
    api_rig: ApiRig, caplog: pytest.LogCaptureFixture
) -> None:
    body = schedule_body()
    first = api_rig.call("POST", "/v1/jobs", body)
    assert first.status_code == 201, first.text
    job_id = first.json()["job_id"]
    api_rig.client.collection(schema.JOBS).document(job_id).update({"created_at": "yesterday"})
    with caplog.at_level(logging.ERROR):
        again = api_rig.call("POST", "/v1/jobs", body)
    events = [getattr(r, "fields", {}).get(metrics.LOG_EVENT) for r in caplog.records]
    assert "api_crashed" not in events
    assert again.status_code == 500, again.text
    assert again.json()["error"]["status"] == "INTERNAL"
    assert "stored record cannot be read" in again.json()["error"]["message"]


@pytest.mark.builtin_emulator("fault injection")
def test_aborted_on_the_schedule_create_is_read_back_and_retried(
    api_rig: ApiRig, firestore_emulator: Any
) -> None:
    # Issue 33, finding 5: the create (a write with a precondition, outside a transaction)
    # answered ABORTED under contention is read back and sent again. Today: 500 api_crashed.
    firestore_emulator.inject_fault("Commit", "ABORTED", count=2)
    try:
        response = api_rig.call("POST", "/v1/jobs", schedule_body(job_id="aborted-1"))
    finally:
        firestore_emulator.clear_faults()
    assert response.status_code == 201, response.text
    assert api_rig.document("aborted-1") is not None


@pytest.mark.builtin_emulator("fault injection")
def test_persistent_aborted_on_the_schedule_create_is_409_aborted_retry(
    api_rig: ApiRig, firestore_emulator: Any
) -> None:
    firestore_emulator.inject_fault("Commit", "ABORTED", count=10_000)
    try:
        response = api_rig.call("POST", "/v1/jobs", schedule_body(job_id="aborted-2"))
    finally:
        firestore_emulator.clear_faults()
    assert response.status_code == 409, response.text
    assert response.json()["error"]["status"] == "ABORTED"
    assert api_rig.document("aborted-2") is None
    again = api_rig.call("POST", "/v1/jobs", schedule_body(job_id="aborted-2"))
    assert again.status_code == 201, again.text
