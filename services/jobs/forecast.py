"""The calendar of future work: deferred jobs falling due per hour (or day), per action, against
each action's claim budget.

A system that holds work for months can show what is coming: a 180,000-job day is visible a
month ahead, not at 3 a.m. The store counts (count aggregations, one per action per window,
`services/store/forecasts.py`); this module cuts the horizon into windows, draws each action's
budget across them and marks the windows whose jobs exceed it. `jobsctl forecast` and the
console's Calendar page both read it. Standard library only.

The budget of a window is what the scan can claim in it: a rated action (its catalogue budget
or the deployment's rate, `lanes.claim_rates`) claims at min(its rate, the catch-up rate); the
actions without a rate share the rest lane, which claims at the catch-up rate, so their sum is
what is held against that budget (`REST_LANE`).
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any

from services.jobs.errors import ValidationError

# The window sizes a calendar is cut into.
STEPS: Mapping[str, timedelta] = {"hour": timedelta(hours=1), "day": timedelta(days=1)}
# At most this many windows (31 days of hours): each window is a count aggregation per action
# (at least 1 billed read each), so the page's cost is bounded by this times the actions.
MAX_WINDOWS = 31 * 24
# The row that holds the actions without a rate of their own against the catch-up rate.
REST_LANE = "(rest lane)"


@dataclass(frozen=True)
class Window:
    """One window of the calendar: jobs with start <= due_at < end."""

    start: datetime
    end: datetime


def windows(now: datetime, horizon: timedelta, step: str) -> tuple[Window, ...]:
    """The windows from the start of `now`'s `step` (hour or day, UTC) until `horizon` past
    `now`; ValidationError naming `step` or `horizon` when out of range."""
    size = STEPS.get(step)
    if size is None:
        raise ValidationError(f"step: must be one of {', '.join(STEPS)}, not {step!r}")
    if horizon <= timedelta(0):
        raise ValidationError("horizon: must be above 0")
    now = now.astimezone(UTC)
    start = now.replace(minute=0, second=0, microsecond=0)
    if step == "day":
        start = start.replace(hour=0)
    count = math.ceil((now + horizon - start) / size)
    if count > MAX_WINDOWS:
        raise ValidationError(
            f"horizon: {count} {step}s is more than {MAX_WINDOWS} windows; "
            "choose a shorter horizon or a longer step"
        )
    return tuple(Window(start + i * size, start + (i + 1) * size) for i in range(count))


@dataclass(frozen=True)
class Row:
    """One action's line: its jobs per window and the budget each window can claim."""

    action: str
    counts: tuple[int, ...]
    # Jobs a window can claim (rate x window), or None for an action in the rest lane (its
    # budget is the rest lane's, shared).
    budget: float | None
    over: tuple[bool, ...]
    overdue: int = 0  # already due before the first window

    @property
    def total(self) -> int:
        return sum(self.counts)


@dataclass(frozen=True)
class Calendar:
    windows: tuple[Window, ...]
    step: str
    catch_up_rate: float
    rows: tuple[Row, ...]  # rated actions first, then the rest lane's, then REST_LANE's sum
    # Billed reads the counts cost (1 per count aggregation, plus 1 per 1,000 entries counted).
    reads: int = 0

    @property
    def totals(self) -> tuple[int, ...]:
        return tuple(
            sum(row.counts[i] for row in self.rows if row.action != REST_LANE)
            for i in range(len(self.windows))
        )

    @property
    def over_windows(self) -> tuple[int, ...]:
        """The indexes of the windows some row exceeds."""
        return tuple(i for i in range(len(self.windows)) if any(r.over[i] for r in self.rows))

    def to_document(self) -> dict[str, Any]:
        """The calendar as JSON values (`jobsctl forecast --json`, the console's links)."""
        return {
            "step": self.step,
            "catch_up_rate": self.catch_up_rate,
            "reads": self.reads,
            "windows": [w.start.isoformat() for w in self.windows],
            "totals": list(self.totals),
            "rows": [
                {
                    "action": r.action,
                    "budget_per_window": r.budget,
                    "overdue": r.overdue,
                    "counts": list(r.counts),
                    "over": [self.windows[i].start.isoformat() for i, o in enumerate(r.over) if o],
                }
                for r in self.rows
            ],
        }

    def peak(self) -> tuple[Window, int] | None:
        totals = self.totals
        if not totals or max(totals) == 0:
            return None
        i = max(range(len(totals)), key=totals.__getitem__)
        return self.windows[i], totals[i]


def lane_rate(action: str, rates: Mapping[str, float], catch_up_rate: float) -> float | None:
    """The claim rate of `action`'s own lane (min(rate, catch-up)), or None in the rest lane."""
    rate = rates.get(action)
    return None if rate is None else min(rate, catch_up_rate)


def calendar_of(
    found: Sequence[Window],
    step: str,
    counts: Mapping[str, Sequence[int]],
    rates: Mapping[str, float],
    catch_up_rate: float,
    *,
    overdue: Mapping[str, int] | None = None,
    reads: int = 0,
) -> Calendar:
    """The calendar of `counts` (action -> jobs per window of `found`), each rated action held
    against min(rate, catch-up rate) x the window, the unrated ones' sum against the catch-up
    rate x the window (the rest lane)."""
    seconds = STEPS[step].total_seconds()
    overdue = overdue or {}
    rated: list[Row] = []
    rest: list[Row] = []
    rest_counts = [0] * len(found)
    for action in sorted(counts):
        per_window = tuple(counts[action])
        if len(per_window) != len(found):
            raise ValueError(f"{action}: {len(per_window)} counts for {len(found)} windows")
        rate = lane_rate(action, rates, catch_up_rate)
        if rate is None:
            rest_counts = [a + b for a, b in zip(rest_counts, per_window, strict=True)]
            rest.append(Row(action, per_window, None, (), overdue.get(action, 0)))
            continue
        budget = rate * seconds
        over = tuple(n > budget for n in per_window)
        rated.append(Row(action, per_window, budget, over, overdue.get(action, 0)))
    rest_budget = catch_up_rate * seconds
    rest_over = tuple(n > rest_budget for n in rest_counts)
    rest = [Row(r.action, r.counts, None, rest_over, r.overdue) for r in rest]
    rows = [*rated, *rest]
    if rest:
        rest_overdue = sum(r.overdue for r in rest)
        rows.append(Row(REST_LANE, tuple(rest_counts), rest_budget, rest_over, rest_overdue))
    return Calendar(tuple(found), step, catch_up_rate, tuple(rows), reads)


def count_reads(counts: Sequence[int]) -> int:
    """What count aggregations bill: 1 read per up to 1,000 index entries counted, and at
    least 1 per query even when it counts nothing
    (https://firebase.google.com/docs/firestore/pricing#aggregation_queries)."""
    return sum(max(1, math.ceil(n / 1000)) for n in counts)
