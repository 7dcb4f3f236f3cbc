"""The store conformance suite for the scan's operations of `FirestoreJobStore` (the scan is
typed against the store itself): the Firestore store on the emulator and the scan unit tests'
`FakeStore` (with no fault scripted) claim, mark, put back, reclaim, measure and keep the
control document alike, so a unit test of the scanner is held to the real store.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from dataclasses import dataclass
from datetime import timedelta

import pytest
from google.cloud import firestore

from services.jobs.clock import FakeClock
from services.jobs.control import HousekeepingMark
from services.jobs.parts import ErrorInfo
from services.store.job_store import FirestoreJobStore
from tests.integration.jobs.conftest import new_job
from tests.unit.scan.fakes import T0, FakeStore

TIMEOUT = timedelta(minutes=15)
DOWN = ErrorInfo("publish_failed", "Pub/Sub answered 503")


@dataclass
class Impl:
    """One implementation, its clock, and how to make a job due (at the fake's T0, the due
    time the fake gives every job it holds)."""

    store: FirestoreJobStore | FakeStore
    clock: FakeClock
    add_due: Callable[[str], object]


@pytest.fixture(params=["firestore", "fake"])
def impl(request: pytest.FixtureRequest) -> Iterator[Impl]:
    clock = FakeClock(T0 + timedelta(minutes=1))
    if request.param == "fake":
        fake = FakeStore()
        yield Impl(fake, clock, fake.due.append)
        return
    client: firestore.Client = request.getfixturevalue("firestore_client")
    real = FirestoreJobStore(client, clock)
    yield Impl(real, clock, lambda job_id: real.schedule(new_job(job_id, T0)))


def claim(impl: Impl, limit: int = 10) -> list[tuple[str, int]]:
    claimed = impl.store.claim_due(impl.clock.now(), "run-1", limit, page_size=limit)
    return sorted((c.job_id, c.generation) for c in claimed)


def test_due_jobs_are_claimed_once_each_with_generation_one(impl: Impl) -> None:
    for job_id in ("a", "b", "c"):
        impl.add_due(job_id)
    assert claim(impl) == [("a", 1), ("b", 1), ("c", 1)]
    assert claim(impl) == []


def test_a_claim_takes_at_most_its_limit(impl: Impl) -> None:
    for job_id in ("a", "b", "c"):
        impl.add_due(job_id)
    assert len(claim(impl, limit=2)) == 2
    assert len(claim(impl, limit=2)) == 1


def test_the_claimed_jobs_are_marked_enqueued_in_input_order(impl: Impl) -> None:
    for job_id in ("a", "b"):
        impl.add_due(job_id)
    claimed = claim(impl)
    items = [(job_id, generation, f"m-{job_id}") for job_id, generation in reversed(claimed)]
    marks = impl.store.mark_enqueued_many(items, impl.clock.now())
    assert [(m.job_id, m.generation, m.ok) for m in marks] == [
        ("b", 1, True),
        ("a", 1, True),
    ]


def test_a_failed_publish_puts_the_job_back_for_the_next_claim_under_a_new_generation(
    impl: Impl,
) -> None:
    impl.add_due("a")
    ((job_id, generation),) = claim(impl)
    impl.store.mark_enqueue_failed(job_id, generation, DOWN)
    assert claim(impl) == [("a", 2)]


def test_nothing_abandoned_reclaims_nothing(impl: Impl) -> None:
    impl.add_due("a")
    report = impl.store.reclaim_expired(
        impl.clock.now(), TIMEOUT, 10, "run-1", enqueued_timeout=TIMEOUT
    )
    assert (tuple(report), report.quarantined, report.skipped, report.stopped_by) == (
        (),
        (),
        (),
        None,
    )


def test_the_backlog_counts_what_is_due_and_how_old_the_oldest_is(impl: Impl) -> None:
    empty = impl.store.backlog(impl.clock.now(), TIMEOUT, TIMEOUT)
    assert (empty.due_count, empty.oldest_overdue_age_s, empty.stuck_claims) == (0, None, 0)
    for job_id in ("a", "b"):
        impl.add_due(job_id)
    backlog = impl.store.backlog(impl.clock.now(), TIMEOUT, TIMEOUT)
    assert (backlog.due_count, backlog.oldest_overdue_age_s, backlog.stuck_claims) == (2, 60, 0)


def test_the_control_document_defaults_and_keeps_the_housekeeping_mark(impl: Impl) -> None:
    control = impl.store.get_control()
    assert (control.paused, control.housekeeping) == (False, None)
    mark = HousekeepingMark(impl.clock.now(), {"stale_enqueued": 0})
    impl.store.record_housekeeping(mark)
    assert impl.store.get_control().housekeeping == mark
