"""The calendar's counts (services/store/forecasts.py) on the emulator: jobs per window per
action, the overdue ones apart, the budget drawn and the windows over it marked, at the billed
reads the count aggregations cost."""

from __future__ import annotations

from collections.abc import Callable
from datetime import timedelta
from typing import Any

import pytest

from services.jobs.clock import FakeClock
from services.jobs.forecast import REST_LANE, count_reads
from services.store.job_store import FirestoreJobStore
from tests.integration.jobs.conftest import ACTION, T0

OTHER = "http.request"


def test_the_calendar_counts_each_hour_and_marks_the_hour_over_budget(
    store: FirestoreJobStore, clock: FakeClock, seed: Callable[..., list[str]]
) -> None:
    clock.set(T0 + timedelta(minutes=30))
    seed(3, T0 - timedelta(hours=2), prefix="late")  # overdue: before the first window
    seed(5, T0 + timedelta(hours=1, minutes=10), prefix="one")
    seed(40, T0 + timedelta(hours=3, minutes=59), prefix="spike")
    calendar = store.calendar(
        clock.now(),
        timedelta(hours=5),
        "hour",
        actions=[ACTION],
        rates={ACTION: 10 / 3600},  # 10 jobs an hour
        catch_up_rate=20.0,
    )
    (row,) = calendar.rows
    assert [w.start for w in calendar.windows][:2] == [T0, T0 + timedelta(hours=1)]
    assert row.counts == (0, 5, 0, 40, 0, 0)[: len(calendar.windows)]
    assert row.overdue == 3
    assert row.budget == pytest.approx(10.0)
    assert [i for i, over in enumerate(row.over) if over] == [3]
    assert calendar.peak() == (calendar.windows[3], 40)


def test_actions_without_a_rate_share_the_rest_lanes_budget(
    store: FirestoreJobStore, clock: FakeClock, seed: Callable[..., list[str]]
) -> None:
    seed(30, T0 + timedelta(minutes=5), prefix="a")
    calendar = store.calendar(
        T0, timedelta(hours=2), "hour", actions=[ACTION, OTHER], rates={}, catch_up_rate=0.005
    )
    rows = {r.action: r for r in calendar.rows}
    assert rows[ACTION].budget is None and rows[OTHER].counts == (0, 0)
    assert rows[REST_LANE].counts == (30, 0)
    assert rows[REST_LANE].budget == pytest.approx(18.0)
    assert rows[ACTION].over == (True, False)


@pytest.mark.builtin_emulator("billing counters")
def test_a_calendar_bills_one_read_per_count_and_one_per_thousand_counted(
    store: FirestoreJobStore, seed: Callable[..., list[str]], firestore_stats: Any
) -> None:
    seed(2500, T0 + timedelta(hours=1, minutes=1))
    firestore_stats.reset()
    calendar = store.calendar(
        T0, timedelta(hours=24), "hour", actions=[ACTION, OTHER], rates={}, catch_up_rate=20.0
    )
    reads = firestore_stats.get()["document_reads"]
    # 24 windows + the overdue count, per action: 50 counts; the 2,500-job window bills 3.
    assert calendar.reads == count_reads([2500] + [0] * 49) == 52
    assert reads == 52


@pytest.mark.builtin_emulator("billing counters")
def test_a_long_hourly_calendar_counts_the_hours_of_busy_days_only(
    store: FirestoreJobStore, seed: Callable[..., list[str]], firestore_stats: Any
) -> None:
    seed(30, T0 + timedelta(days=1, hours=5, minutes=1), prefix="busy")
    seed(2, T0 + timedelta(days=2, hours=23), prefix="late")
    firestore_stats.reset()
    calendar = store.calendar(
        T0, timedelta(days=3), "hour", actions=[ACTION, OTHER], rates={}, catch_up_rate=20.0
    )
    row = next(r for r in calendar.rows if r.action == ACTION)
    assert row.counts[29] == 30 and row.counts[71] == 2 and row.total == 32
    # Per action: the overdue count and 3 day counts; then 24 hours of each of the 2 busy days.
    assert calendar.reads == 2 * (1 + 3) + 2 * 24 == firestore_stats.get()["document_reads"]
