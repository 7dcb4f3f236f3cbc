"""Operator-typed times and durations parse to exact UTC values or fail with a hint."""

from __future__ import annotations

import datetime

import pytest

from services.cli.timespec import TimeSpecError, duration, parse_time

NOW = datetime.datetime(2026, 11, 30, 4, 0, tzinfo=datetime.UTC)


@pytest.mark.parametrize(
    ("text", "seconds"),
    [
        ("90", 90),
        ("90s", 90),
        ("15m", 900),
        ("1h30m", 5400),
        ("30d", 2_592_000),
        ("2w", 1_209_600),
        ("1y", 31_536_000),  # 365 days
        ("0.5s", 0.5),
        ("500ms", 0.5),  # the services' spelling, now jobsctl's too (one grammar)
    ],
)
def test_durations_add_up_their_units(text: str, seconds: float) -> None:
    assert duration("--claim-timeout", text).total_seconds() == seconds


@pytest.mark.parametrize("text", ["", "soon", "1x", "h", "1h 30m", "-5m"])
def test_malformed_durations_are_refused_naming_the_flag(text: str) -> None:
    with pytest.raises(TimeSpecError, match=r"^--claim-timeout: .* is not a duration"):
        duration("--claim-timeout", text)


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("now", NOW),
        ("+30d", NOW + datetime.timedelta(days=30)),
        ("now+1h", NOW + datetime.timedelta(hours=1)),
        ("-2h", NOW - datetime.timedelta(hours=2)),
        ("2026-12-30T10:00:00Z", datetime.datetime(2026, 12, 30, 10, tzinfo=datetime.UTC)),
        ("2026-12-30T10:00:00", datetime.datetime(2026, 12, 30, 10, tzinfo=datetime.UTC)),
        ("2026-12-30T12:00:00+02:00", datetime.datetime(2026, 12, 30, 10, tzinfo=datetime.UTC)),
    ],
)
def test_times_resolve_to_utc(text: str, expected: datetime.datetime) -> None:
    assert parse_time(text, NOW) == expected


def test_unparseable_time_names_the_accepted_forms() -> None:
    with pytest.raises(TimeSpecError, match=r"try now, \+30d"):
        parse_time("tomorrow", NOW)


@pytest.mark.parametrize("text", ["99999999999d", "9" * 400, "999999999999999999999w"])
def test_durations_beyond_the_calendar_are_refused_not_crashed(text: str) -> None:
    with pytest.raises(TimeSpecError, match="too large"):
        duration("--interval", text)


@pytest.mark.parametrize(
    "text", ["+99999999d", "-99999999d", "now+4000000d", "0001-01-01T00:00:00+05:00"]
)
def test_times_beyond_the_calendar_are_refused_not_crashed(text: str) -> None:
    with pytest.raises(TimeSpecError, match="out of range"):
        parse_time(text, NOW)


def test_a_year_ahead_is_365_days_ahead() -> None:
    assert parse_time("+1y", NOW) == NOW + datetime.timedelta(days=365)
