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
