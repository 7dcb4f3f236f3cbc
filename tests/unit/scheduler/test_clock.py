"""The scheduler's clocks: a notification wakes a sleeper; the manual clock moves only by hand."""

from __future__ import annotations

import threading
from datetime import UTC, datetime, timedelta

import pytest

from emulators.scheduler.clock import ManualClock, WallClock

START = datetime(2026, 1, 1, tzinfo=UTC)


def test_a_notification_before_the_sleep_ends_the_next_sleep_at_once() -> None:
    for clock in (WallClock(), ManualClock(START)):
        clock.notify()
        clock.sleep_until(None)  # returns: the notification was kept, not lost


def test_the_wall_clock_sleeps_until_a_past_instant_returns_at_once() -> None:
    clock = WallClock()
    clock.sleep_until(clock.now() - timedelta(seconds=1))


def test_a_manual_sleeper_wakes_when_time_reaches_its_instant_and_settle_sees_it() -> None:
    clock = ManualClock(START)
    woke = threading.Event()

    def sleeper() -> None:
        clock.sleep_until(START + timedelta(minutes=1))
        woke.set()
        clock.sleep_until(None)

    threading.Thread(target=sleeper, daemon=True).start()
    clock.settle()
    clock.advance(timedelta(seconds=59))
    clock.settle()
    assert not woke.is_set()
    clock.advance(timedelta(seconds=1))
    clock.settle()  # asleep again, in its second sleep
    assert woke.is_set()
    clock.notify()


def test_a_manual_clock_never_goes_back_and_needs_an_aware_start() -> None:
    clock = ManualClock(START)
    with pytest.raises(ValueError, match="negative"):
        clock.advance(timedelta(seconds=-1))
    with pytest.raises(ValueError, match="cannot go back"):
        clock.set(START - timedelta(seconds=1))
    with pytest.raises(ValueError, match="no timezone"):
        ManualClock(datetime(2026, 1, 1))


def test_settle_gives_up_when_nobody_sleeps() -> None:
    with pytest.raises(TimeoutError):
        ManualClock(START).settle(timeout_s=0.1)
