"""A catch-up ramp: Firestore's "500/50/5" rule applied to a resumed backlog.

Firestore asks new traffic to start at no more than 500 operations per second and to grow by at
most 50 % every 5 minutes (https://cloud.google.com/firestore/docs/best-practices#ramping_up_traffic);
a backlog resumed after a pause is new traffic to the jobs collection. `jobsctl resume --ramp`
stores a `Ramp` in the control document; every scan run reads it with the control document and
claims at `rate_at(now, set rate)`: the start rate, x 1.5 every 5 minutes, never above the rate
the operator set. Shared by the scan (which applies it) and jobsctl (which starts and shows it).
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any

# The rule's figures (the page cited above).
RULE_START_OPS_PER_S = 500.0
RAMP_STEP = 1.5
RAMP_EVERY_S = 300.0
# Firestore operations one job costs while it drains: the claim (1 read, 1 write), the enqueue
# mark (1 write), the worker's start (1 read, 1 write) and completion (1 write); measured by
# `python -m tests.benchmarks cost` (docs/scan.md, "Cost per run and per job"). The TTL delete
# comes a retention period later, outside the ramp.
OPS_PER_JOB = 6
# The default start: the rule's 500 ops/s in jobs/s.
DEFAULT_START_RATE = math.floor(RULE_START_OPS_PER_S / OPS_PER_JOB)


@dataclass(frozen=True)
class Ramp:
    """Start at `start_rate` jobs/s at `started_at`, x `step` every `every_s` seconds."""

    started_at: datetime
    start_rate: float = float(DEFAULT_START_RATE)
    step: float = RAMP_STEP
    every_s: float = RAMP_EVERY_S

    def problems(self) -> list[str]:
        found = []
        if self.started_at.tzinfo is None:
            found.append("ramp start time must be timezone-aware")
        if not (self.start_rate > 0 and math.isfinite(self.start_rate)):
            found.append("ramp start rate must be a finite number of jobs/s above 0")
        if not 1.0 < self.step <= RAMP_STEP:
            found.append(f"ramp step must be above 1 and at most {RAMP_STEP} (+50 %)")
        if not RAMP_EVERY_S <= self.every_s <= 86400:
            found.append(f"ramp period must be from {RAMP_EVERY_S:g} s to 1 d")
        return found

    def steps_at(self, now: datetime) -> int:
        elapsed = (now - self.started_at).total_seconds()
        return max(0, math.floor(elapsed / self.every_s))

    def rate_at(self, now: datetime, target: float) -> float:
        """The rate in force at `now`: never above `target` (the operator's set rate)."""
        steps = self.steps_at(now)
        # Capped before the power: a ramp weeks old must not overflow.
        steps = min(steps, self.steps_to(target))
        return min(target, self.start_rate * self.step**steps)

    def steps_to(self, target: float) -> int:
        """Steps until the ramp reaches `target`."""
        if target <= self.start_rate:
            return 0
        return math.ceil(math.log(target / self.start_rate) / math.log(self.step) - 1e-9)

    def reaches_at(self, target: float) -> datetime:
        """When the ramp reaches `target`."""
        return self.started_at + timedelta(seconds=self.steps_to(target) * self.every_s)

    def next_step(self, now: datetime, target: float) -> tuple[datetime, float] | None:
        """When the rate next rises and to what; None once it is at `target`."""
        steps = self.steps_at(now)
        if steps >= self.steps_to(target):
            return None
        at = self.started_at + timedelta(seconds=(steps + 1) * self.every_s)
        return at, min(target, self.start_rate * self.step ** (steps + 1))

    def to_document(self) -> dict[str, Any]:
        return {
            "started_at": self.started_at,
            "start_rate": self.start_rate,
            "step": self.step,
            "every_s": self.every_s,
        }

    @classmethod
    def from_document(cls, data: Any) -> Ramp | None:
        """The stored ramp, or None when absent or malformed (then no ramp applies: the set
        rate, which the operator chose, still bounds every run)."""
        if not isinstance(data, Mapping):
            return None
        started = data.get("started_at")
        try:
            ramp = cls(
                started_at=started.astimezone(UTC) if isinstance(started, datetime) else None,  # type: ignore[arg-type]
                start_rate=float(data.get("start_rate", DEFAULT_START_RATE)),
                step=float(data.get("step", RAMP_STEP)),
                every_s=float(data.get("every_s", RAMP_EVERY_S)),
            )
        except (TypeError, ValueError):
            return None
        if not isinstance(ramp.started_at, datetime) or ramp.problems():
            return None
        return ramp
