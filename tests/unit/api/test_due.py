from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest

from services.api.due import DueError, format_timestamp, parse_delay, parse_timestamp


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("2026-07-01T12:00:00Z", datetime(2026, 7, 1, 12, tzinfo=UTC)),
        ("2026-07-01t12:00:00z", datetime(2026, 7, 1, 12, tzinfo=UTC)),
        ("2026-07-01T14:30:00+02:30", datetime(2026, 7, 1, 12, tzinfo=UTC)),
        ("2026-07-01T12:00:00.123456789Z", datetime(2026, 7, 1, 12, 0, 0, 123456, tzinfo=UTC)),
        ("2026-07-01T05:00:00-07:00", datetime(2026, 7, 1, 12, tzinfo=UTC)),
    ],
)
def test_rfc3339_timestamps_are_read_in_utc(text: str, expected: datetime) -> None:
    assert parse_timestamp(text) == expected


@pytest.mark.parametrize(
    "text",
    [
        "2026-07-01",  # a date alone
        "2026-07-01T12:00:00",  # no offset
        "2026-07-01 12:00:00Z",  # space instead of T
        "2026-W27-1T12:00:00Z",  # a week date
        "2026-02-30T12:00:00Z",  # no such day
        "2026-07-01T24:00:00Z",
        "2026-07-01T12:00:60Z",  # a leap second
        "2026-07-01T12:00:00+24:00",
        "0000-01-01T00:00:00Z",
        "0001-01-01T00:00:00+01:00",  # before year 1 in UTC
        "2026-07-01T12:00:00.1234567890Z",
        "١٢٣٤-07-01T12:00:00Z",  # digits, but not ASCII ones
        "2026-07-01T12:00:00Z\n",  # a trailing newline
        "",
    ],
)
def test_anything_but_rfc3339_is_refused(text: str) -> None:
    with pytest.raises(DueError):
        parse_timestamp(text)


def test_delays_are_protobuf_duration_strings() -> None:
    assert parse_delay("2592000s") == timedelta(days=30)
    assert parse_delay("1.5s") == timedelta(seconds=1, microseconds=500000)
    assert parse_delay("0s") == timedelta(0)
    for bad in ("30d", "10s\n", "-1s", "1e3s", "s", "10", " 10s", "999999999999s"):
        with pytest.raises(DueError):
            parse_delay(bad)


def test_timestamps_are_written_with_z_and_padded_years() -> None:
    assert format_timestamp(datetime(2026, 7, 1, 12, tzinfo=UTC)) == "2026-07-01T12:00:00Z"
    assert format_timestamp(datetime(5, 1, 1, tzinfo=UTC)) == "0005-01-01T00:00:00Z"
    assert format_timestamp(datetime(2026, 7, 1, 0, 0, 0, 120000, tzinfo=UTC)).endswith(".12Z")
