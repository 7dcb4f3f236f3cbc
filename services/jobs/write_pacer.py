"""The `WritePacer`: bulk scheduling kept within Firestore's write limits, for any producer loop.

Two limits apply to a producer that creates many jobs at once (`jobsctl schedule --from`, a
loop over `schedule_many` or over the API):

- **500 writes/s per index range.** Every job is written with an indexed `due_at` (a sequential
  timestamp), so its writes land at one end of an index range: Firestore sustains about 500
  writes per second there (https://cloud.google.com/firestore/docs/best-practices#high_read_write_and_delete_rates).
  The `shard` field in front of `due_at` splits the collection into one range per shard
  (`shard_of(job_id, shards)`); unpaced, `jobsctl schedule --from` wrote 874-913 writes/s on each
  of 4 ranges (issue 35).
- **The 500/50/5 rule for new traffic**: start at no more than 500 operations per second and
  grow by at most 50 % every 5 minutes
  (https://cloud.google.com/firestore/docs/best-practices#ramping_up_traffic). A bulk import is
  new traffic; the ramp (services/jobs/ramp.py's `Ramp`) starts at the pacer's first write.

`take(per_range)` is called before each batched write with the writes it makes on each range,
and waits (through `sleep`) until, counting it, no one-second window holds more than
`per_range_per_s` writes on any range nor more than the ramp's rate in all. The window slides
over the pacer's own clock, so the bound holds for every second the producer sees; the default
per-range rate (400, 80 % of the limit) leaves room for the spread between when a write is sent
and when Firestore commits it. Pure logic: time from a `Clock`, waits through `sleep`, so tests
run it on a FakeClock and count, never time.

The producer rule for other languages (docs/capacity.md, "Bulk scheduling"): in any one-second
window, at most 400 new jobs on any one shard (`shard_of`: SHA-256 of the job ID, first 8 bytes
big-endian, mod N) and at most 500 x 1.5^floor(minutes since the first write / 5) jobs in all,
never more than N x 400.
"""

from __future__ import annotations

import math
import threading
import time
from collections import deque
from collections.abc import Callable, Mapping
from datetime import datetime

from services.jobs.clock import Clock
from services.jobs.ramp import RULE_START_OPS_PER_S, Ramp

# Firestore's sustained writes per second on one sequential index range (the page cited above).
RANGE_LIMIT_PER_S = 500
# What the pacer aims at per range: 80 % of the limit.
DEFAULT_RANGE_RATE_PER_S = 400
WINDOW_S = 1.0
# The writes one batch carries at most: a fifth of the ramp's first second, so the window is
# filled to within one batch of its allowance (batches of 400 under a 500/s ramp would pass
# one a second: 400/s).
MAX_BATCH = 100

Sleep = Callable[[float], None]


class WritePacer:
    """Paces batched creates per index range and under the 500/50/5 ramp; thread-safe."""

    def __init__(
        self,
        clock: Clock,
        ranges: int,
        *,
        per_range_per_s: int = DEFAULT_RANGE_RATE_PER_S,
        ramp_start_per_s: float = RULE_START_OPS_PER_S,
        sleep: Sleep = time.sleep,
    ) -> None:
        if isinstance(ranges, bool) or not isinstance(ranges, int) or ranges < 1:
            raise ValueError(f"ranges must be a whole number of index ranges >= 1, got {ranges!r}")
        if not 1 <= per_range_per_s <= RANGE_LIMIT_PER_S:
            raise ValueError(
                f"per_range_per_s must be 1..{RANGE_LIMIT_PER_S} writes/s, got {per_range_per_s!r}"
            )
        if not (1 <= ramp_start_per_s <= RULE_START_OPS_PER_S):
            raise ValueError(
                f"ramp_start_per_s must be 1..{RULE_START_OPS_PER_S:g} writes/s (the 500/50/5 "
                f"rule's start), got {ramp_start_per_s!r}"
            )
        self._clock = clock
        self._sleep = sleep
        self.ranges = ranges
        self.per_range_per_s = per_range_per_s
        self._ramp_start = float(ramp_start_per_s)
        self._ramp: Ramp | None = None  # starts at the first write
        self._lock = threading.Lock()
        self._log: deque[tuple[datetime, Mapping[int, int]]] = deque()
        self.waited_s = 0.0

    @property
    def ceiling_per_s(self) -> int:
        """The most writes per second in all, once the ramp has grown: every range at its rate."""
        return self.ranges * self.per_range_per_s

    def max_batch(self) -> int:
        """The most writes one `take` may ask for, in all: MAX_BATCH, or less when one second
        allows less on one range or at the start of the ramp (a larger batch could never fit)."""
        return min(MAX_BATCH, math.floor(min(self.per_range_per_s, self._ramp_start)))

    def rate_at(self, now: datetime) -> float:
        """The writes per second allowed in all at `now` (the ramp's rate, at most the ceiling)."""
        if self._ramp is None:
            return min(self._ramp_start, self.ceiling_per_s)
        return self._ramp.rate_at(now, self.ceiling_per_s)

    def take(self, per_range: Mapping[int, int]) -> float:
        """Wait until the writes of one batch (`{range: writes}`) fit; returns seconds waited."""
        wanted = {r: n for r, n in per_range.items() if n > 0}
        for index in wanted:
            if not 0 <= index < self.ranges:
                raise ValueError(f"range {index} is not one of 0..{self.ranges - 1}")
        if sum(wanted.values()) > self.max_batch():
            raise ValueError(
                f"{sum(wanted.values())} writes in one batch exceed max_batch {self.max_batch()}"
            )
        waited = 0.0
        with self._lock:
            while True:
                now = self._clock.now()
                if self._ramp is None:
                    self._ramp = Ramp(now, start_rate=self._ramp_start)
                self._forget_before(now)
                wait_s = self._wait_for(wanted, now)
                if wait_s <= 0:
                    self._log.append((now, wanted))
                    self.waited_s += waited
                    return waited
                self._sleep(wait_s)
                waited += wait_s
                if self._clock.now() == now:
                    # A fake clock with the real sleep (or the reverse) would wait forever.
                    raise RuntimeError(
                        "the pacer's clock did not move while it waited: give it a sleep that "
                        "advances that clock"
                    )

    def _forget_before(self, now: datetime) -> None:
        while self._log and (now - self._log[0][0]).total_seconds() >= WINDOW_S:
            self._log.popleft()

    def _wait_for(self, wanted: Mapping[int, int], now: datetime) -> float:
        """0 when `wanted` fits in the window ending now; else how long until the oldest entry
        leaves it (then ask again)."""
        in_window: dict[int, int] = {}
        for _, counts in self._log:
            for index, count in counts.items():
                in_window[index] = in_window.get(index, 0) + count
        total = sum(in_window.values()) + sum(wanted.values())
        fits = total <= math.floor(self.rate_at(now) * WINDOW_S) and all(
            in_window.get(index, 0) + count <= self.per_range_per_s
            for index, count in wanted.items()
        )
        if fits or not self._log:  # an empty window lets any batch within max_batch through
            return 0.0
        return max(WINDOW_S - (now - self._log[0][0]).total_seconds(), 1e-3)
