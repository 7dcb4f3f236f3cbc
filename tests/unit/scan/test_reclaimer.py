"""The Reclaimer's backlog-aware rule (issue 24, finding 9) over a fake store and age source:
the stale-enqueued step gets the publish time of the oldest unacked message, is skipped when
the age is unknown, and the source is read once per housekeeping, never on quick runs."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

from services.jobs.budget import ScanLimits
from services.jobs.clock import FakeClock
from services.scan.queue_age import MARGIN, QueueAge
from services.scan.reclaimer import Reclaimer
from services.scan.summary import RunTally
from tests.unit.scan.fakes import FakeStore

T0 = datetime(2026, 6, 1, 12, 0, tzinfo=UTC)
LIMITS = ScanLimits(enqueued_timeout_s=3 * 3600)


class Ages:
    def __init__(self, age: QueueAge | None) -> None:
        self.age = age
        self.reads = 0

    def oldest_unacked(self) -> QueueAge | None:
        self.reads += 1
        return self.age


def _reclaim(store: FakeStore, ages: Ages | None, *, quick: bool = False) -> None:
    reclaimer = Reclaimer(store, FakeClock(T0), LIMITS, ages)
    reclaimer.reclaim("run-1", timedelta(minutes=10), RunTally(), quick=quick)


def test_the_rescue_is_bounded_by_the_oldest_unacked_publish_time() -> None:
    store, ages = FakeStore(), Ages(QueueAge(T0 - timedelta(minutes=2), 4 * 3600.0))
    _reclaim(store, ages)
    assert store.enqueued_timeouts == [timedelta(hours=3)]
    assert store.unacked_sinces == [T0 - timedelta(minutes=2, hours=4) - MARGIN]
    assert ages.reads == 1


def test_an_unknown_age_skips_the_rescue_and_quick_runs_never_read_it() -> None:
    store, ages = FakeStore(), Ages(None)
    _reclaim(store, ages)
    _reclaim(store, ages, quick=True)
    assert store.enqueued_timeouts[0] is None and store.unacked_sinces == [None, None]
    assert ages.reads == 1


def test_without_a_source_the_rescue_measures_from_enqueued_at_alone() -> None:
    store = FakeStore()
    _reclaim(store, None)
    assert (store.enqueued_timeouts, store.unacked_sinces) == ([timedelta(hours=3)], [None])
