"""When a job is due, as the API accepts it: an RFC 3339 timestamp or a delay from now.

Stricter than `datetime.fromisoformat`, which also takes dates without a time, times without
an offset and week dates: a timestamp here is exactly RFC 3339's `date-time`
(https://www.rfc-editor.org/rfc/rfc3339#section-5.6), offset required, as Google's JSON
mapping of `google.protobuf.Timestamp` writes it. A delay is the JSON mapping of
`google.protobuf.Duration`: seconds with up to nine fractional digits and the suffix `s`
(https://protobuf.dev/programming-guides/json/), e.g. `"2592000s"` for 30 days.
"""

from __future__ import annotations

import re
from datetime import UTC, datetime, timedelta, timezone

from services.jobs.horizon import MAX_AHEAD, MAX_AHEAD_TEXT

# The horizon's bound (services/jobs/horizon.py): a delay and the due time it leads to obey one
# rule, which the payload then checks against the clock.
MAX_DELAY = MAX_AHEAD

_RFC3339 = re.compile(
    r"^(\d{4})-(\d{2})-(\d{2})[Tt](\d{2}):(\d{2}):(\d{2})(?:\.(\d{1,9}))?"
    r"(?:([Zz])|([+-])(\d{2}):(\d{2}))\Z",
    re.ASCII,  # \d would otherwise match any script's digits
)
_DURATION = re.compile(r"^(\d{1,12})(?:\.(\d{1,9}))?s\Z", re.ASCII)


class DueError(ValueError):
    """The due time is not one the API accepts."""


def parse_timestamp(text: str) -> datetime:
    """An aware UTC datetime from an RFC 3339 `date-time`; DueError says what is wrong."""
    match = _RFC3339.match(text)
    if match is None:
        raise DueError("must be an RFC 3339 timestamp with an offset, e.g. 2026-07-01T12:00:00Z")
    year, month, day, hour, minute, second = (int(g) for g in match.groups()[:6])
    fraction, zulu, sign, off_h, off_m = match.groups()[6:]
    if second == 60:
        raise DueError("leap seconds (:60) are not supported; use :59")
    offset = timedelta(0)
    if not zulu:
        if int(off_h) > 23 or int(off_m) > 59:
            raise DueError(f"offset {sign}{off_h}:{off_m} is out of range")
        offset = timedelta(hours=int(off_h), minutes=int(off_m)) * (-1 if sign == "-" else 1)
    micros = int((fraction or "0").ljust(6, "0")[:6])
    try:
        local = datetime(year, month, day, hour, minute, second, micros, timezone(offset))
        return local.astimezone(UTC)
    except (ValueError, OverflowError) as exc:
        raise DueError(f"is not a valid date and time ({exc})") from exc


def parse_delay(text: str) -> timedelta:
    """A non-negative delay from a Duration string such as "90s" or "1.5s"."""
    match = _DURATION.match(text)
    if match is None:
        raise DueError('must be a duration in seconds with the suffix "s", e.g. "2592000s"')
    seconds, fraction = match.groups()
    if int(seconds) > MAX_DELAY.total_seconds():
        raise DueError(f"must be at most {int(MAX_DELAY.total_seconds())}s ({MAX_AHEAD_TEXT})")
    return timedelta(seconds=int(seconds), microseconds=int((fraction or "0").ljust(6, "0")[:6]))


def format_timestamp(value: datetime) -> str:
    """RFC 3339 in UTC with a `Z`, microseconds only when there are some."""
    utc = value.astimezone(UTC)
    # Not strftime: its %Y does not pad years before 1000 on every platform.
    text = (
        f"{utc.year:04d}-{utc.month:02d}-{utc.day:02d}"
        f"T{utc.hour:02d}:{utc.minute:02d}:{utc.second:02d}"
    )
    if utc.microsecond:
        text += f".{utc.microsecond:06d}".rstrip("0")
    return text + "Z"
