"""Time for the local Cloud Scheduler: the wall clock, or a clock a test moves by hand.

The scheduler only asks its clock what time it is and sleeps on it until a given instant or
until something happens (an attempt finished, a run was forced, a stop). `WallClock` is the
default; `ManualClock` is a TEST SETTING: its time stands still until a test advances it, so a
test checks minute-long rules (cron, deadlines, backoff) without sleeping for minutes.
"""

from __future__ import annotations

import threading
import time
from datetime import UTC, datetime, timedelta
from typing import Protocol

# The wall clock re-reads the time at least this often while it sleeps (a suspended laptop or a
# stepped system clock must not leave the scheduler asleep past a run).
_WALL_RECHECK_S = 30.0
# A manual clock's sleeper re-checks its state at least this often (real seconds).
_MANUAL_RECHECK_S = 0.5


class SchedulerClock(Protocol):
    def now(self) -> datetime:
        """The current time, aware, in UTC."""
        ...

    def sleep_until(self, when: datetime | None) -> None:
        """Return at `when` (None: no time of its own) or at the next `notify`, whichever is
        first; a `notify` made while nobody slept ends the next sleep at once."""
        ...

    def notify(self) -> None:
        """Wake the sleeper now."""
        ...


class WallClock:
    """The real time."""

    def __init__(self) -> None:
        self._cond = threading.Condition()
        self._notified = False

    def now(self) -> datetime:
        return datetime.now(UTC)

    def sleep_until(self, when: datetime | None) -> None:
        with self._cond:
            while not self._notified:
                if when is None:
                    self._cond.wait(_WALL_RECHECK_S)
                    continue
                left = (when - self.now()).total_seconds()
                if left <= 0:
                    break
                self._cond.wait(min(left, _WALL_RECHECK_S))
            # The sleeper handles everything on waking, so one wake covers every notification.
            self._notified = False

    def notify(self) -> None:
        with self._cond:
            self._notified = True
            self._cond.notify_all()


class ManualClock:
    """TEST SETTING: a clock that stands still until a test calls `advance` or `set`.

    `settle()` waits until the scheduler sleeps having seen the latest time and every
    notification, so a test can assert what did (and did not) happen up to that time.
    """

    def __init__(self, start: datetime) -> None:
        if start.tzinfo is None:
            raise ValueError(f"{start!r} has no timezone; pass an aware datetime")
        self._now = start.astimezone(UTC)
        self._cond = threading.Condition()
        self._notified = False
        self._generation = 0  # +1 on every change of time or notification
        self._idle_at = -1  # the generation the sleeper last saw while asleep; -1 while awake

    def now(self) -> datetime:
        with self._cond:
            return self._now

    def advance(self, delta: timedelta) -> datetime:
        if delta < timedelta(0):
            raise ValueError(f"cannot advance by a negative {delta}")
        with self._cond:
            self._now += delta
            self._generation += 1
            self._cond.notify_all()
            return self._now

    def set(self, when: datetime) -> None:
        """Jump forward to `when` (aware)."""
        with self._cond:
            target = when.astimezone(UTC)
            if target < self._now:
                raise ValueError(f"cannot go back from {self._now} to {target}")
            self._now = target
            self._generation += 1
            self._cond.notify_all()

    def sleep_until(self, when: datetime | None) -> None:
        with self._cond:
            while not self._notified and (when is None or self._now < when):
                self._idle_at = self._generation
                self._cond.notify_all()
                self._cond.wait(_MANUAL_RECHECK_S)
            self._notified = False
            self._idle_at = -1
            self._cond.notify_all()

    def notify(self) -> None:
        with self._cond:
            self._notified = True
            self._generation += 1
            self._cond.notify_all()

    def settle(self, timeout_s: float = 10.0) -> None:
        """Wait (real time) until the sleeper is asleep having seen this clock's current state;
        TimeoutError if it does not get there within `timeout_s`."""
        deadline = time.monotonic() + timeout_s
        with self._cond:
            while self._idle_at != self._generation:
                left = deadline - time.monotonic()
                if left <= 0:
                    raise TimeoutError(f"the scheduler did not settle within {timeout_s:g} s")
                self._cond.wait(left)
