"""The calendar's pure parts: windows from the current hour or day, budgets drawn per lane, the
rest lane's sum held against the catch-up rate, what count aggregations bill."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest

from services.jobs.errors import ValidationError
from services.jobs.forecast import MAX_WINDOWS, REST_LANE, calendar_of, count_reads, windows

NOW = datetime(2026, 3, 1, 10, 42, tzinfo=UTC)


def test_windows_start_at_the_current_hour_and_cover_the_horizon() -> None:
    found = windows(NOW, timedelta(hours=3), "hour")
    assert [w.start.hour for w in found] == [10, 11, 12, 13]
    assert found[-1].end > NOW + timedelta(hours=3)
    days = windows(NOW, timedelta(days=2), "day")
    assert days[0].start == datetime(2026, 3, 1, tzinfo=UTC) and len(days) == 3


@pytest.mark.parametrize(
    ("horizon", "step", "problem"),
    [
        (timedelta(hours=1), "week", "step: must be one of hour, day"),
        (timedelta(0), "hour", "horizon: must be above 0"),
        (timedelta(days=40), "hour", f"more than {MAX_WINDOWS} windows"),
    ],
)
def test_a_bad_horizon_or_step_is_named(horizon: timedelta, step: str, problem: str) -> None:
    with pytest.raises(ValidationError, match=problem):
        windows(NOW, horizon, step)


def test_rated_actions_get_their_own_budget_and_the_rest_share_the_catch_up_rate() -> None:
    found = windows(NOW, timedelta(hours=1), "hour")  # 2 windows
    calendar = calendar_of(
        found,
        "hour",
        {"slow": [5, 20], "a": [10, 0], "b": [0, 30]},
        {"slow": 10 / 3600},
        catch_up_rate=35 / 3600,
    )
    rows = {r.action: r for r in calendar.rows}
    assert rows["slow"].budget == pytest.approx(10) and rows["slow"].over == (False, True)
    assert rows[REST_LANE].counts == (10, 30) and rows[REST_LANE].over == (False, False)
    assert rows["a"].budget is None
    assert calendar.totals == (15, 50)
    assert calendar.over_windows == (1,)
    assert calendar.peak() == (found[1], 50)


def test_a_rate_above_the_catch_up_rate_is_capped_by_it() -> None:
    found = windows(NOW, timedelta(minutes=1), "hour")
    calendar = calendar_of(found, "hour", {"fast": [100]}, {"fast": 1.0}, catch_up_rate=0.01)
    assert calendar.rows[0].budget == pytest.approx(36) and calendar.rows[0].over == (True,)


def test_count_reads_bill_one_per_thousand_and_at_least_one() -> None:
    assert count_reads([0, 1, 1000, 1001, 2500]) == 1 + 1 + 1 + 2 + 3
