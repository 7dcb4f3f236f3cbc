"""backlog(): the scan's per-run measurement, from counts and limit-1 queries only."""

from __future__ import annotations

from collections.abc import Callable
from datetime import timedelta
from typing import Any

import pytest

from services.jobs.clock import FakeClock
from services.jobs.parts import Result
from services.jobs.state import State
from services.store.job_store import FirestoreJobStore
from tests.fixtures.store import mark_enqueued
from tests.integration.jobs.conftest import LEASE, T0, WORKER, QueryLog, new_job

CLAIM_TIMEOUT = timedelta(minutes=10)
ENQUEUED_TIMEOUT = timedelta(days=1)


def test_backlog_of_an_empty_store_is_zero_with_no_ages(
    store: FirestoreJobStore, clock: FakeClock
) -> None:
    backlog = store.backlog(clock.now(), CLAIM_TIMEOUT, ENQUEUED_TIMEOUT)
    assert backlog.due_count == backlog.stuck_claims == backlog.stale_enqueued == 0
    assert backlog.oldest_overdue_age_s is None
    assert backlog.oldest_enqueued_age_s is None


def test_backlog_counts_due_stuck_and_stale_enqueued_jobs(
    store: FirestoreJobStore,
    clock: FakeClock,
    seed: Callable[..., list[str]],
) -> None:
    seed(30, T0 - timedelta(minutes=5))
    seed(20, T0 + timedelta(days=10), prefix="future")
    # 3 claimed and enqueued at T0; later 4 more enqueued, and 5 stuck in claimed.
    for claim in store.claim_due(clock.now(), "run-1", 3):
        mark_enqueued(store, claim.job_id, claim.generation, f"msg-{claim.job_id}")
    clock.advance(ENQUEUED_TIMEOUT + timedelta(hours=1))
    for claim in store.claim_due(clock.now(), "run-2", 4):
        mark_enqueued(store, claim.job_id, claim.generation, f"msg-{claim.job_id}")
    store.claim_due(clock.now(), "run-3", 5)
    clock.advance(CLAIM_TIMEOUT + timedelta(minutes=1))

    backlog = store.backlog(clock.now(), CLAIM_TIMEOUT, ENQUEUED_TIMEOUT)

    assert backlog.due_count == 30 - 3 - 4 - 5
    assert backlog.stuck_claims == 5
    assert backlog.stale_enqueued == 3
    overdue = ENQUEUED_TIMEOUT + timedelta(hours=1) + CLAIM_TIMEOUT + timedelta(minutes=6)
    assert backlog.oldest_overdue_age_s == overdue.total_seconds()
    enqueued_for = ENQUEUED_TIMEOUT + timedelta(hours=1) + CLAIM_TIMEOUT + timedelta(minutes=1)
    assert backlog.oldest_enqueued_age_s == enqueued_for.total_seconds()


def test_a_job_that_left_enqueued_is_no_longer_stale(
    store: FirestoreJobStore, clock: FakeClock
) -> None:
    store.schedule(new_job("j"))
    (claim,) = store.claim_due(clock.now(), "run-1", 1)
    mark_enqueued(store, "j", claim.generation, "msg-1")
    clock.advance(ENQUEUED_TIMEOUT * 2)
    assert store.backlog(clock.now(), CLAIM_TIMEOUT, ENQUEUED_TIMEOUT).stale_enqueued == 1
    started = store.start("j", claim.generation, LEASE, WORKER)
    assert started.lease is not None
    store.complete(started.lease, Result("deleted"))
    backlog = store.backlog(clock.now(), CLAIM_TIMEOUT, ENQUEUED_TIMEOUT)
    assert (backlog.stale_enqueued, backlog.oldest_enqueued_age_s) == (0, None)


@pytest.mark.builtin_emulator("billing counters")
def test_backlog_never_counts_terminal_states_and_reads_little(
    store: FirestoreJobStore,
    clock: FakeClock,
    seed: Callable[..., list[str]],
    query_log: QueryLog,
    firestore_stats: Any,
) -> None:
    seed(40)
    for n in range(5):
        store.cancel(f"job-{n:06d}", "not needed", "ann")
    query_log.specs.clear()
    firestore_stats.reset()

    store.backlog(clock.now(), CLAIM_TIMEOUT, ENQUEUED_TIMEOUT)

    assert len(query_log.specs) == 5
    states = {value for spec in query_log.specs for field, value in spec.equals if field == "state"}
    assert states == {State.DEFERRED.value, State.CLAIMED.value, State.ENQUEUED.value}
    assert firestore_stats.get()["document_reads"] < 10
