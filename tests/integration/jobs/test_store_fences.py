"""Regression tests for issue 12's findings at the store, on the emulator with the real client.

Each test names its finding; each failed on the code before the fences (a stale delivery's
result accepted, a cancel ignored, a record that stopped claiming, a job left where nothing
moves it, an unbounded document, results dropped on a later error).
"""

from __future__ import annotations

from datetime import timedelta
from typing import Any

import pytest
from google.cloud import firestore

from services.jobs import schema
from services.jobs.clock import FakeClock
from services.jobs.errors import (
    InvalidRecord,
    LeaseHeld,
    LeaseLost,
    StaleGeneration,
    StoreUnavailable,
    ValidationError,
)
from services.jobs.limits import MAX_ERROR_MESSAGE_BYTES
from services.jobs.parts import ErrorInfo, Lease, Result
from services.jobs.record import Job
from services.jobs.state import State
from services.jobs.transitions import INVALID_RECORD
from services.store.job_store import FirestoreJobStore
from services.store.reclaims import Reclaims
from tests.fixtures.store import mark_enqueued, stored_document
from tests.integration.jobs.conftest import LEASE, T0, WORKER, new_job

TIMEOUT = timedelta(minutes=10)
DOWN = ErrorInfo("transient", "storage answered 503")


def running(store: FirestoreJobStore, job_id: str, **extra: Any) -> Job:
    store.schedule(new_job(job_id, **extra))
    (claim,) = [c for c in store.claim_due(store.clock.now(), "run-1", 100) if c.job_id == job_id]
    mark_enqueued(store, job_id, claim.generation, f"msg-{job_id}")
    return store.start(job_id, claim.generation, LEASE, WORKER)


def lease_of(job: Job) -> Lease:
    assert job.lease is not None
    return job.lease


def stored(store: FirestoreJobStore, job_id: str) -> Job:
    job = store.get(job_id)
    assert job is not None
    return job


# --- 1. the lease is per delivery, not per process ------------------------------------------


def test_a_stale_delivery_in_the_same_process_is_refused_after_a_take_over(
    store: FirestoreJobStore, clock: FakeClock
) -> None:
    first = running(store, "j")
    clock.advance(LEASE + timedelta(seconds=1))
    # The redelivery runs in the same instance: the same worker name as the slow one.
    second = store.start("j", first.generation, LEASE, WORKER)
    assert second.lease_owner == first.lease_owner == WORKER
    assert second.lease_token != first.lease_token
    for late in (
        lambda: store.fail(lease_of(first), ErrorInfo("permanent", "bucket gone")),
        lambda: store.complete(lease_of(first), Result("deleted")),
        lambda: store.release(lease_of(first), DOWN),
        lambda: store.retry_later(lease_of(first), clock.now() + timedelta(days=1), DOWN),
        lambda: store.extend_lease(lease_of(first), LEASE),
    ):
        with pytest.raises(LeaseLost, match="another delivery took the lease over"):
            late()
    job = stored(store, "j")
    assert (job.state, job.lease_token) == (State.RUNNING, second.lease_token)
    store.complete(lease_of(second), Result("deleted"))
    assert stored(store, "j").state is State.COMPLETED


@pytest.mark.parametrize("key", [None, "media-1:shared"])
def test_a_lease_carries_the_update_time_of_the_jobs_own_write(
    store: FirestoreJobStore, firestore_client: firestore.Client, key: str | None
) -> None:
    # What a read-free compare-and-set after start would condition on (a shared key's
    # document is written in the same commit and must not be mistaken for the job's).
    job = running(store, "j", idempotency_key=key)
    stored_at = firestore_client.collection(schema.JOBS).document("j").get().update_time
    assert lease_of(job).update_time == stored_at


# --- 2. the lease is renewed while the holder works -----------------------------------------


def test_a_heartbeat_extends_the_lease_so_the_reclaimer_leaves_it_alone(
    store: FirestoreJobStore, clock: FakeClock
) -> None:
    job = running(store, "j")
    lease = lease_of(job)
    for _ in range(5):  # five lease lengths of healthy work, beating every half lease
        clock.advance(LEASE / 2)
        beaten = store.extend_lease(lease, LEASE)
        lease = lease_of(beaten)
        assert store.reclaim_expired(clock.now(), TIMEOUT, 10, "reclaimer") == []
    assert stored(store, "j").lease_until == clock.now() + LEASE
    assert store.complete(lease, Result("deleted")).state is State.COMPLETED


def test_a_heartbeat_after_the_lease_lapsed_and_was_reclaimed_is_refused(
    store: FirestoreJobStore, clock: FakeClock
) -> None:
    job = running(store, "j")
    clock.advance(LEASE + timedelta(seconds=1))
    store.reclaim_expired(clock.now(), TIMEOUT, 10, "reclaimer")
    with pytest.raises(LeaseLost, match="the job is deferred"):
        store.extend_lease(lease_of(job), LEASE)


# --- 3. one malformed document never stops claiming ------------------------------------------

MALFORMED: dict[str, dict[str, Any]] = {
    "created_at-missing": {"created_at": firestore.DELETE_FIELD},
    "params-a-string": {"params": "bucket=b"},
    "attempt-a-word": {"attempt": "one"},
    "history-entry-without-to": {"history": [{"at": T0, "from": None, "by": "x"}]},
    "claim-without-claimed_at": {"claim": {"run_id": "r", "generation": 3}},
}


def _spoil(client: firestore.Client, job_id: str, fields: dict[str, Any]) -> None:
    client.collection(schema.JOBS).document(job_id).update(fields)


@pytest.mark.parametrize("kind", sorted(MALFORMED))
def test_a_malformed_due_document_is_quarantined_and_claiming_goes_on(
    store: FirestoreJobStore, firestore_client: firestore.Client, kind: str
) -> None:
    for job_id in ("a-good", "b-bad", "c-good"):
        store.schedule(new_job(job_id))
    _spoil(firestore_client, "b-bad", MALFORMED[kind])
    seen: list[str] = []

    claimed = store.claim_due(store.clock.now(), "run-1", 10, on_quarantine=seen.append)

    assert sorted(c.job_id for c in claimed) == ["a-good", "c-good"]
    assert seen == ["b-bad"]
    raw = stored_document(firestore_client, "b-bad")
    assert raw is not None
    assert raw["state"] == "failed"
    assert raw["last_error"]["code"] == INVALID_RECORD
    assert raw["quarantine"]["from_state"] == "deferred"
    assert raw["history"][-1]["to"] == "failed"
    # Nothing claims it again; reading it says why instead of crashing.
    assert store.claim_due(store.clock.now(), "run-2", 10) == []
    with pytest.raises(InvalidRecord):
        store.get("b-bad")


def test_a_page_of_only_malformed_documents_does_not_hide_the_good_ones_behind_it(
    store: FirestoreJobStore, firestore_client: firestore.Client
) -> None:
    for n in range(3):
        store.schedule(new_job(f"bad-{n}", T0 - timedelta(hours=1)))
        _spoil(firestore_client, f"bad-{n}", {"attempt": "x"})
    store.schedule(new_job("good"))
    claimed = store.claim_due(store.clock.now(), "run-1", 10, page_size=2)
    assert [c.job_id for c in claimed] == ["good"]


def test_a_push_for_a_malformed_job_is_refused_as_invalid_after_quarantining_it(
    store: FirestoreJobStore, firestore_client: firestore.Client
) -> None:
    job = running(store, "j")
    _spoil(firestore_client, "j", {"params": 7})
    with pytest.raises(InvalidRecord, match="params"):
        store.start("j", job.generation, LEASE, "worker-2")
    raw = stored_document(firestore_client, "j")
    assert raw is not None and raw["state"] == "failed"


@pytest.mark.parametrize("due_at", ["2026-01-01T00:00:00Z", 1767225600, None])
def test_a_due_at_of_the_wrong_type_is_found_by_the_reclaimer_and_quarantined(
    store: FirestoreJobStore, firestore_client: firestore.Client, clock: FakeClock, due_at: Any
) -> None:
    store.schedule(new_job("wrong"))
    store.schedule(new_job("right", T0 + timedelta(days=1)))
    _spoil(firestore_client, "wrong", {"due_at": due_at})
    assert store.claim_due(clock.now(), "run-1", 10) == []  # no due query can see it

    report = store.reclaim_expired(clock.now(), TIMEOUT, 10, "reclaimer-1")

    assert report.quarantined == ("wrong",)
    raw = stored_document(firestore_client, "wrong")
    assert raw is not None and raw["state"] == "failed"
    assert "due_at" in raw["last_error"]["message"]
    assert stored(store, "right").state is State.DEFERRED


# --- 4. a job enqueued with no message is reclaimed --------------------------------------------


def test_a_job_left_enqueued_past_the_timeout_is_reclaimed_and_its_old_message_fenced(
    store: FirestoreJobStore, clock: FakeClock
) -> None:
    store.schedule(new_job("j"))
    (claim,) = store.claim_due(clock.now(), "run-1", 1)
    mark_enqueued(store, "j", claim.generation, "msg-lost")  # then the push is dead-lettered
    clock.advance(TIMEOUT - timedelta(seconds=1))
    assert store.reclaim_expired(clock.now(), TIMEOUT, 10, "r", enqueued_timeout=TIMEOUT) == []
    clock.advance(timedelta(seconds=2))

    (reclaimed,) = store.reclaim_expired(clock.now(), TIMEOUT, 10, "r", enqueued_timeout=TIMEOUT)

    assert (reclaimed.from_state, reclaimed.to_state, reclaimed.reason) == (
        State.ENQUEUED,
        State.DEFERRED,
        "enqueued_timeout",
    )
    job = stored(store, "j")
    assert job.history[-1].by == "reclaimer:r" and "msg-lost" in job.history[-1].reason
    (again,) = store.claim_due(clock.now(), "run-2", 1)
    assert again.generation == claim.generation + 1
    with pytest.raises(StaleGeneration):
        store.start("j", claim.generation, LEASE, WORKER)  # the old message, if it arrives


def test_release_sets_enqueued_at_so_the_stale_gauge_measures_from_the_release(
    store: FirestoreJobStore, clock: FakeClock
) -> None:
    store.schedule(new_job("j"))
    (claim,) = store.claim_due(clock.now(), "run-1", 1)
    # The push beat the mark: the job never had enqueued_at before this release.
    started = store.start("j", claim.generation, LEASE, WORKER)
    clock.advance(timedelta(seconds=30))
    released = store.release(lease_of(started), DOWN, message_id="msg-7")
    assert (released.state, released.enqueued_at, released.message_id) == (
        State.ENQUEUED,
        clock.now(),
        "msg-7",
    )
    backlog = store.backlog(clock.now() + TIMEOUT * 2, TIMEOUT, TIMEOUT)
    assert backlog.stale_enqueued == 1


# --- 5. a shared idempotency key is held inside start's transaction --------------------------


def test_a_second_job_sharing_an_explicit_key_is_refused_while_the_first_holds_it(
    store: FirestoreJobStore, clock: FakeClock
) -> None:
    key = "media-1:retention-7"
    first = running(store, "a", idempotency_key=key)
    store.schedule(new_job("b", idempotency_key=key))
    (claim_b,) = store.claim_due(clock.now(), "run-2", 10)
    with pytest.raises(LeaseHeld, match="shared idempotency key"):
        store.start("b", claim_b.generation, LEASE, "worker-2")
    store.complete(lease_of(first), Result("deleted", {"n": 1}))
    # Now the key holds a result: b starts and the worker reuses it.
    second = store.start("b", claim_b.generation, LEASE, "worker-2")
    record = store.get_idempotency(key)
    assert record is not None and (record.job_id, record.outcome) == ("a", "deleted")
    assert second.state is State.RUNNING


def test_completion_is_refused_when_the_shared_key_was_taken_over(
    store: FirestoreJobStore, clock: FakeClock
) -> None:
    key = "media-1:retention-8"
    first = running(store, "a", idempotency_key=key)
    store.schedule(new_job("b", idempotency_key=key))
    (claim_b,) = store.claim_due(clock.now(), "run-2", 10)
    clock.advance(LEASE + timedelta(seconds=1))  # a's holder stopped heartbeating
    store.start("b", claim_b.generation, LEASE, "worker-2")
    with pytest.raises(LeaseLost, match="took the shared idempotency key over"):
        store.complete(lease_of(first), Result("deleted"))


@pytest.mark.builtin_emulator("billing counters")
def test_a_derived_key_writes_no_second_document(
    store: FirestoreJobStore, firestore_stats: Any, firestore_client: firestore.Client
) -> None:
    job = running(store, "j")
    firestore_stats.reset()
    done = store.complete(lease_of(job), Result("deleted"))
    counts = firestore_stats.get()
    assert (counts["document_reads"], counts["document_writes"]) == (1, 1)
    assert done.result is not None and done.result.outcome == "deleted"
    assert list(firestore_client.collection(schema.IDEMPOTENCY).stream()) == []


# --- 6. a cancel request cancels -------------------------------------------------------------


@pytest.mark.parametrize("move", ["release", "retry_later", "fail"])
def test_a_cancel_requested_while_running_ends_cancelled_whatever_the_worker_does_next(
    store: FirestoreJobStore, clock: FakeClock, move: str
) -> None:
    job = running(store, "j")
    store.cancel("j", "media restored", "ann")
    lease = lease_of(job)
    if move == "release":
        ended = store.release(lease, DOWN)
    elif move == "retry_later":
        ended = store.retry_later(lease, clock.now() + timedelta(days=30), DOWN)
    else:
        ended = store.fail(lease, ErrorInfo("permanent", "bucket gone"))
    assert ended.state is State.CANCELLED
    assert ended.history[-1].reason == "cancel honoured: media restored"
    assert ended.expire_at is not None


def test_the_reclaimer_cancels_an_expired_lease_with_a_cancel_request(
    store: FirestoreJobStore, clock: FakeClock
) -> None:
    running(store, "j")
    store.cancel("j", "media restored", "ann")
    clock.advance(LEASE + timedelta(seconds=1))
    (reclaimed,) = store.reclaim_expired(clock.now(), TIMEOUT, 10, "reclaimer")
    assert (reclaimed.to_state, reclaimed.reason) == (State.CANCELLED, "cancel_requested")
    assert stored(store, "j").state is State.CANCELLED


def test_a_heartbeat_shows_a_cancel_request_that_arrived_mid_action(
    store: FirestoreJobStore,
) -> None:
    job = running(store, "j")
    store.cancel("j", "stop", "ann")
    beaten = store.extend_lease(lease_of(job), LEASE)
    assert beaten.cancel_requested is not None
    cancelled = store.cancel_running(lease_of(beaten), progress={"deleted": ["a"]})
    assert (cancelled.state, cancelled.progress) == (State.CANCELLED, {"deleted": ["a"]})


# --- 8. bounded documents --------------------------------------------------------------------


def test_huge_error_messages_and_result_details_never_make_a_transition_fail(
    store: FirestoreJobStore, clock: FakeClock
) -> None:
    job = running(store, "j")
    huge = "x" * (2 * 1024 * 1024)  # more than Firestore's 1 MiB document limit
    released = store.release(lease_of(job), ErrorInfo("transient", huge))
    assert released.last_error is not None
    assert len(released.last_error.message.encode()) <= MAX_ERROR_MESSAGE_BYTES
    started = store.start("j", job.generation, LEASE, "worker-2")
    done = store.complete(lease_of(started), Result("deleted", {"log": huge}))
    assert done.state is State.COMPLETED
    assert done.result is not None and done.result.details["truncated"] is True


def test_an_operator_reason_over_the_limit_is_refused_before_anything_is_written(
    store: FirestoreJobStore,
) -> None:
    store.schedule(new_job("j"))
    with pytest.raises(ValidationError, match="reason is longer than 1024 bytes"):
        store.cancel("j", "r" * 2000, "ann")
    with pytest.raises(ValidationError, match="reason is longer"):
        store.reschedule("j", T0 + timedelta(days=1), "r" * 2000, "ann")
    assert stored(store, "j").state is State.DEFERRED


# --- 9. the smaller inconsistencies ----------------------------------------------------------


@pytest.mark.builtin_emulator("fault injection")
def test_reclaim_keeps_what_it_committed_when_a_later_step_fails(
    firestore_client: firestore.Client,
    clock: FakeClock,
    firestore_emulator: Any,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    store = FirestoreJobStore(firestore_client, clock, timeout_s=0.3)
    running(store, "last", max_attempts=1)
    clock.advance(LEASE + timedelta(seconds=1))

    def step_then_outage(step: Any, limit: int, tally: Any) -> None:
        if step.name == "enqueued_timeout":  # Firestore goes away after the leases step
            firestore_emulator.inject_fault("BeginTransaction", "UNAVAILABLE", count=1000)
            firestore_emulator.inject_fault("RunQuery", "UNAVAILABLE", count=1000)
        Reclaims._reclaim_step(store, step, limit, tally)

    monkeypatch.setattr(store, "_reclaim_step", step_then_outage)
    try:
        report = store.reclaim_expired(clock.now(), TIMEOUT, 10, "r", enqueued_timeout=TIMEOUT)
    finally:
        firestore_emulator.clear_faults()
    # The failed job was committed before the outage: it is reported (so the scan logs its
    # job_failed line), not dropped with the error.
    assert [(r.job_id, r.to_state) for r in report] == [("last", State.FAILED)]
    assert isinstance(report.stopped_by, StoreUnavailable)
    assert stored(store, "last").state is State.FAILED


def test_a_take_over_on_the_last_attempt_fails_the_job_as_the_reclaimer_would(
    store: FirestoreJobStore, clock: FakeClock
) -> None:
    job = running(store, "j", max_attempts=1)
    clock.advance(LEASE + timedelta(seconds=1))
    ended = store.start("j", job.generation, LEASE, "worker-2")
    assert (ended.state, ended.attempt, ended.lease_token) == (State.FAILED, 1, None)
    assert ended.last_error is not None and ended.last_error.code == "lease_expired"
    assert ended.history[-1].reason.endswith("attempt 1 of 1 was the last")


# --- the read-free completion (a compare-and-set on start's update_time) ---------------------


@pytest.mark.builtin_emulator("billing counters")
def test_completing_on_the_started_record_costs_one_write_and_no_read(
    store: FirestoreJobStore, firestore_stats: Any
) -> None:
    job = running(store, "j")
    firestore_stats.reset()
    done = store.complete(lease_of(job), Result("deleted"), basis=job)
    counts = firestore_stats.get()
    assert (counts["document_reads"], counts["document_writes"]) == (0, 1)
    assert done.state is State.COMPLETED
    assert stored(store, "j").state is State.COMPLETED
    assert done.update_time == store._docs.jobs.document("j").get().update_time


@pytest.mark.builtin_emulator("billing counters")
def test_a_record_changed_since_start_is_completed_in_a_transaction_instead(
    store: FirestoreJobStore, firestore_stats: Any
) -> None:
    job = running(store, "j")
    store.cancel("j", "too late", "ann")  # a cancel request changes the document
    firestore_stats.reset()
    done = store.complete(lease_of(job), Result("deleted"), basis=job)
    assert done.state is State.COMPLETED  # the side effect happened: completed, not lost
    assert firestore_stats.get()["document_reads"] >= 1  # refused CAS, then the transaction


def test_a_stale_basis_after_a_take_over_is_refused(
    store: FirestoreJobStore, clock: FakeClock
) -> None:
    first = running(store, "j")
    clock.advance(LEASE + timedelta(seconds=1))
    second = store.start("j", first.generation, LEASE, WORKER)
    with pytest.raises(LeaseLost):
        store.complete(lease_of(first), Result("deleted"), basis=first)
    assert stored(store, "j").lease_token == second.lease_token
