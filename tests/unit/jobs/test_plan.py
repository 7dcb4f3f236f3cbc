"""Drain-time arithmetic: table-driven, every figure rounded towards the pessimistic side."""

from __future__ import annotations

import pytest

from services.jobs.plan import PlanError, describe, format_duration, plan_drain


@pytest.mark.parametrize(
    ("backlog", "rate", "reserve", "seconds"),
    [
        (180_000, 50, 0.10, 4000),  # 180,000 / 45 per s
        (180_000, 50, 0.0, 3600),
        (0, 50, 0.10, 0),
        (1, 50, 0.10, 1),  # a partial second is a whole second
        (100, 3, 0.0, 34),  # 33.3 s rounds up
        (1_000_000, 1000, 0.5, 2000),
    ],
)
def test_drain_time_is_backlog_over_rate_left_after_the_reserve(
    backlog: int, rate: float, reserve: float, seconds: int
) -> None:
    plan = plan_drain(backlog, rate, reserve)
    assert plan.seconds == seconds
    assert plan.limited_by == "rate"
    assert plan.effective_rate_per_s == pytest.approx(rate * (1 - reserve))


@pytest.mark.parametrize(
    ("max_per_run", "interval_s", "limited_by", "effective", "seconds", "runs"),
    [
        (500, 60, "budget", 7.5, 24_000, 400),  # 8.33/s is below 50/s; 10 % of it reserved
        (6000, 60, "rate", 45.0, 4000, 67),  # 100/s per run is above 50/s
        (3000, 60, "rate", 45.0, 4000, 67),  # exactly equal: the rate is the limit
        (2700, 60, "budget", 40.5, 4445, 75),  # 45/s is below 50/s
    ],
)
def test_per_run_budget_becomes_the_bottleneck_only_when_below_the_rate(
    max_per_run: int,
    interval_s: float,
    limited_by: str,
    effective: float,
    seconds: int,
    runs: int,
) -> None:
    plan = plan_drain(180_000, 50, 0.1, max_per_run=max_per_run, interval_s=interval_s)
    assert plan.limited_by == limited_by
    assert plan.effective_rate_per_s == pytest.approx(effective)
    assert plan.seconds == seconds
    assert plan.runs == runs


def test_runs_are_unknown_without_a_scan_interval() -> None:
    assert plan_drain(10, 1).runs is None


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"backlog": -1, "rate_per_s": 1}, "backlog cannot be negative"),
        ({"backlog": 1, "rate_per_s": 0}, "rate must be above 0"),
        ({"backlog": 1, "rate_per_s": float("inf")}, "rate must be finite"),
        ({"backlog": 1, "rate_per_s": 1e308, "interval_s": 5}, "rate is too large"),
        ({"backlog": 1, "rate_per_s": 1, "reserve_fraction": 1.0}, "below 100 %"),
        ({"backlog": 1, "rate_per_s": 1, "reserve_fraction": -0.1}, "at least 0 %"),
        ({"backlog": 1, "rate_per_s": 1, "max_per_run": 0}, "per-run budget"),
        ({"backlog": 1, "rate_per_s": 1, "interval_s": 0}, "scan interval"),
    ],
)
def test_out_of_range_inputs_are_refused_with_the_reason(
    kwargs: dict[str, float], message: str
) -> None:
    with pytest.raises(PlanError, match=message):
        plan_drain(**kwargs)  # type: ignore[arg-type]


@pytest.mark.parametrize(
    ("seconds", "text"),
    [
        (0, "0 s"),
        (42, "42 s"),
        (59.2, "1 m 00 s"),
        (250, "4 m 10 s"),
        (3599, "59 m 59 s"),
        (3600, "1 h 00 m"),
        (4000, "1 h 07 m"),
        (7199, "2 h 00 m"),  # 59 m 59 s rounds up to the next hour
        (86_400, "1 d 00 h"),
        (86_400 + 3601, "1 d 02 h"),
        (2 * 86_400 - 1, "2 d 00 h"),
    ],
)
def test_durations_show_two_units_rounding_the_smaller_up(seconds: float, text: str) -> None:
    assert format_duration(seconds) == text


def test_description_reads_like_the_runbook_example() -> None:
    assert describe(plan_drain(180_000, 50, 0.1)) == (
        "180,000 due; at 50/s with 10 % reserved: 1 h 07 m"
    )


def test_description_names_the_budget_when_it_limits_the_drain() -> None:
    text = describe(plan_drain(180_000, 50, 0.1, max_per_run=500, interval_s=60))
    assert text.endswith("(the per-run budget limits the scan to 8.33/s)")


def test_the_budget_is_printed_with_its_arithmetic() -> None:
    from services.jobs.plan import budget_arithmetic

    assert budget_arithmetic(100, 1000, 10, 10) == (
        "100 per run = min(max per run 1,000, 10/s x 10 s = 100)"
    )
    assert budget_arithmetic(1000, 1000, 50, 60) == (
        "1,000 per run = min(max per run 1,000, 50/s x 1 m 00 s = 3,000)"
    )
    assert budget_arithmetic(25, None, 2.5, 10) == "25 per run = 2.5/s x 10 s = 25"
