"""Drain-time arithmetic for a catch-up: how long a backlog takes at a chosen rate (read by
`jobsctl plan` and the console's Control page).

The operator picks a catch-up rate (jobs/s the downstream can take) and reserves a share of it
for normal traffic that keeps becoming due while the backlog drains. The scan can also be the
bottleneck: each run claims at most `max_per_run` jobs, and runs come every `interval_s`.
Every figure rounds towards the pessimistic side, because a plan that is late is worse than one
that is early.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Literal


class PlanError(ValueError):
    """The plan's inputs are out of range."""


Bottleneck = Literal["rate", "budget"]


@dataclass(frozen=True)
class DrainPlan:
    """How a backlog drains: the effective rate, what limits it, and the time it takes."""

    backlog: int
    rate_per_s: float
    reserve_fraction: float
    effective_rate_per_s: float
    limited_by: Bottleneck
    seconds: int
    runs: int | None  # scan runs needed, when the scan interval is known

    @property
    def reserved_per_s(self) -> float:
        return self.rate_per_s * self.reserve_fraction


def plan_drain(
    backlog: int,
    rate_per_s: float,
    reserve_fraction: float = 0.1,
    *,
    max_per_run: int | None = None,
    interval_s: float | None = None,
) -> DrainPlan:
    """The drain plan for `backlog` due jobs at `rate_per_s`, keeping `reserve_fraction` free."""
    _check(backlog, rate_per_s, reserve_fraction, max_per_run, interval_s)
    capacity = rate_per_s
    limited_by: Bottleneck = "rate"
    if max_per_run is not None and interval_s is not None and max_per_run / interval_s < rate_per_s:
        capacity, limited_by = max_per_run / interval_s, "budget"
    # Normal traffic shares whichever limit binds, so the reserve comes off that one.
    effective = capacity * (1.0 - reserve_fraction)
    seconds = math.ceil(backlog / effective) if backlog else 0
    runs = math.ceil(seconds / interval_s) if interval_s is not None else None
    return DrainPlan(
        backlog=backlog,
        rate_per_s=rate_per_s,
        reserve_fraction=reserve_fraction,
        effective_rate_per_s=effective,
        limited_by=limited_by,
        seconds=seconds,
        runs=runs,
    )


def _check(
    backlog: int,
    rate_per_s: float,
    reserve_fraction: float,
    max_per_run: int | None,
    interval_s: float | None,
) -> None:
    problems = []
    if backlog < 0:
        problems.append("the backlog cannot be negative")
    if not rate_per_s > 0:
        problems.append("the rate must be above 0/s")
    elif not math.isfinite(rate_per_s):
        problems.append("the rate must be finite")
    elif interval_s is not None and not math.isfinite(rate_per_s * interval_s):
        # The jobs per run it implies must be a number the budget advice can print.
        problems.append("the rate is too large")
    if not 0 <= reserve_fraction < 1:
        problems.append("the reserve must be at least 0 % and below 100 %")
    if max_per_run is not None and max_per_run < 1:
        problems.append("the per-run budget must be at least 1")
    if interval_s is not None and not interval_s > 0:
        problems.append("the scan interval must be above 0 s")
    if problems:
        raise PlanError("; ".join(problems))


def format_duration(seconds: float) -> str:
    """`42 s`, `4 m 10 s`, `1 h 07 m`, `2 d 03 h`: two units, the smaller one rounded up."""
    total = math.ceil(seconds)
    if total < 60:
        return f"{total} s"
    if total < 3600:
        minutes, rest = divmod(total, 60)
        return f"{minutes} m {rest:02d} s"
    if total < 86400:
        hours, rest = divmod(total, 3600)
        minutes = math.ceil(rest / 60)
        if minutes == 60:
            return format_duration((hours + 1) * 3600)
        return f"{hours} h {minutes:02d} m"
    days, rest = divmod(total, 86400)
    hours = math.ceil(rest / 3600)
    if hours == 24:
        return f"{days + 1} d 00 h"
    return f"{days} d {hours:02d} h"


def describe(plan: DrainPlan) -> str:
    """One line an operator can paste: `180,000 due; at 50/s with 10 % reserved: 1 h 07 m`."""
    line = (
        f"{plan.backlog:,} due; at {_number(plan.rate_per_s)}/s with "
        f"{_number(plan.reserve_fraction * 100)} % reserved: {format_duration(plan.seconds)}"
    )
    if plan.limited_by == "budget":
        capacity = plan.effective_rate_per_s / (1.0 - plan.reserve_fraction)
        line += f" (the per-run budget limits the scan to {_number(capacity)}/s)"
    return line


def budget_arithmetic(limit: int, cap: int | None, rate_per_s: float, interval_s: float) -> str:
    """The per-run budget with its arithmetic: `100 per run = min(max per run 1,000, 10/s x
    10 s = 100)`; the rate term alone when no cap applies."""
    by_rate = math.floor(rate_per_s * interval_s + 1e-9)
    term = f"{_number(rate_per_s)}/s x {format_duration(interval_s)} = {by_rate:,}"
    if cap is None:
        return f"{limit:,} per run = {term}"
    return f"{limit:,} per run = min(max per run {cap:,}, {term})"


def _number(value: float) -> str:
    if value == int(value):
        return f"{int(value):,}"
    return f"{value:,.2f}".rstrip("0").rstrip(".")
