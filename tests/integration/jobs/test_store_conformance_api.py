"""The store conformance suite for the API's operations of `FirestoreJobStore` (schedule, get,
cancel, reschedule; the API is typed against the store itself): the Firestore store on the
emulator and the API unit tests' in-memory `FakeStore` answer the same requests alike, so a
unit test of the API's HTTP logic is held to the real store.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from dataclasses import dataclass
from datetime import timedelta

import pytest
from google.cloud import firestore

from services.jobs.clock import FakeClock
from services.jobs.errors import AlreadyTerminal, JobNotFound, ScheduleConflict, ValidationError
from services.jobs.state import State
from services.store.job_store import FirestoreJobStore
from tests.integration.jobs.conftest import T0, new_job
from tests.unit.api.fakes import FakeStore


@dataclass
class Impl:
    """One implementation and how to make a job terminal (the worker's part, not the API's)."""

    store: FirestoreJobStore | FakeStore
    finish: Callable[[str], object]


@pytest.fixture(params=["firestore", "fake"])
def impl(request: pytest.FixtureRequest) -> Iterator[Impl]:
    clock = FakeClock(T0)
    if request.param == "fake":
        fake = FakeStore(clock)
        yield Impl(fake, lambda job_id: fake.set_state(job_id, State.COMPLETED))
        return
    client: firestore.Client = request.getfixturevalue("firestore_client")
    real = FirestoreJobStore(client, clock)

    def finish(job_id: str) -> None:
        real.cancel(job_id, "done", "ann")  # deferred -> cancelled: terminal, as completed is

    yield Impl(real, finish)


def test_a_new_job_is_created_and_read_back(impl: Impl) -> None:
    result = impl.store.schedule(new_job("j"))
    assert result.created and result.job.state is State.DEFERRED
    stored = impl.store.get("j")
    assert stored is not None
    assert (stored.job_id, stored.due_at, stored.action) == ("j", T0, result.job.action)


def test_the_same_decision_again_returns_the_existing_job(impl: Impl) -> None:
    first = impl.store.schedule(new_job("j"))
    again = impl.store.schedule(new_job("j", T0 + timedelta(days=1)))  # the due time differs
    assert not again.created
    assert again.job.due_at == first.job.due_at


def test_another_decision_under_the_same_id_is_a_conflict_naming_the_field(impl: Impl) -> None:
    impl.store.schedule(new_job("j"))
    with pytest.raises(ScheduleConflict) as raised:
        impl.store.schedule(new_job("j", max_attempts=2))
    assert "max_attempts" in str(raised.value)


def test_an_invalid_job_is_refused_and_nothing_is_written(impl: Impl) -> None:
    with pytest.raises(ValidationError):
        impl.store.schedule(new_job("j", max_attempts=0))
    assert impl.store.get("j") is None


def test_an_unknown_job_reads_as_none_and_cannot_be_changed(impl: Impl) -> None:
    assert impl.store.get("nope") is None
    with pytest.raises(JobNotFound):
        impl.store.cancel("nope", "stop", "ann")
    with pytest.raises(JobNotFound):
        impl.store.reschedule("nope", T0 + timedelta(days=1), "later", "ann")


def test_cancel_moves_a_deferred_job_to_cancelled_and_refuses_a_terminal_one(impl: Impl) -> None:
    impl.store.schedule(new_job("j"))
    cancelled = impl.store.cancel("j", "stop", "ann")
    assert cancelled.state is State.CANCELLED
    stored = impl.store.get("j")
    assert stored is not None and stored.state is State.CANCELLED
    impl.store.schedule(new_job("k"))
    impl.finish("k")
    with pytest.raises(AlreadyTerminal):
        impl.store.cancel("k", "stop", "ann")


def test_reschedule_moves_a_deferred_jobs_due_time(impl: Impl) -> None:
    impl.store.schedule(new_job("j"))
    later = T0 + timedelta(days=2)
    moved = impl.store.reschedule("j", later, "later", "ann")
    assert (moved.state, moved.due_at) == (State.DEFERRED, later)
    stored = impl.store.get("j")
    assert stored is not None and stored.due_at == later
