"""Times and durations as an operator types them: `now`, `+30d`, `+1y`, `-2h`, `1h30m`, ISO 8601.

A year (`y`) is 365 days: a retention decision's "in a year" is a duration, not a calendar date.
"""

from __future__ import annotations

import datetime
import re


class TimeSpecError(ValueError):
    """Not a time or duration this CLI understands."""


_UNITS = {"s": 1, "m": 60, "h": 3600, "d": 86400, "w": 7 * 86400, "y": 365 * 86400}
_DURATION = re.compile(r"(\d+(?:\.\d+)?)([smhdwy])")


def parse_duration(text: str) -> datetime.timedelta:
    """`90s`, `15m`, `1h30m`, `30d`, `2w`, `1y`; a bare number means seconds."""
    spec = text.strip().lower()
    if re.fullmatch(r"\d+(?:\.\d+)?", spec):
        return _seconds(float(spec), text)
    parts = _DURATION.findall(spec)
    if not parts or "".join(n + u for n, u in parts) != spec:
        raise TimeSpecError(f"{text!r} is not a duration (try 90s, 15m, 1h30m, 30d, 1y)")
    return _seconds(sum(float(n) * _UNITS[u] for n, u in parts), text)


def _seconds(seconds: float, text: str) -> datetime.timedelta:
    try:
        return datetime.timedelta(seconds=seconds)
    except OverflowError as exc:
        # timedelta stops at 999,999,999 days; a typo like 99999999999d must not be a traceback.
        raise TimeSpecError(f"{text!r} is too large a duration") from exc


def parse_time(text: str, now: datetime.datetime) -> datetime.datetime:
    """An absolute UTC time: `now`, `now+30d`, `+30d`, `-2h`, or ISO 8601 (naive means UTC)."""
    spec = text.strip()
    relative = re.fullmatch(r"(?:now)?\s*([+-])\s*(.+)", spec, flags=re.IGNORECASE)
    if spec.lower() == "now":
        return now
    if relative:
        offset = parse_duration(relative.group(2))
        try:
            return now + offset if relative.group(1) == "+" else now - offset
        except OverflowError as exc:
            raise TimeSpecError(f"{text!r} is out of range (years 1 to 9999)") from exc
    try:
        moment = datetime.datetime.fromisoformat(spec)
    except ValueError as exc:
        raise TimeSpecError(
            f"{text!r} is not a time (try now, +30d, -2h or 2026-12-30T10:00:00Z)"
        ) from exc
    if moment.tzinfo is None:
        return moment.replace(tzinfo=datetime.UTC)
    try:
        return moment.astimezone(datetime.UTC)
    except OverflowError as exc:
        raise TimeSpecError(f"{text!r} is out of range (years 1 to 9999)") from exc
