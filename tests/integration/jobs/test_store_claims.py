"""claim_due: exactly-once claims under concurrency, due times under a FakeClock, billing."""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable
from datetime import timedelta
from typing import Any

import pytest

from services.jobs.clock import FakeClock
from services.jobs.results import ClaimedJob
from services.jobs.state import State
from services.store.job_store import FirestoreJobStore
from tests.integration.jobs.conftest import T0, new_job, run_together


def _claim_until_empty(store: FirestoreJobStore, run_id: str, out: list[ClaimedJob]) -> None:
    while batch := store.claim_due(store.clock.now(), run_id, 1000, page_size=50):
        out.extend(batch)


@pytest.mark.production_strict("pessimistic locking: concurrent claims wait or abort")
@pytest.mark.slow
@pytest.mark.parametrize("callers", [2, 8])
def test_concurrent_claimers_claim_each_of_1000_due_jobs_exactly_once(
    store: FirestoreJobStore, seed: Callable[..., list[str]], callers: int
) -> None:
    """Production locks what a transaction reads and delays or aborts one side of a conflict
    (https://cloud.google.com/firestore/docs/transaction-data-contention)."""
    ids = seed(1000)
    results: list[list[ClaimedJob]] = [[] for _ in range(callers)]

    def run(index: int) -> None:
        _claim_until_empty(store, f"run-{index}", results[index])

    assert run_together(callers, run) == []
    claimed = Counter(c.job_id for batch in results for c in batch)
    assert set(claimed) == set(ids)
    assert max(claimed.values()) == 1
    assert {c.generation for batch in results for c in batch} == {1}
    stats = store.stats(store.clock.now(), timedelta(minutes=10))
    assert stats.per_state[State.CLAIMED] == 1000
    assert stats.due_count == 0
    # Each job's audit names the one run whose result holds it.
    owner = {c.job_id: f"scan:run-{i}" for i, batch in enumerate(results) for c in batch}
    for job_id in ids[::97]:
        job = store.get(job_id)
        assert job is not None
        assert job.history[-1].by == owner[job_id]


def test_jobs_due_in_7_and_30_days_are_claimed_only_once_the_clock_passes_due_at(
    store: FirestoreJobStore, clock: FakeClock
) -> None:
    store.schedule(new_job("week", T0 + timedelta(days=7)))
    store.schedule(new_job("month", T0 + timedelta(days=30)))

    assert store.claim_due(clock.now(), "run-0", 10) == []
    clock.set(T0 + timedelta(days=7) - timedelta(microseconds=1))
    assert store.claim_due(clock.now(), "run-1", 10) == []
    clock.set(T0 + timedelta(days=7))
    assert [c.job_id for c in store.claim_due(clock.now(), "run-2", 10)] == ["week"]
    clock.set(T0 + timedelta(days=29, hours=23))
    assert store.claim_due(clock.now(), "run-3", 10) == []
    clock.set(T0 + timedelta(days=30, seconds=1))
    assert [c.job_id for c in store.claim_due(clock.now(), "run-4", 10)] == ["month"]
    assert store.claim_due(clock.now(), "run-5", 10) == []


def test_a_job_cancelled_before_it_is_due_is_never_claimed(
    store: FirestoreJobStore, clock: FakeClock
) -> None:
    store.schedule(new_job("keep", T0 + timedelta(days=1)))
    store.schedule(new_job("drop", T0 + timedelta(days=1)))
    cancelled = store.cancel("drop", "retention policy changed", "ann")
    assert cancelled.state is State.CANCELLED
    assert cancelled.expire_at == T0 + timedelta(days=30)
    clock.advance(timedelta(days=60))
    assert [c.job_id for c in store.claim_due(clock.now(), "run-1", 10)] == ["keep"]
    assert store.claim_due(clock.now(), "run-2", 10) == []
    dropped = store.get("drop")
    assert dropped is not None
    assert dropped.state is State.CANCELLED
    assert dropped.generation == 0


def test_reschedule_moves_the_claim_time(store: FirestoreJobStore, clock: FakeClock) -> None:
    store.schedule(new_job("later", T0 + timedelta(days=1)))
    store.schedule(new_job("sooner", T0 + timedelta(days=10)))
    store.reschedule("later", T0 + timedelta(days=20), "legal hold", "ann")
    store.reschedule("sooner", T0 + timedelta(hours=1), "expedite", "ann")

    clock.set(T0 + timedelta(days=2))
    assert [c.job_id for c in store.claim_due(clock.now(), "run-1", 10)] == ["sooner"]
    clock.set(T0 + timedelta(days=19))
    assert store.claim_due(clock.now(), "run-2", 10) == []
    clock.set(T0 + timedelta(days=20))
    assert [c.job_id for c in store.claim_due(clock.now(), "run-3", 10)] == ["later"]
    later = store.get("later")
    assert later is not None
    assert later.scheduled_due_at == T0 + timedelta(days=1)
    assert [e.reason.split(" (")[0] for e in later.history if e.by == "operator:ann"] == [
        "legal hold"
    ]


def test_claim_due_takes_the_oldest_due_first_and_stops_at_the_limit(
    store: FirestoreJobStore, clock: FakeClock
) -> None:
    for n in range(7):
        store.schedule(new_job(f"j{n}", T0 - timedelta(minutes=n)))
    first = store.claim_due(clock.now(), "run-1", 3, page_size=2)
    assert [c.job_id for c in first] == ["j6", "j5", "j4"]
    assert [c.job_id for c in store.claim_due(clock.now(), "run-2", 10)] == ["j3", "j2", "j1", "j0"]


@pytest.mark.builtin_emulator("billing counters")
def test_claim_due_bills_one_read_and_write_per_claimed_job_and_one_read_when_none_is_due(
    store: FirestoreJobStore,
    clock: FakeClock,
    seed: Callable[..., list[str]],
    firestore_stats: Any,
) -> None:
    seed(10)
    seed(300, T0 + timedelta(days=30), prefix="future")
    firestore_stats.reset()
    assert len(store.claim_due(clock.now(), "run-1", 100)) == 10
    counts = firestore_stats.get()
    assert (counts["document_reads"], counts["document_writes"]) == (10, 10)

    firestore_stats.reset()
    assert store.claim_due(clock.now(), "run-2", 100) == []
    counts = firestore_stats.get()
    assert (counts["document_reads"], counts["document_writes"]) == (1, 0)
