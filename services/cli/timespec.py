"""Times and durations as an operator types them: `now`, `+30d`, `+1y`, `-2h`, ISO 8601.

Durations (and the offsets of relative times) are the one grammar every component reads
(services/jobs/durations.py): `90s`, `1h30m`, `2w`, `1y` (365 days), `500ms`.
"""

from __future__ import annotations

import datetime
import re

from services.jobs.durations import DurationError, parse_duration


class TimeSpecError(ValueError):
    """Not a time or duration this CLI understands."""


def duration(field: str, text: str) -> datetime.timedelta:
    """`text`, given as `field` (a flag such as --claim-timeout, or a JOBS_* variable), as a
    duration; TimeSpecError naming `field` when it is not one."""
    try:
        return parse_duration(text)
    except DurationError as exc:
        raise TimeSpecError(f"{field}: {exc}") from exc


def parse_time(text: str, now: datetime.datetime) -> datetime.datetime:
    """An absolute UTC time: `now`, `now+30d`, `+30d`, `-2h`, or ISO 8601 (naive means UTC)."""
    spec = text.strip()
    relative = re.fullmatch(r"(?:now)?\s*([+-])\s*(.+)", spec, flags=re.IGNORECASE)
    if spec.lower() == "now":
        return now
    if relative:
        try:
            offset = parse_duration(relative.group(2))
        except DurationError as exc:
            raise TimeSpecError(str(exc)) from exc
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
