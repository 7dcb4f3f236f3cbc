"""The API against the real store on the Firestore emulator, with tokens from the local issuer."""

from __future__ import annotations

import threading
from collections import Counter
from datetime import UTC, datetime, timedelta

import pytest

from services.jobs.ids import derive_job_id
from tests.integration.api.conftest import CALLER, T0, ApiRig, fields_of
from tests.unit.api.contract import ACTION, schedule_body


def test_schedule_writes_a_deferred_record_and_a_repeat_is_200_writing_nothing(
    api_rig: ApiRig,
) -> None:
    first = api_rig.call("POST", "/v1/jobs", schedule_body())
    assert first.status_code == 201, first.text
    assert first.headers["Location"] == "/v1/jobs/job-1"
    stored = api_rig.document("job-1")
    assert stored is not None
    assert stored["state"] == "deferred"
    assert stored["due_at"] == datetime(2026, 7, 1, 12, tzinfo=UTC)
    assert stored["history"][0]["by"] == f"application:api:{CALLER}"
    api_rig.clock.advance(timedelta(minutes=5))
    again = api_rig.call("POST", "/v1/jobs", schedule_body())
    assert again.status_code == 200, again.text
    assert again.json() == first.json()
    assert api_rig.document("job-1") == stored


def test_a_conflicting_schedule_is_409_naming_the_field_and_leaves_the_record(
    api_rig: ApiRig,
) -> None:
    assert api_rig.call("POST", "/v1/jobs", schedule_body()).status_code == 201
    before = api_rig.document("job-1")
    conflict = api_rig.call("POST", "/v1/jobs", schedule_body(subject="media-2"))
    assert conflict.status_code == 409, conflict.text
    assert conflict.json()["error"]["status"] == "ALREADY_EXISTS"
    assert fields_of(conflict) == ["subject"]
    assert api_rig.document("job-1") == before


def test_the_decision_fields_derive_the_id_the_python_store_uses(api_rig: ApiRig) -> None:
    body = schedule_body(job_id=..., decision_id="retention-decision-9")
    response = api_rig.call("POST", "/v1/jobs", body)
    assert response.status_code == 201, response.text
    job_id = derive_job_id(ACTION, "media-1", "retention-decision-9")
    assert response.json()["job_id"] == job_id
    assert api_rig.document(job_id) is not None


@pytest.mark.parametrize(
    ("overrides", "field"),
    [
        ({"action": "media.unknown"}, "action"),
        ({"params": {"k": 2**64}}, "params.k"),
        ({"job_id": "x" * 1600}, "job_id"),
        ({"job_id": "tab\there"}, "job_id"),
        ({"due_at": "2026-07-01"}, "due_at"),
        ({"max_attempts": 101}, "max_attempts"),
    ],
)
def test_the_store_validation_reaches_the_caller_as_400_naming_the_field(
    api_rig: ApiRig, overrides: dict[str, object], field: str
) -> None:
    response = api_rig.call("POST", "/v1/jobs", schedule_body(**overrides))
    assert response.status_code == 400, response.text
    assert field in fields_of(response)
    assert list(api_rig.client.collection("jobs").stream()) == []


def test_read_reschedule_and_cancel_through_the_api(api_rig: ApiRig) -> None:
    api_rig.call("POST", "/v1/jobs", schedule_body())
    assert api_rig.call("GET", "/v1/jobs/job-1").json()["state"] == "deferred"
    moved = api_rig.call("POST", "/v1/jobs/job-1:reschedule", {"delay": "3600s"})
    assert moved.status_code == 200, moved.text
    assert api_rig.document("job-1")["due_at"] == T0 + timedelta(hours=1)  # type: ignore[index]
    cancelled = api_rig.call("POST", "/v1/jobs/job-1:cancel", {"reason": "withdrawn"})
    assert cancelled.status_code == 200, cancelled.text
    stored = api_rig.document("job-1")
    assert stored is not None and stored["state"] == "cancelled"
    assert stored["history"][-1]["by"] == f"operator:api:{CALLER}"
    # A retried cancel: same answer, no further write.
    retried = api_rig.call("POST", "/v1/jobs/job-1:cancel", {"reason": "withdrawn"})
    assert retried.status_code == 200
    assert api_rig.document("job-1") == stored
    refused = api_rig.call("POST", "/v1/jobs/job-1:reschedule", {"delay": "60s"})
    assert refused.status_code == 400
    assert refused.json()["error"]["status"] == "FAILED_PRECONDITION"
    assert api_rig.document("job-1") == stored


def test_a_finished_job_is_neither_cancelled_nor_rescheduled(api_rig: ApiRig) -> None:
    api_rig.call("POST", "/v1/jobs", schedule_body())
    # As the worker leaves it (the API has no business completing jobs).
    api_rig.client.collection("jobs").document("job-1").update({"state": "completed"})
    stored = api_rig.document("job-1")
    attempts = [("/v1/jobs/job-1:cancel", None), ("/v1/jobs/job-1:reschedule", {"delay": "1s"})]
    for path, body in attempts:
        response = api_rig.call("POST", path, body)
        assert response.status_code == 400, response.text
        assert response.json()["error"]["status"] == "FAILED_PRECONDITION"
        assert fields_of(response) == ["state"]
    assert api_rig.document("job-1") == stored


def test_unknown_jobs_are_403_to_a_caller_that_may_see_only_its_own(api_rig: ApiRig) -> None:
    # AIP-211: permission before existence (services/api/ownership.py); the rig's caller is
    # not trusted, so a job it did not make is PERMISSION_DENIED whether or not it exists.
    for method, path in [("GET", "/v1/jobs/nosuch"), ("POST", "/v1/jobs/nosuch:cancel")]:
        response = api_rig.call(method, path)
        assert response.status_code == 403, response.text
        assert response.json()["error"]["status"] == "PERMISSION_DENIED"
    response = api_rig.call("POST", "/v1/jobs/nosuch:reschedule", {"delay": "1s"})
    assert response.status_code == 403


@pytest.mark.parametrize(
    ("kwargs", "status"),
    [
        ({"audience": "https://other.a.run.app"}, 401),
        ({"email": "stranger@test-project.iam.gserviceaccount.com"}, 403),
        ({"lifetime_s": 1, "now": 0}, 401),
        ({"extra_claims": {"email_verified": False}}, 403),
    ],
)
def test_tokens_from_the_local_issuer_are_verified(
    api_rig: ApiRig, kwargs: dict[str, object], status: int
) -> None:
    token = api_rig.token(**kwargs)  # type: ignore[arg-type]
    response = api_rig.call("POST", "/v1/jobs", schedule_body(), token=token)
    assert response.status_code == status, response.text
    assert api_rig.document("job-1") is None


def test_concurrent_identical_schedules_create_exactly_one_job(api_rig: ApiRig) -> None:
    token = api_rig.token()
    statuses: Counter[int] = Counter()
    barrier = threading.Barrier(8)
    lock = threading.Lock()

    def schedule() -> None:
        barrier.wait()
        response = api_rig.call("POST", "/v1/jobs", schedule_body(), token=token)
        with lock:
            statuses[response.status_code] += 1

    threads = [threading.Thread(target=schedule) for _ in range(8)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=60)
    assert statuses == Counter({201: 1, 200: 7})
    assert len(list(api_rig.client.collection("jobs").stream())) == 1
