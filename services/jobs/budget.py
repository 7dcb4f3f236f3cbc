"""How much one scan run may do: the enqueue budget (jobs) and the time budget (seconds), and
how old a claim must be before anyone (the scan's reclaimer or `jobsctl reclaim`) takes it back.

The enqueue budget protects downstream: it is the per-run cap, lowered to what the catch-up
rate allows over one schedule interval, so a backlog drains at the rate the operator chose.
The control document overrides the configured cap and rate.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Literal

BudgetSource = Literal["cap", "rate"]

# How a run works (docs/scan.md, "Modes"). one-pass: claim the budget as fast as the scan goes,
# then end. paced: claim at the catch-up rate per second (a token bucket) for the time budget,
# polling for newly due work every JOBS_SCAN_POLL_S, or ending once nothing is due when
# JOBS_SCAN_END_WHEN_IDLE (the cheap choice).
ScanMode = Literal["one-pass", "paced"]
SCAN_MODES: tuple[ScanMode, ...] = ("one-pass", "paced")
# A paced run ends this long before the next scheduled one at the latest: its last publishes,
# marks, backlog measure and run record happen in it.
PACED_MARGIN_S = 10.0
DEFAULT_POLL_S = 5.0
MIN_POLL_S, MAX_POLL_S = 1.0, 60.0


@dataclass(frozen=True)
class EnqueueBudget:
    """The most jobs one run may claim, and which limit set it."""

    limit: int
    cap: int
    rate_per_s: float | None
    interval_s: float
    source: BudgetSource


def enqueue_budget(
    cap: int,
    interval_s: float,
    *,
    rate_per_s: float | None = None,
    cap_override: int | None = None,
) -> EnqueueBudget:
    """min(cap, floor(rate x interval)); `cap_override` (the control document) replaces `cap`.

    A rate of None means "no catch-up limit". A rate of 0 yields a budget of 0: the operator
    asked for nothing to be enqueued, which is a pause by another name.
    """
    effective_cap = cap if cap_override is None else cap_override
    if effective_cap < 0:
        raise ValueError(f"per-run cap must be >= 0, got {effective_cap}")
    if interval_s <= 0:
        raise ValueError(f"schedule interval must be > 0, got {interval_s}")
    if rate_per_s is None:
        return EnqueueBudget(effective_cap, effective_cap, None, interval_s, "cap")
    if rate_per_s < 0 or math.isnan(rate_per_s):
        raise ValueError(f"catch-up rate must be >= 0, got {rate_per_s}")
    by_rate = math.floor(rate_per_s * interval_s + 1e-9)
    if by_rate < effective_cap:
        return EnqueueBudget(by_rate, effective_cap, rate_per_s, interval_s, "rate")
    return EnqueueBudget(effective_cap, effective_cap, rate_per_s, interval_s, "cap")


def partition_share(budget: EnqueueBudget, partition: int, partitions: int) -> EnqueueBudget:
    """Partition `partition`'s share of a run's budget when `partitions` Scheduler jobs each
    claim their own shards: the limit split evenly, the remainder to the first ones, so the k
    runs of one interval together claim what one run would (they share the rate, never
    multiply it)."""
    if partitions < 1 or not 0 <= partition < partitions:
        raise ValueError(f"partition {partition} of {partitions} is out of range")
    if partitions == 1:
        return budget
    share, extra = divmod(budget.limit, partitions)
    limit = share + (1 if partition < extra else 0)
    return EnqueueBudget(limit, budget.cap, budget.rate_per_s, budget.interval_s, budget.source)


@dataclass(frozen=True)
class TimeBudget:
    """A run's deadline: no new page is claimed once `now` reaches it."""

    started_at: datetime
    seconds: float

    @property
    def deadline(self) -> datetime:
        return self.started_at + timedelta(seconds=self.seconds)

    def exhausted(self, now: datetime) -> bool:
        return now >= self.deadline

    def remaining_s(self, now: datetime) -> float:
        return max(0.0, (self.deadline - now).total_seconds())


def effective_claim_timeout(control_timeout: timedelta, floor_s: float | None) -> timedelta:
    """The claim timeout in force: the control document's, never below the deployment's floor.

    `floor_s` is JOBS_CLAIM_TIMEOUT_S (None when unset). The floor exists because a shorter
    timeout would take back claims a scan run may still be publishing; the scan and jobsctl
    both apply it through this one function so they can never disagree.
    """
    if floor_s is None:
        return control_timeout
    return max(control_timeout, timedelta(seconds=floor_s))


# A job enqueued longer ago than this is "stale": its message should long since have been
# delivered, or retried (each try ends by the push ack deadline, each wait is at most the max
# backoff) and dead-lettered. At the infra's default Pub/Sub settings that whole path is at
# most 10 x 300 s + 9 x 600 s = 8,400 s; 3 h is above it, so a slow but healthy redelivery is
# never counted.
DEFAULT_ENQUEUED_TIMEOUT_S = 3 * 3600.0


# How often, at most, a run that finds nothing due does its housekeeping (the reclaimer, the
# backlog counts, its scan_runs record). 15 min is three runs of the default 5-minute
# schedule, so two idle runs in three bill 2 operations; the reclaimer is a backstop (Pub/Sub
# redelivers a crashed worker's message by itself), so a stuck claim or an expired lease
# waiting up to 15 min past its own timeout costs a delay, never a job.
DEFAULT_HOUSEKEEPING_INTERVAL_S = 900.0


@dataclass(frozen=True)
class ScanLimits:
    """The deployment's bounds on a run (from Settings); the control document works inside them.

    `max_per_run` is a ceiling: the operator's claim budget and catch-up rate can only lower
    the enqueue budget below it. `claim_timeout_s` is a floor for the same reason in reverse:
    a shorter timeout would reclaim the claims of a run that may still be publishing.
    """

    time_budget_s: float = 60.0
    max_per_run: int = 1000
    page_size: int = 200
    interval_s: float = 60.0
    claim_timeout_s: float = 600.0
    reclaim_limit: int = 500
    mark_workers: int = 16
    # Enqueued longer than this, a job counts as stale (its message may be lost); the
    # deployment sets it (JOBS_ENQUEUED_TIMEOUT_S) above Pub/Sub's whole retry path.
    enqueued_timeout_s: float = DEFAULT_ENQUEUED_TIMEOUT_S
    # 0: every run does its housekeeping; above 0, see services/scan/housekeeping.py.
    housekeeping_interval_s: float = DEFAULT_HOUSEKEEPING_INTERVAL_S
    mode: ScanMode = "one-pass"
    poll_s: float = DEFAULT_POLL_S
    end_when_idle: bool = True
    # Scheduler jobs, each owning a disjoint group of shards (services/scan/partitions.py).
    partitions: int = 1
    shards: int = 1
    # How long a run's partition lease lasts: its longest run plus slack (settings.py).
    lease_s: float = 120.0

    @property
    def polls(self) -> bool:
        """A paced run that keeps looking for newly due work until its time budget ends."""
        return self.mode == "paced" and not self.end_when_idle


def pace_rate(budget: EnqueueBudget, time_budget_s: float) -> float:
    """The per-second claim rate of a paced run: its budget spread over its time budget.

    The budget is rate x interval (or the cap), and a paced run works for its time budget,
    which ends PACED_MARGIN_S or more before the next run; claiming the budget over that time
    makes each interval drain exactly the set rate (x interval / time budget per second while
    the run works: 1.2 x at a 60 s interval and a 50 s run)."""
    if time_budget_s <= 0:
        raise ValueError(f"time budget must be > 0, got {time_budget_s}")
    return budget.limit / time_budget_s


# A paced run that fell behind claims faster, up to this times the set rate (the budget over
# the interval): with the bucket's one page on top (half a second at the pace), no 10-second
# window exceeds 1.5 x the set rate, the bound the drills hold a paced run to.
CATCH_UP_FACTOR = 1.35


def catch_up_ceiling(budget: EnqueueBudget) -> float:
    """The fastest a paced run claims while it catches up: CATCH_UP_FACTOR x the set rate."""
    return CATCH_UP_FACTOR * budget.limit / budget.interval_s
