from datetime import UTC, datetime, timedelta, timezone

import pytest

from services.jobs.clock import FakeClock, SystemClock, clock_offset

START = datetime(2026, 1, 1, tzinfo=UTC)


def test_system_clock_returns_an_aware_utc_time() -> None:
    now = SystemClock().now()
    assert now.tzinfo is not None
    assert now.utcoffset() == timedelta(0)


def test_fake_clock_stands_still_until_advanced() -> None:
    clock = FakeClock(START)
    assert clock.now() == START
    assert clock.now() == START
    assert clock.advance(timedelta(days=7)) == START + timedelta(days=7)
    assert clock.now() == START + timedelta(days=7)


def test_fake_clock_set_jumps_and_normalises_to_utc() -> None:
    clock = FakeClock(START)
    clock.set(datetime(2026, 3, 1, 12, tzinfo=timezone(timedelta(hours=2))))
    assert clock.now() == datetime(2026, 3, 1, 10, tzinfo=UTC)
    assert clock.now().utcoffset() == timedelta(0)


def test_fake_clock_refuses_naive_times_and_negative_advances() -> None:
    with pytest.raises(ValueError, match="no timezone"):
        FakeClock(datetime(2026, 1, 1))
    clock = FakeClock(START)
    with pytest.raises(ValueError, match="no timezone"):
        clock.set(datetime(2026, 1, 1))
    with pytest.raises(ValueError, match="negative"):
        clock.advance(timedelta(seconds=-1))


def test_the_offset_to_firestores_time_counts_only_what_the_round_trip_cannot_explain() -> None:
    t = datetime(2026, 1, 1, tzinfo=UTC)
    second = timedelta(seconds=1)
    assert clock_offset(t, t + second, t + 2 * second) == timedelta(0)  # inside the request
    assert clock_offset(t, t - 90 * second, t + second) == 90 * second  # ahead
    assert clock_offset(t, t + 92 * second, t + 2 * second) == -90 * second  # behind
