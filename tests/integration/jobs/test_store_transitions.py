"""Every store operation tried from every state: allowed exactly where the state table says,
refused otherwise with the document left untouched (same update time)."""

from __future__ import annotations

from collections.abc import Callable
from datetime import timedelta

import pytest
from google.cloud import firestore

from services.jobs import schema
from services.jobs.clock import FakeClock
from services.jobs.errors import InvalidTransition, LeaseHeld, LeaseLost
from services.jobs.parts import ErrorInfo, Lease, Result
from services.jobs.record import Job
from services.jobs.state import TRANSITIONS, State
from services.store.job_store import FirestoreJobStore
from tests.fixtures.store import mark_enqueued
from tests.integration.jobs.conftest import LEASE, T0, WORKER, new_job

ERROR = ErrorInfo("unavailable", "storage answered 503")
TIMEOUT = timedelta(minutes=10)


def put_in(store: FirestoreJobStore, state: State, job_id: str = "j") -> Job:
    """Drive a fresh job to `state` through the store's own operations."""
    store.schedule(new_job(job_id))
    if state is State.DEFERRED:
        return _get(store, job_id)
    if state is State.CANCELLED:
        return store.cancel(job_id, "not needed", "ann")
    (claim,) = store.claim_due(T0, "run-1", 1)
    if state is State.CLAIMED:
        return _get(store, job_id)
    mark_enqueued(store, job_id, claim.generation, "msg-1")
    if state is State.ENQUEUED:
        return _get(store, job_id)
    job = store.start(job_id, claim.generation, LEASE, WORKER)
    if state is State.RUNNING:
        return job
    if state is State.COMPLETED:
        return store.complete(_lease(job), Result("deleted"))
    assert state is State.FAILED
    return store.fail(_lease(job), ERROR)


def _lease(job: Job) -> Lease:
    """The job's running lease, or (from any other state) the one its last holder had: what
    a late delivery would present."""
    return job.lease or Lease(job.job_id, job.generation, "no-such-token", WORKER, T0)


def _get(store: FirestoreJobStore, job_id: str) -> Job:
    job = store.get(job_id)
    assert job is not None
    return job


Operation = Callable[[FirestoreJobStore, Job, FakeClock], object]


def _claim(store: FirestoreJobStore, job: Job, clock: FakeClock) -> object:
    return store.claim_due(clock.now(), "run-2", 10)


def _reclaim(store: FirestoreJobStore, job: Job, clock: FakeClock) -> object:
    clock.advance(TIMEOUT + LEASE)
    return store.reclaim_expired(clock.now(), TIMEOUT, 10, "run-3", enqueued_timeout=TIMEOUT)


def _cancel_running(store: FirestoreJobStore, job: Job, clock: FakeClock) -> object:
    if job.state is State.RUNNING:
        store.cancel(job.job_id, "stop", "ann")
    return store.cancel_running(_lease(job))


def _start(store: FirestoreJobStore, job: Job, clock: FakeClock) -> object:
    if job.state is State.RUNNING:
        clock.advance(LEASE + timedelta(seconds=1))  # the previous attempt's lease expired
    return store.start(job.job_id, job.generation, LEASE, "worker-2")


# name → (target state, operation)
OPERATIONS: dict[str, tuple[State, Operation]] = {
    "claim_due": (State.CLAIMED, _claim),
    "cancel": (State.CANCELLED, lambda s, j, c: s.cancel(j.job_id, "stop", "ann")),
    "reschedule": (
        State.DEFERRED,
        lambda s, j, c: s.reschedule(j.job_id, T0 + timedelta(days=1), "later", "ann"),
    ),
    "mark_enqueued": (
        State.ENQUEUED,
        lambda s, j, c: mark_enqueued(s, j.job_id, j.generation, "msg-2"),
    ),
    "mark_enqueue_failed": (
        State.DEFERRED,
        lambda s, j, c: s.mark_enqueue_failed(j.job_id, j.generation, ERROR),
    ),
    "reclaim_expired": (State.DEFERRED, _reclaim),
    "start": (State.RUNNING, _start),
    "release": (
        State.ENQUEUED,
        lambda s, j, c: s.release(_lease(j), ERROR),
    ),
    "complete": (
        State.COMPLETED,
        lambda s, j, c: s.complete(_lease(j), Result("deleted")),
    ),
    "retry_later": (
        State.DEFERRED,
        lambda s, j, c: s.retry_later(_lease(j), T0 + timedelta(days=30), ERROR),
    ),
    "fail": (
        State.FAILED,
        lambda s, j, c: s.fail(_lease(j), ERROR),
    ),
    "cancel_running": (State.CANCELLED, _cancel_running),
}

# Operations that find their jobs by query: refusal means "not selected", not an error.
SELECTING = {"claim_due", "reclaim_expired"}
# Worker operations that need the caller's running lease: from any other state, LeaseLost.
NEEDS_LEASE = {"cancel_running", "release", "complete", "retry_later", "fail"}
# (operation, from) pairs the table allows but that leave the state as it is by design.
STAYS = {
    ("cancel", State.RUNNING),  # records cancel_requested; the worker honours it
    # Already enqueued, or the push reached the worker first: the message ID only.
    ("mark_enqueued", State.ENQUEUED),
    ("mark_enqueued", State.RUNNING),
    ("mark_enqueued", State.COMPLETED),
    ("mark_enqueued", State.FAILED),
}
# The table transitions (by name) each store operation performs.
PERFORMS = {
    "claim_due": {"claim"},
    "cancel": {"cancel"},
    "reschedule": {"reschedule"},
    "mark_enqueued": {"mark_enqueued"},
    "mark_enqueue_failed": {"unclaim"},
    "reclaim_expired": {"unclaim", "retry_later", "reclaim_enqueued"},
    "start": {"start", "take_over"},
    "release": {"release"},
    "complete": {"complete"},
    "retry_later": {"retry_later"},
    "fail": {"fail"},
    "cancel_running": {"cancel_running"},
}


def allowed(name: str, current: State) -> bool:
    transition = TRANSITIONS.get((current, OPERATIONS[name][0]))
    return transition is not None and transition.name in PERFORMS[name]


def test_every_table_transition_is_performed_by_some_store_operation() -> None:
    performed = set().union(*PERFORMS.values())
    assert {t.name for t in TRANSITIONS.values()} == performed


def _update_time(client: firestore.Client, job_id: str) -> object:
    return client.collection(schema.JOBS).document(job_id).get().update_time


CASES = [(name, state) for name in OPERATIONS for state in State]


@pytest.mark.parametrize(("name", "current"), CASES, ids=[f"{n}-from-{s}" for n, s in CASES])
def test_store_operation_from_every_state(
    store: FirestoreJobStore,
    clock: FakeClock,
    firestore_client: firestore.Client,
    name: str,
    current: State,
) -> None:
    job = put_in(store, current)
    target, operation = OPERATIONS[name]
    before = _update_time(firestore_client, job.job_id)
    if (name, current) in STAYS:
        operation(store, job, clock)
        assert _get(store, job.job_id).state is current
    elif allowed(name, current):
        operation(store, job, clock)
        after = _get(store, job.job_id)
        assert after.state is target
        assert after.history[-1].from_state is current
        assert after.history[-1].to_state is target
    elif name in SELECTING:
        assert operation(store, job, clock) == []
        assert _update_time(firestore_client, job.job_id) == before
    elif name in NEEDS_LEASE:
        # Not running: the caller holds no lease (it lapsed and the job moved on).
        with pytest.raises(LeaseLost) as caught:
            operation(store, job, clock)
        assert caught.value.job_id == job.job_id
        assert _update_time(firestore_client, job.job_id) == before
    else:
        with pytest.raises(InvalidTransition) as caught:
            operation(store, job, clock)
        assert caught.value.current is current
        assert caught.value.job_id == job.job_id
        assert _update_time(firestore_client, job.job_id) == before


def test_start_on_a_running_job_with_a_live_lease_is_refused_unchanged(
    store: FirestoreJobStore, firestore_client: firestore.Client
) -> None:
    job = put_in(store, State.RUNNING)
    before = _update_time(firestore_client, job.job_id)
    with pytest.raises(LeaseHeld, match="leased by 'worker-1'"):
        store.start(job.job_id, job.generation, LEASE, "worker-2")
    assert _update_time(firestore_client, job.job_id) == before
