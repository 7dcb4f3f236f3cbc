from __future__ import annotations

from datetime import timedelta

import pytest

from services.jobs.budget import TimeBudget, effective_claim_timeout, enqueue_budget
from tests.unit.scan.fakes import T0


@pytest.mark.parametrize(
    ("cap", "interval_s", "rate", "override", "limit", "source"),
    [
        (1000, 60, None, None, 1000, "cap"),
        (1000, 60, 5.0, None, 300, "rate"),
        (1000, 60, 50.0, None, 1000, "cap"),
        (1000, 60, 5.0, 100, 100, "cap"),
        (1000, 60, 0.5, None, 30, "rate"),
        (1000, 300, 0.1, None, 30, "rate"),
        (1000, 60, 0.0, None, 0, "rate"),
        (100, 60, None, 2000, 2000, "cap"),
    ],
)
def test_budget_is_the_smaller_of_cap_and_rate_times_interval(
    cap: int,
    interval_s: float,
    rate: float | None,
    override: int | None,
    limit: int,
    source: str,
) -> None:
    budget = enqueue_budget(cap, interval_s, rate_per_s=rate, cap_override=override)
    assert (budget.limit, budget.source) == (limit, source)


def test_rate_times_interval_is_not_lost_to_float_rounding() -> None:
    assert enqueue_budget(10_000, 60, rate_per_s=0.1 * 3).limit == 18


@pytest.mark.parametrize(
    ("cap", "interval_s", "rate"), [(-1, 60, None), (10, 0, None), (10, 60, -1.0)]
)
def test_invalid_budget_inputs_are_refused(cap: int, interval_s: float, rate: float | None) -> None:
    with pytest.raises(ValueError):
        enqueue_budget(cap, interval_s, rate_per_s=rate)


def test_time_budget_is_exhausted_at_its_deadline() -> None:
    budget = TimeBudget(T0, 30.0)
    assert not budget.exhausted(T0 + timedelta(seconds=29.9))
    assert budget.exhausted(T0 + timedelta(seconds=30))
    assert budget.remaining_s(T0 + timedelta(seconds=10)) == 20.0
    assert budget.remaining_s(T0 + timedelta(seconds=99)) == 0.0


@pytest.mark.parametrize(
    ("control_s", "floor_s", "expected_s"),
    [(300, None, 300), (300, 600.0, 600), (900, 600.0, 900), (600, 600.0, 600)],
)
def test_the_claim_timeout_is_the_controls_never_below_the_deployment_floor(
    control_s: int, floor_s: float | None, expected_s: int
) -> None:
    assert effective_claim_timeout(timedelta(seconds=control_s), floor_s) == timedelta(
        seconds=expected_s
    )
