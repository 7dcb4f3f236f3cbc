"""The store's operations end to end on the emulator: races, reclaims, idempotency, audit."""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from datetime import datetime, timedelta
from typing import Any

import pytest
from google.cloud import firestore

from services.jobs import schema
from services.jobs.clock import FakeClock
from services.jobs.errors import (
    AlreadyTerminal,
    AttemptsExhausted,
    JobNotFound,
    LeaseHeld,
    LeaseLost,
    ScheduleConflict,
    StaleGeneration,
    StoreMisconfigured,
    StoreRejected,
    StoreUnavailable,
    ValidationError,
)
from services.jobs.model import NewJob
from services.jobs.parts import ErrorInfo, Lease, Result
from services.jobs.record import Job
from services.jobs.state import State
from services.store.job_store import FirestoreJobStore
from tests.fixtures.store import mark_enqueued
from tests.integration.jobs.conftest import ACTION, LEASE, T0, WORKER, new_job

TIMEOUT = timedelta(minutes=10)
DOWN = ErrorInfo("unavailable", "storage answered 503")


def claimed(store: FirestoreJobStore, job_id: str, due_at: datetime = T0) -> int:
    """Schedule `job_id` and claim it; returns its generation."""
    store.schedule(new_job(job_id, due_at))
    (claim,) = store.claim_due(store.clock.now(), "run-1", 1)
    return claim.generation


def running(store: FirestoreJobStore, job_id: str, **extra: object) -> Job:
    """Schedule, claim, enqueue and start `job_id`; returns the started job (its lease)."""
    store.schedule(new_job(job_id, **extra))
    (claim,) = store.claim_due(store.clock.now(), "run-1", 1)
    mark_enqueued(store, job_id, claim.generation, "msg-1")
    return store.start(job_id, claim.generation, LEASE, WORKER)


def lease_of(job: Job) -> Lease:
    assert job.lease is not None
    return job.lease


def stored(store: FirestoreJobStore, job_id: str) -> Any:
    job = store.get(job_id)
    assert job is not None
    return job


# --- cancel ---------------------------------------------------------------------------------


def test_cancel_after_enqueue_makes_start_refuse(store: FirestoreJobStore) -> None:
    generation = claimed(store, "j")
    mark_enqueued(store, "j", generation, "msg-1")
    store.cancel("j", "media restored", "ann")
    with pytest.raises(AlreadyTerminal, match="already cancelled"):
        store.start("j", generation, LEASE, WORKER)
    job = stored(store, "j")
    assert (job.state, job.attempt, job.lease_owner) == (State.CANCELLED, 1, None)


def test_cancel_of_a_terminal_job_is_refused_unchanged_and_of_a_missing_one_not_found(
    store: FirestoreJobStore, firestore_client: firestore.Client
) -> None:
    store.schedule(new_job("j"))
    store.cancel("j", "first", "ann")
    ref = firestore_client.collection(schema.JOBS).document("j")
    before = ref.get().update_time
    with pytest.raises(AlreadyTerminal, match=r"'j'.*already cancelled"):
        store.cancel("j", "second", "bob")
    assert ref.get().update_time == before
    with pytest.raises(JobNotFound, match="'nope'"):
        store.cancel("nope", "x", "ann")


def test_cancel_of_a_running_job_is_requested_and_honoured_by_the_worker(
    store: FirestoreJobStore,
) -> None:
    started = running(store, "j")
    requested = store.cancel("j", "subject deleted upstream", "ann")
    assert requested.state is State.RUNNING
    assert requested.cancel_requested is not None
    assert requested.cancel_requested.by == "operator:ann"
    done = store.cancel_running(lease_of(started))
    assert done.state is State.CANCELLED
    assert done.history[-1].reason == "cancel honoured: subject deleted upstream"
    assert done.lease_owner is None


# --- reclaim and stale generations ---------------------------------------------------------------


def test_a_claim_is_reclaimed_only_after_the_timeout_with_an_audit_entry(
    store: FirestoreJobStore, clock: FakeClock
) -> None:
    old_generation = claimed(store, "j")
    clock.advance(TIMEOUT - timedelta(seconds=1))
    assert store.reclaim_expired(clock.now(), TIMEOUT, 10, "run-2") == []
    assert stored(store, "j").state is State.CLAIMED

    clock.advance(timedelta(seconds=2))
    (reclaimed,) = store.reclaim_expired(clock.now(), TIMEOUT, 10, "run-2")
    assert (reclaimed.job_id, reclaimed.from_state, reclaimed.to_state) == (
        "j",
        State.CLAIMED,
        State.DEFERRED,
    )
    audit = stored(store, "j").history[-1]
    assert (audit.from_state, audit.to_state, audit.by) == (
        State.CLAIMED,
        State.DEFERRED,
        "reclaimer:run-2",
    )
    assert "claim timeout" in audit.reason

    (again,) = store.claim_due(clock.now(), "run-3", 10)
    assert again.generation == old_generation + 1
    with pytest.raises(StaleGeneration, match="generation 1 is stale"):
        mark_enqueued(store, "j", old_generation, "late-msg")
    with pytest.raises(StaleGeneration):
        store.start("j", old_generation, LEASE, WORKER)
    job = stored(store, "j")
    assert (job.state, job.generation, job.message_id) == (State.CLAIMED, 2, None)


def test_an_expired_lease_is_reclaimed_and_the_old_workers_result_refused(
    store: FirestoreJobStore, clock: FakeClock
) -> None:
    started = running(store, "j")
    clock.advance(LEASE)
    assert store.reclaim_expired(clock.now(), TIMEOUT, 10, "run-2") == []  # lease_until == now
    clock.advance(timedelta(seconds=1))
    (reclaimed,) = store.reclaim_expired(clock.now(), TIMEOUT, 10, "run-2")
    assert (reclaimed.from_state, reclaimed.to_state) == (State.RUNNING, State.DEFERRED)
    job = stored(store, "j")
    assert job.last_error is not None
    assert job.last_error.code == "lease_expired"
    assert (job.lease_owner, job.lease_until) == (None, None)
    # The crashed run spent its retry cycle; it is due again at once, in the next attempt.
    assert (job.attempt, job.due_at) == (2, T0)
    assert job.history[-1].reason.endswith("attempt 2 of 5 next")

    with pytest.raises(LeaseLost, match="the job is deferred"):
        store.complete(lease_of(started), Result("deleted"))
    store.claim_due(clock.now(), "run-3", 10)
    with pytest.raises(LeaseLost, match="the job is claimed"):
        store.complete(lease_of(started), Result("deleted"))
    assert store.get_idempotency(job.idempotency_key) is None


def test_an_expired_lease_on_the_last_attempt_fails_the_job(
    store: FirestoreJobStore, clock: FakeClock
) -> None:
    running(store, "j", max_attempts=1)
    clock.advance(LEASE + timedelta(seconds=1))
    (reclaimed,) = store.reclaim_expired(clock.now(), TIMEOUT, 10, "run-2")
    assert reclaimed.to_state is State.FAILED
    job = stored(store, "j")
    assert (job.state, job.attempt) == (State.FAILED, 1)
    assert job.expire_at == clock.now() + timedelta(days=30)
    assert job.history[-1].reason.endswith("attempt 1 of 1 was the last")


def test_a_crash_loop_ends_failed_after_max_attempts_reclaims(
    store: FirestoreJobStore, clock: FakeClock
) -> None:
    running(store, "j", max_attempts=3)
    states = []
    for cycle in (1, 2, 3):
        assert stored(store, "j").attempt == cycle
        clock.advance(LEASE + timedelta(seconds=1))  # the worker died mid-action
        (reclaimed,) = store.reclaim_expired(clock.now(), TIMEOUT, 10, f"reclaim-{cycle}")
        states.append(reclaimed.to_state)
        if reclaimed.to_state is State.DEFERRED:
            (claim,) = store.claim_due(clock.now(), f"run-{cycle}", 1)
            store.start("j", claim.generation, LEASE, WORKER)
    assert states == [State.DEFERRED, State.DEFERRED, State.FAILED]
    assert (stored(store, "j").state, stored(store, "j").attempt) == (State.FAILED, 3)


def test_a_live_lease_is_refused_and_an_expired_one_taken_over(
    store: FirestoreJobStore, clock: FakeClock
) -> None:
    started = running(store, "j")
    generation = started.generation
    with pytest.raises(LeaseHeld):
        store.start("j", generation, LEASE, "worker-2")
    clock.advance(LEASE + timedelta(seconds=1))
    taken = store.start("j", generation, LEASE, "worker-2")
    # The lapsed lease spent its cycle, exactly as when the reclaimer finds it: attempt + 1.
    assert (taken.lease_owner, taken.attempt) == ("worker-2", 2)
    with pytest.raises(LeaseLost, match="'worker-1' no longer holds the lease"):
        store.complete(lease_of(started), Result("deleted"))
    store.complete(lease_of(taken), Result("deleted"))


def test_reclaim_is_bounded_by_its_limit(store: FirestoreJobStore, clock: FakeClock) -> None:
    for n in range(5):
        store.schedule(new_job(f"j{n}"))
    store.claim_due(clock.now(), "run-1", 10)
    clock.advance(TIMEOUT + timedelta(seconds=1))
    assert len(store.reclaim_expired(clock.now(), TIMEOUT, 3, "run-2")) == 3
    assert len(store.reclaim_expired(clock.now(), TIMEOUT, 3, "run-3")) == 2


# --- the push-before-enqueue race ----------------------------------------------------------------


def test_a_push_that_beats_the_enqueue_record_starts_and_the_late_enqueue_never_moves_it_back(
    store: FirestoreJobStore,
) -> None:
    generation = claimed(store, "j")
    started = store.start("j", generation, LEASE, WORKER)
    assert started.state is State.RUNNING
    late = mark_enqueued(store, "j", generation, "msg-9")
    assert late.state is State.RUNNING
    job = stored(store, "j")
    assert (job.state, job.message_id, job.lease_owner) == (State.RUNNING, "msg-9", WORKER)
    assert [e.to_state for e in job.history] == [State.DEFERRED, State.CLAIMED, State.RUNNING]
    # and after completion too
    store.complete(lease_of(started), Result("deleted"))
    assert mark_enqueued(store, "j", generation, "msg-9").state is State.COMPLETED


# --- worker outcomes ----------------------------------------------------------------------------


@pytest.mark.builtin_emulator("billing counters")
def test_complete_writes_a_shared_keys_document_in_the_same_transaction(
    store: FirestoreJobStore, clock: FakeClock, firestore_stats: Any
) -> None:
    started = running(store, "j", idempotency_key="media-j:retention-1")
    firestore_stats.reset()
    done = store.complete(lease_of(started), Result("deleted", {"objects": 2}))
    counts = firestore_stats.get()
    assert counts["calls"].get("Commit") == 1
    # The job and the key's document (its in-progress hold) are read, both written.
    assert (counts["document_reads"], counts["document_writes"]) == (2, 2)
    assert done.state is State.COMPLETED
    assert done.expire_at == clock.now() + timedelta(days=30)
    record = store.get_idempotency(done.idempotency_key)
    assert record is not None
    assert (record.job_id, record.outcome, dict(record.details)) == ("j", "deleted", {"objects": 2})
    assert record.expire_at == done.expire_at


def test_release_hands_the_job_back_to_the_queue_and_the_redelivery_starts_it_again(
    store: FirestoreJobStore,
) -> None:
    started = running(store, "j")
    released = store.release(lease_of(started), DOWN)
    assert (released.state, released.lease_owner) == (State.ENQUEUED, None)
    assert released.last_error is not None
    assert released.last_error.code == "unavailable"
    again = store.start("j", started.generation, LEASE, "worker-2")
    # Quick redeliveries are counted by Pub/Sub's deliveryAttempt, not by the record.
    assert (again.state, again.attempt) == (State.RUNNING, 1)


def test_release_and_start_never_refuse_or_spend_attempts_even_in_the_last_one(
    store: FirestoreJobStore,
) -> None:
    started = running(store, "j", max_attempts=1)
    for n in range(3):
        released = store.release(lease_of(started), DOWN)
        assert (released.state, released.attempt) == (State.ENQUEUED, 1)
        started = store.start("j", started.generation, LEASE, f"worker-{n + 2}")
        assert (started.state, started.attempt) == (State.RUNNING, 1)


def test_retry_later_defers_to_the_new_due_time_until_attempts_run_out(
    store: FirestoreJobStore, clock: FakeClock
) -> None:
    started = running(store, "j", max_attempts=2)
    month = timedelta(days=30)
    deferred = store.retry_later(lease_of(started), clock.now() + month, DOWN)
    assert (deferred.state, deferred.due_at, deferred.attempt) == (
        State.DEFERRED,
        T0 + month,
        2,
    )
    assert deferred.history[-1].reason.endswith("attempt 2 of 2 next")
    assert store.claim_due(clock.now(), "run-2", 10) == []
    clock.advance(month)
    (claim,) = store.claim_due(clock.now(), "run-3", 10)
    assert claim.generation == 2
    second = store.start("j", 2, LEASE, WORKER)
    assert second.attempt == 2
    with pytest.raises(AttemptsExhausted, match="attempt 2 of 2"):
        store.retry_later(lease_of(second), clock.now() + month, DOWN)
    unchanged = stored(store, "j")
    assert (unchanged.state, unchanged.attempt, unchanged.due_at) == (State.RUNNING, 2, T0 + month)
    failed = store.fail(lease_of(second), DOWN)
    assert failed.state is State.FAILED
    assert failed.expire_at == clock.now() + timedelta(days=30)


def test_history_keeps_only_the_newest_entries(
    firestore_client: firestore.Client, clock: FakeClock
) -> None:
    store = FirestoreJobStore(firestore_client, clock, history_limit=3)
    store.schedule(new_job("j"))
    for day in range(1, 6):
        store.reschedule("j", T0 + timedelta(days=day), f"move {day}", "ann")
    job = stored(store, "j")
    # The creation entry stays whatever the count (finding 9), then the newest.
    assert [e.reason.split(" (")[0] for e in job.history] == ["scheduled", "move 4", "move 5"]


# --- schedule ----------------------------------------------------------------------------------


@pytest.mark.builtin_emulator("billing counters")
def test_scheduling_the_same_job_twice_is_a_no_op(
    store: FirestoreJobStore, firestore_stats: Any
) -> None:
    first = store.schedule(new_job("j"))
    firestore_stats.reset()
    second = store.schedule(new_job("j"))
    assert (first.created, second.created) == (True, False)
    assert second.job == first.job
    assert firestore_stats.get()["document_writes"] == 0


def test_scheduling_again_after_a_reschedule_still_matches_the_original_request(
    store: FirestoreJobStore,
) -> None:
    store.schedule(new_job("j"))
    store.reschedule("j", T0 + timedelta(days=3), "later", "ann")
    again = store.schedule(new_job("j"))
    assert not again.created
    assert again.job.due_at == T0 + timedelta(days=3)


def test_scheduling_different_content_under_an_existing_id_conflicts_unchanged(
    store: FirestoreJobStore, firestore_client: firestore.Client
) -> None:
    store.schedule(new_job("j"))
    ref = firestore_client.collection(schema.JOBS).document("j")
    before = ref.get().update_time
    other = dataclasses.replace(
        new_job("j", T0 + timedelta(days=1)), params={"bucket": "media-other", "object": "o"}
    )
    # The due time is not part of the decision: only the params are named.
    with pytest.raises(ScheduleConflict, match=r"different params\.bucket, params\.object;"):
        store.schedule(other)
    assert ref.get().update_time == before


INVALID: list[tuple[str, NewJob]] = [
    ("unknown action", dataclasses.replace(new_job("j"), action="media.explode")),
    ("naive due_at", new_job("j", datetime(2026, 1, 1))),
    ("empty subject", dataclasses.replace(new_job("j"), subject="")),
    ("slash in ID", new_job("a/b")),
    ("dot ID", new_job(".")),
    ("dot-dot ID", new_job("..")),
    ("reserved ID", new_job("__x__")),
    ("ID over 1500 bytes", new_job("x" * 1501)),
    ("params over 16 KiB", dataclasses.replace(new_job("j"), params={"x": "y" * 16_400})),
    ("params not JSON", dataclasses.replace(new_job("j"), params={"x": object()})),
    ("max_attempts 0", new_job("j", max_attempts=0)),
]


@pytest.mark.builtin_emulator("billing counters")
@pytest.mark.parametrize(("why", "job"), INVALID, ids=[why for why, _ in INVALID])
def test_an_invalid_job_is_refused_with_nothing_written(
    store: FirestoreJobStore,
    firestore_client: firestore.Client,
    firestore_stats: Any,
    why: str,
    job: NewJob,
) -> None:
    firestore_stats.reset()
    with pytest.raises(ValidationError):
        store.schedule(job)
    counts = firestore_stats.get()
    assert counts["document_writes"] == 0
    assert counts["calls"].get("Commit", 0) == 0
    assert list(firestore_client.collection(schema.JOBS).limit(1).stream()) == []


def test_a_store_with_more_known_actions_accepts_them(
    firestore_client: firestore.Client, clock: FakeClock
) -> None:
    store = FirestoreJobStore(firestore_client, clock, known_actions={ACTION, "media.archive"})
    job = dataclasses.replace(new_job("j"), action="media.archive")
    assert store.schedule(job).created


# --- list, stats, control, errors -----------------------------------------------------------------


def test_list_pages_through_jobs_in_due_order_with_each_filter(
    store: FirestoreJobStore, clock: FakeClock
) -> None:
    for n in range(7):
        store.schedule(new_job(f"j{n}", T0 + timedelta(hours=n - 3)))  # j0..j3 due by T0
    seen, cursor = [], None
    while True:
        page = store.list_jobs(limit=3, cursor=cursor)
        seen += [j.job_id for j in page.jobs]
        if page.next_cursor is None:
            break
        cursor = page.next_cursor
    assert seen == [f"j{n}" for n in range(7)]

    overdue = store.list_jobs(overdue_at=clock.now(), limit=10)
    assert [j.job_id for j in overdue.jobs] == ["j0", "j1", "j2", "j3"]
    assert store.list_jobs(due_before=T0, limit=10).jobs[-1].job_id == "j2"
    store.claim_due(clock.now(), "run-1", 2)
    assert [j.job_id for j in store.list_jobs(state=State.CLAIMED).jobs] == ["j0", "j1"]
    clock.advance(TIMEOUT + timedelta(seconds=1))
    stuck = store.list_jobs(claimed_before=clock.now() - TIMEOUT, limit=1)
    assert len(stuck.jobs) == 1
    assert stuck.next_cursor is not None
    rest = store.list_jobs(claimed_before=clock.now() - TIMEOUT, cursor=stuck.next_cursor)
    assert [j.job_id for j in stuck.jobs + rest.jobs] == ["j0", "j1"]
    with pytest.raises(ValidationError, match="cursor"):
        store.list_jobs(cursor="garbage!")


@pytest.mark.builtin_emulator("billing counters")
def test_stats_count_the_backlog_without_reading_every_document(
    store: FirestoreJobStore,
    clock: FakeClock,
    seed: Callable[..., list[str]],
    firestore_stats: Any,
) -> None:
    seed(30, T0 - timedelta(minutes=5))
    seed(20, T0 + timedelta(days=1), prefix="future")
    store.claim_due(clock.now(), "run-1", 5)
    clock.advance(TIMEOUT + timedelta(minutes=1))
    firestore_stats.reset()
    stats = store.stats(clock.now(), TIMEOUT)
    assert stats.due_count == 25
    assert stats.stuck_claims == 5
    assert stats.expired_leases == 0
    assert stats.oldest_overdue_age_s == (TIMEOUT + timedelta(minutes=6)).total_seconds()
    assert stats.per_state[State.DEFERRED] == 45
    assert stats.per_state[State.CLAIMED] == 5
    assert firestore_stats.get()["document_reads"] < 20


@pytest.mark.builtin_emulator("billing counters")
def test_control_has_defaults_and_audited_validated_changes(
    store: FirestoreJobStore, clock: FakeClock, firestore_stats: Any
) -> None:
    assert store.get_control().paused is False
    paused = store.update_control("ann", "storage incident", paused=True, catch_up_rate=5)
    assert (paused.paused, paused.catch_up_rate, paused.changed_by) == (True, 5.0, "ann")
    assert paused.changed_at == clock.now()
    firestore_stats.reset()
    with pytest.raises(ValidationError, match=r"claim_budget.*catch_up_rate"):
        store.update_control("ann", "oops", claim_budget=0, catch_up_rate=-1)
    assert firestore_stats.get()["document_writes"] == 0
    store.update_control("bob", "incident over", paused=False, claim_timeout=timedelta(minutes=3))
    control = store.get_control()
    assert (control.paused, control.claim_timeout, control.reason) == (
        False,
        timedelta(minutes=3),
        "incident over",
    )
    assert [c.by for c in control.history] == ["ann", "bob"]


@pytest.mark.builtin_emulator("fault injection")
def test_firestore_refusals_surface_as_configuration_errors_not_outages(
    store: FirestoreJobStore, firestore_emulator: Any
) -> None:
    # A misconfigured deploy (a missing role) must not read as "firestore unavailable".
    store.schedule(new_job("j"))
    firestore_emulator.inject_fault("BatchGetDocuments", "PERMISSION_DENIED")
    try:
        with pytest.raises(StoreMisconfigured, match="PermissionDenied"):
            store.get("j")
        firestore_emulator.inject_fault("Commit", "PERMISSION_DENIED")
        with pytest.raises(StoreMisconfigured):
            store.cancel("j", "x", "ann")
    finally:
        firestore_emulator.clear_faults()
    assert stored(store, "j").state is State.DEFERRED


@pytest.mark.builtin_emulator("fault injection")
@pytest.mark.parametrize(
    ("code", "error"),
    [
        ("INVALID_ARGUMENT", StoreRejected),
        ("FAILED_PRECONDITION", StoreMisconfigured),
        ("NOT_FOUND", StoreMisconfigured),
        ("UNAVAILABLE", StoreUnavailable),
    ],
)
def test_each_firestore_status_maps_to_its_error(
    firestore_client: firestore.Client,
    clock: FakeClock,
    firestore_emulator: Any,
    code: str,
    error: type[Exception],
) -> None:
    store = FirestoreJobStore(firestore_client, clock, timeout_s=0.5)
    store.schedule(new_job("j"))
    firestore_emulator.inject_fault("BatchGetDocuments", code, count=1000)
    try:
        with pytest.raises(error) as raised:
            store.get("j")
    finally:
        firestore_emulator.clear_faults()
    assert type(raised.value) is error
