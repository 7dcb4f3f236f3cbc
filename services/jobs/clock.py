"""Time as a dependency: every component asks a `Clock`, so tests can move time by days.

Nothing else in the codebase calls `datetime.now()`; it takes a clock instead.
"""

from __future__ import annotations

import threading
from datetime import UTC, datetime, timedelta
from typing import Protocol


class Clock(Protocol):
    """A source of the current time."""

    def now(self) -> datetime:
        """The current time, timezone-aware, in UTC."""
        ...


class SystemClock:
    """The real clock."""

    def now(self) -> datetime:
        return datetime.now(UTC)


def _require_aware(value: datetime) -> datetime:
    if value.tzinfo is None or value.utcoffset() is None:
        raise ValueError(f"{value!r} has no timezone; pass an aware datetime")
    return value.astimezone(UTC)


class FakeClock:
    """A clock that stands still until a test moves it. Thread-safe."""

    def __init__(self, start: datetime) -> None:
        self._now = _require_aware(start)
        self._lock = threading.Lock()

    def now(self) -> datetime:
        with self._lock:
            return self._now

    def advance(self, delta: timedelta) -> datetime:
        """Move forward by `delta` (never backwards) and return the new time."""
        if delta < timedelta(0):
            raise ValueError(f"cannot advance by a negative {delta}")
        with self._lock:
            self._now += delta
            return self._now

    def set(self, value: datetime) -> None:
        """Jump to `value` (aware)."""
        aware = _require_aware(value)
        with self._lock:
            self._now = aware


def clock_offset(before: datetime, server_time: datetime, after: datetime) -> timedelta:
    """How far this instance's clock is from Firestore's, at the least: `before` and `after`
    were read from the clock around a request that Firestore answered at `server_time` (a
    read's read_time), so a clock that agrees would have `before <= server_time <= after`.
    Positive: this clock is ahead; negative: behind; zero: the two agree within the request's
    round trip (which this bound never counts as skew)."""
    if server_time < before:
        return before - server_time
    if server_time > after:
        return after - server_time
    return timedelta(0)
