"""The `Pacer`: a token bucket that spreads a paced run's claims over its length.

A one-pass run claims its whole budget as fast as the scan goes (about 1,000 claims/s on one
process), which at `shards` 1 is about 2,000 writes/s on one sequential index range: four times
the 500 writes/s Firestore sustains there, and far above the 500 ops/s its "500/50/5" rule
allows new traffic (https://cloud.google.com/firestore/docs/best-practices#ramping_up_traffic).
A paced run instead claims at `rate_per_s`: tokens accrue continuously, at most `burst` are
held (one pace page, so a pause in claiming never turns into a burst), and a claim of `want`
jobs waits until `want` tokens are there. Time comes from the scan's clock and waits go through
`sleep`, so tests drive a paced run on a FakeClock without real waiting.

A run that falls behind (a cold instance, a slow first query, a housekeeping step that took
seconds) catches up: before each page the stager `aim`s the bucket at what is left of the
budget over what is left of the run, never below the set pace and never above `ceiling_per_s`.
Measured at production cadence (180,000 jobs at 200/s), a first run that started its claims
late drained 188 jobs/s in its minute without this.
"""

from __future__ import annotations

import math
import threading
from collections.abc import Callable
from datetime import datetime

from services.jobs.clock import Clock

# A pace page is what the bucket refills in this long: at 200 jobs/s, pages of 100 twice a
# second. Small enough that no 10-second window sees more than rate x 10 s + one page.
PACE_TICK_S = 0.5

Sleep = Callable[[float], None]


def pace_page(rate_per_s: float, page_size: int) -> int:
    """The jobs one paced claim asks for: what the bucket refills in PACE_TICK_S, at least 1,
    at most the deployment's page size."""
    return max(1, min(page_size, math.ceil(rate_per_s * PACE_TICK_S)))


class Pacer:
    """Tokens at `rate_per_s`, at most `burst` held; starts full. Thread-safe."""

    def __init__(
        self,
        clock: Clock,
        sleep: Sleep,
        rate_per_s: float,
        burst: int,
        deadline: datetime,
        ceiling_per_s: float | None = None,
    ) -> None:
        if not rate_per_s > 0 or not math.isfinite(rate_per_s):
            raise ValueError(f"pace rate must be a finite number above 0, got {rate_per_s}")
        if burst < 1:
            raise ValueError(f"burst must be at least 1, got {burst}")
        self._clock = clock
        self._sleep = sleep
        self.rate_per_s = rate_per_s
        self.pace_per_s = rate_per_s  # the set pace; rate_per_s is the one in force
        self.ceiling_per_s = max(rate_per_s, ceiling_per_s or rate_per_s)
        self.burst = burst
        self.deadline = deadline
        self._tokens = float(burst)
        self._at = clock.now()
        self._lock = threading.Lock()

    def _refill(self, now: datetime) -> None:
        elapsed = max(0.0, (now - self._at).total_seconds())
        self._tokens = min(float(self.burst), self._tokens + elapsed * self.rate_per_s)
        self._at = max(self._at, now)

    def aim(self, remaining: int) -> float:
        """Set the rate that claims `remaining` jobs by the deadline, between the set pace and
        the ceiling; returns the rate now in force."""
        with self._lock:
            now = self._clock.now()
            left_s = (self.deadline - now).total_seconds()
            if left_s > 0 and remaining > 0:
                self._refill(now)  # what accrued so far, at the rate that was in force
                # Done a tick before the deadline: a page due exactly at it is never claimed.
                wanted = remaining / max(left_s - PACE_TICK_S, PACE_TICK_S)
                self.rate_per_s = min(self.ceiling_per_s, max(self.pace_per_s, wanted))
            return self.rate_per_s

    def take(self, want: int) -> int:
        """Wait until `want` tokens are there and spend them: returns `want`, or 0 when the
        deadline comes first (nothing is spent then)."""
        want = min(want, self.burst)
        while True:
            with self._lock:
                now = self._clock.now()
                if now >= self.deadline:
                    return 0
                self._refill(now)
                if self._tokens + 1e-9 >= want:
                    self._tokens -= want
                    return want
                wait_s = (want - self._tokens) / self.rate_per_s
                wait_s = min(wait_s, (self.deadline - now).total_seconds())
            self._sleep(max(wait_s, 0.001))

    def wait(self, seconds: float) -> bool:
        """Sleep `seconds` (a poll period), never past the deadline; False once it is past."""
        now = self._clock.now()
        remaining = (self.deadline - now).total_seconds()
        if remaining <= 0:
            return False
        self._sleep(min(seconds, remaining))
        return self._clock.now() < self.deadline
