"""`Samples`: the oldest-unacked-age points of each subscription, taken as Pub/Sub takes them.

"Sampled every 60 seconds. After sampling, data is not visible for up to 120 seconds"
(https://cloud.google.com/monitoring/api/metrics_gcp_p_z, pubsub subscription/
oldest_unacked_message_age). Here every point becomes visible exactly `visibility_delay_s`
after its sample (120 s: the worst case, so a reader that works here copes with production).
"""

from __future__ import annotations

import math
import threading
import time
from collections import deque
from collections.abc import Callable, Mapping
from dataclasses import dataclass

SAMPLE_PERIOD_S = 60.0
VISIBILITY_DELAY_S = 120.0
# Points kept per subscription: a day at one a minute (older ones are never read here).
KEEP_POINTS = 1440

# Subscription path -> publish time (epoch seconds) of its oldest unacked message, or None.
AgeSource = Callable[[], Mapping[str, float | None]]


@dataclass(frozen=True)
class Point:
    sampled_at: float  # epoch seconds
    age_s: int  # whole seconds, as the INT64 gauge reports it


class Samples:
    """Thread-safe; `tick` takes a sample when one is due, `sample` takes one now."""

    def __init__(
        self,
        source: AgeSource,
        clock: Callable[[], float] = time.time,
        *,
        period_s: float = SAMPLE_PERIOD_S,
        visibility_delay_s: float = VISIBILITY_DELAY_S,
    ) -> None:
        self._source = source
        self._clock = clock
        self.period_s = period_s
        self.visibility_delay_s = visibility_delay_s
        self._lock = threading.Lock()
        self._points: dict[str, deque[Point]] = {}
        self._next_at: float | None = None

    def tick(self) -> bool:
        """Take a sample if the period has passed since the last one; True when taken."""
        now = self._clock()
        with self._lock:
            if self._next_at is not None and now < self._next_at:
                return False
            self._next_at = now + self.period_s
        self.sample()
        return True

    def sample(self) -> None:
        """One point per subscription the source knows, at the clock's now. An empty
        subscription's age is 0 (inferred: Pub/Sub graphs an idle subscription at 0)."""
        oldest = self._source()
        now = self._clock()
        with self._lock:
            for name, published in oldest.items():
                age = 0 if published is None else max(math.floor(now - published), 0)
                points = self._points.setdefault(name, deque(maxlen=KEEP_POINTS))
                points.append(Point(now, age))

    def visible(self, subscription: str, start: float | None, end: float) -> list[Point]:
        """The points of `subscription` sampled in (start, end] (at `end` exactly when start
        is None) that a reader can see now, newest first, as ListTimeSeries orders them."""
        seen_until = self._clock() - self.visibility_delay_s
        with self._lock:
            points = list(self._points.get(subscription, ()))
        return [
            p
            for p in reversed(points)
            if p.sampled_at <= min(end, seen_until)
            and (p.sampled_at > start if start is not None else p.sampled_at == end)
        ]

    def subscriptions(self) -> list[str]:
        with self._lock:
            return sorted(self._points)
