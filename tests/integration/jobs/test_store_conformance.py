"""One conformance suite for the worker's operations of `FirestoreJobStore` (the worker is
typed against the store itself): the Firestore store on the emulator, and the in-memory store
the worker's unit tests use. Both move jobs through the same
`services.jobs.transitions`, so the fake re-implements no rule; this proves it behaves alike.
The scan's and the API's contracts have their own suites beside this one
(`test_store_conformance_scan.py`, `test_store_conformance_api.py`).
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from dataclasses import dataclass
from datetime import timedelta

import pytest
from google.cloud import firestore

from services.jobs.clock import FakeClock
from services.jobs.errors import (
    AlreadyTerminal,
    AttemptsExhausted,
    LeaseHeld,
    LeaseLost,
    StaleGeneration,
    ValidationError,
)
from services.jobs.parts import ErrorInfo, Lease, Result
from services.jobs.record import Job
from services.jobs.state import State
from services.store.job_store import FirestoreJobStore
from tests.fixtures.store import mark_enqueued
from tests.integration.jobs.conftest import LEASE, T0, new_job
from tests.unit.worker.fakes import MemoryStore

DOWN = ErrorInfo("transient", "storage answered 503")
PLAN = {"generations": {"src/a.mp4": "1700000000000001"}}


@dataclass
class Impl:
    """One implementation and how to put a job where the scan leaves it (enqueued, gen 1)."""

    store: FirestoreJobStore | MemoryStore
    clock: FakeClock
    enqueue: Callable[..., Job]
    request_cancel: Callable[[str], object]


@pytest.fixture(params=["firestore", "memory"])
def impl(request: pytest.FixtureRequest) -> Iterator[Impl]:
    clock = FakeClock(T0)
    if request.param == "memory":
        memory = MemoryStore(clock)
        yield Impl(
            memory,
            clock,
            lambda job_id, **kw: memory.add(job_id, **kw),
            memory.request_cancel,
        )
        return
    client: firestore.Client = request.getfixturevalue("firestore_client")
    real = FirestoreJobStore(client, clock)

    def enqueue(job_id: str, **kw: object) -> Job:
        real.schedule(new_job(job_id, **kw))
        (claim,) = real.claim_due(clock.now(), "run-1", 1)
        return mark_enqueued(real, job_id, claim.generation, "m-1")

    yield Impl(real, clock, enqueue, lambda job_id: real.cancel(job_id, "stop", "ann"))


def started(impl: Impl, job_id: str = "j", owner: str = "w/m-1", **kw: object) -> Job:
    job = impl.enqueue(job_id, **kw)
    return impl.store.start(job_id, job.generation, LEASE, owner)


def stored(impl: Impl, job_id: str = "j") -> Job:
    job = impl.store.get(job_id)
    assert job is not None
    return job


def lease_of(job: Job) -> Lease:
    assert job.lease is not None
    return job.lease


def test_start_then_complete_then_a_duplicate_is_refused(impl: Impl) -> None:
    job = started(impl)
    assert (job.state, job.attempt, job.lease_owner) == (State.RUNNING, 1, "w/m-1")
    done = impl.store.complete(lease_of(job), Result("deleted", {"n": 1}))
    assert done.state is State.COMPLETED and done.result is not None
    assert done.expire_at is not None
    with pytest.raises(AlreadyTerminal):
        impl.store.start("j", job.generation, LEASE, "w/m-2")


def test_a_live_lease_is_held_and_another_generation_is_stale(impl: Impl) -> None:
    job = started(impl)
    with pytest.raises(LeaseHeld):
        impl.store.start("j", job.generation, LEASE, "w/m-2")
    with pytest.raises(StaleGeneration):
        impl.store.start("j", job.generation + 1, LEASE, "w/m-2")


def test_a_take_over_costs_the_attempt_and_fences_the_old_lease(impl: Impl) -> None:
    first = started(impl)
    impl.clock.advance(LEASE + timedelta(seconds=1))
    second = impl.store.start("j", first.generation, LEASE, "w/m-1")  # same owner name
    assert (second.state, second.attempt) == (State.RUNNING, 2)
    old = lease_of(first)
    for late in (
        lambda: impl.store.complete(old, Result("deleted")),
        lambda: impl.store.fail(old, DOWN),
        lambda: impl.store.release(old, DOWN),
        lambda: impl.store.retry_later(old, impl.clock.now(), DOWN),
        lambda: impl.store.extend_lease(old, LEASE),
        lambda: impl.store.save_progress(old, PLAN),
        lambda: impl.store.save_progress(old, PLAN, basis=first),
    ):
        with pytest.raises(LeaseLost):
            late()


def test_a_take_over_in_the_last_attempt_fails_the_job(impl: Impl) -> None:
    first = started(impl, max_attempts=1)
    impl.clock.advance(LEASE + timedelta(seconds=1))
    ended = impl.store.start("j", first.generation, LEASE, "w/m-2")
    assert (ended.state, ended.lease) == (State.FAILED, None)
    assert ended.last_error is not None and ended.last_error.code == "lease_expired"


def test_release_keeps_the_attempt_and_stamps_enqueued_at(impl: Impl) -> None:
    job = started(impl)
    impl.clock.advance(timedelta(seconds=5))
    released = impl.store.release(lease_of(job), DOWN, message_id="m-2")
    assert (released.state, released.attempt, released.enqueued_at) == (
        State.ENQUEUED,
        1,
        impl.clock.now(),
    )
    assert released.last_error is not None and released.last_error.code == "transient"


def test_retry_later_starts_the_next_cycle_until_none_is_left(impl: Impl) -> None:
    job = started(impl, max_attempts=1)
    with pytest.raises(AttemptsExhausted):
        impl.store.retry_later(lease_of(job), impl.clock.now() + timedelta(days=30), DOWN)
    failed = impl.store.fail(lease_of(job), DOWN)
    assert failed.state is State.FAILED


def test_a_heartbeat_moves_the_lease_end(impl: Impl) -> None:
    job = started(impl)
    impl.clock.advance(LEASE / 2)
    beaten = impl.store.extend_lease(lease_of(job), LEASE)
    assert beaten.lease_until == impl.clock.now() + LEASE
    assert beaten.lease_token == job.lease_token


@pytest.mark.parametrize("move", ["release", "retry_later", "fail"])
def test_a_cancel_request_turns_every_exit_into_cancelled(impl: Impl, move: str) -> None:
    job = started(impl)
    impl.request_cancel("j")
    lease = lease_of(job)
    if move == "release":
        ended = impl.store.release(lease, DOWN)
    elif move == "retry_later":
        ended = impl.store.retry_later(lease, impl.clock.now() + timedelta(days=1), DOWN)
    else:
        ended = impl.store.fail(lease, DOWN)
    assert ended.state is State.CANCELLED and ended.expire_at is not None
    with pytest.raises(AlreadyTerminal):
        impl.store.start("j", job.generation, LEASE, "w/m-2")


def test_saved_progress_keeps_the_delivery_running_under_the_same_lease(impl: Impl) -> None:
    job = started(impl)
    impl.clock.advance(timedelta(seconds=3))
    saved = impl.store.save_progress(lease_of(job), PLAN, basis=job)
    assert (saved.state, saved.lease_token, saved.lease_until) == (
        State.RUNNING,
        job.lease_token,
        job.lease_until,
    )
    assert saved.progress == PLAN and saved.history == job.history
    assert stored(impl).progress == PLAN
    # Without a basis (or a stale one) it is decided on a fresh read, under the same fence.
    again = impl.store.save_progress(lease_of(saved), {"n": 2}, basis=job)
    assert again.progress == {"n": 2}
    # The delivery goes on from the returned job: its heartbeat and its completion.
    beaten = impl.store.extend_lease(lease_of(again), LEASE)
    assert beaten.progress == {"n": 2}
    done = impl.store.complete(lease_of(beaten), Result("deleted"), basis=beaten)
    assert done.state is State.COMPLETED and done.progress is None  # complete clears it


@pytest.mark.parametrize("move", ["release", "retry_later", "take_over"])
def test_saved_progress_outlives_every_exit_but_complete(impl: Impl, move: str) -> None:
    job = started(impl)
    lease = lease_of(job)
    impl.store.save_progress(lease, PLAN, basis=job)
    if move == "release":
        later = impl.store.release(lease, DOWN, message_id="m-2")
    elif move == "retry_later":
        later = impl.store.retry_later(lease, impl.clock.now() + timedelta(days=30), DOWN)
    else:
        impl.clock.advance(LEASE + timedelta(seconds=1))
        later = impl.store.start("j", job.generation, LEASE, "w/m-2")
        assert later.attempt == 2
    assert later.progress == PLAN


def test_progress_that_would_not_be_kept_whole_is_refused(impl: Impl) -> None:
    job = started(impl)
    too_big = {"generations": {f"o{n}": "x" * 1024 for n in range(200)}}
    with pytest.raises(ValidationError):
        impl.store.save_progress(lease_of(job), too_big)
    assert stored(impl).progress is None
