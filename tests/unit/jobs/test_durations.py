"""The one duration grammar (services/jobs/durations.py): what it accepts and what it refuses."""

from __future__ import annotations

import pytest

from services.jobs.durations import DurationError, parse_duration


@pytest.mark.parametrize(
    ("text", "seconds"),
    [
        ("0", 0.0),
        ("90", 90.0),
        ("0.5", 0.5),
        ("90s", 90.0),
        ("1.5m", 90.0),
        ("1h30m", 5400.0),
        ("1m30s500ms", 90.5),
        ("500ms", 0.5),
        ("2h", 7200.0),
        ("1d", 86400.0),
        ("2w", 1_209_600.0),
        ("1y", 31_536_000.0),  # 365 days
        ("1Y2W3D", 31_536_000.0 + 1_209_600.0 + 259_200.0),
        ("  15m\n", 900.0),
    ],
)
def test_durations_add_up_their_parts(text: str, seconds: float) -> None:
    assert parse_duration(text).total_seconds() == seconds


@pytest.mark.parametrize(
    "text",
    [
        "",
        "  ",
        "soon",
        "1x",
        "h",
        "ms",
        "90 s",  # no spaces inside
        "1h 30m",
        "30m1h",  # largest unit first
        "1m1m",  # each unit once
        "1s1m",
        "1mms",
        "-5m",
        "+5m",
        "1e3",
        "inf",
        "nan",
        "1.s",
        ".5m",
        "1,5m",
    ],
)
def test_anything_else_is_refused_with_the_accepted_forms(text: str) -> None:
    with pytest.raises(DurationError, match=r"is not a duration \(try 90s, 15m, 1h30m, 2w"):
        parse_duration(text)


@pytest.mark.parametrize("text", ["99999999999d", "9" * 400, "999999999999999999999w"])
def test_a_duration_beyond_the_calendar_is_refused_not_crashed(text: str) -> None:
    with pytest.raises(DurationError, match="too large"):
        parse_duration(text)
