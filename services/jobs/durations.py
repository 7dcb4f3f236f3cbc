"""The one duration grammar: every `JOBS_*_S` variable, every `jobsctl` duration flag and every
`…S` key of a Pulumi stack is read by `parse_duration`, so a value means the same everywhere.

A duration is either
- a bare non-negative decimal number, read as seconds: `90`, `0.5`; or
- one or more `<number><unit>` parts written together, largest unit first, each unit at most
  once: `90s`, `1.5m`, `1h30m`, `2w`, `1y`, `500ms`, `1m30s`.
Units: `y` (365 days: "in a year" is a duration, not a calendar date), `w` (7 days), `d`, `h`,
`m` (minutes), `s`, `ms`. Letters may be upper case; spaces around the whole value are ignored.
Refused: a sign (`-5m`), spaces inside (`90 s`, `1h 30m`), parts out of order or repeated
(`30m1h`, `1m1m`), exponents and non-numbers (`1e3`, `inf`, `nan`), unknown units (`5x`).

The grammar stops here: each reader then applies its own bounds (a service's range, Pulumi's
whole seconds, the control document's ceiling) and names its own field in the message.
"""

from __future__ import annotations

import datetime
import re

__all__ = ["UNITS", "DurationError", "parse_duration"]


class DurationError(ValueError):
    """Not a duration (try 90s, 15m, 1h30m, 2w or 500ms)."""


# Largest first: the order the parts of a duration must come in.
UNITS: dict[str, float] = {
    "y": 365 * 86400.0,
    "w": 7 * 86400.0,
    "d": 86400.0,
    "h": 3600.0,
    "m": 60.0,
    "s": 1.0,
    "ms": 0.001,
}
_NUMBER = r"\d+(?:\.\d+)?"
_BARE = re.compile(_NUMBER)
# `ms` before `m`, so 500ms is one part, not 500 minutes followed by an `s`.
_PART = re.compile(rf"({_NUMBER})(ms|[ywdhms])")
_HINT = "try 90s, 15m, 1h30m, 2w or 500ms"


def parse_duration(text: str) -> datetime.timedelta:
    """The duration `text` spells (module docstring); raises DurationError saying why not."""
    spec = text.strip().lower()
    if _BARE.fullmatch(spec):
        return _exact(float(spec), text)
    seconds = 0.0
    position = 0
    rank = -1  # index in UNITS of the previous part's unit
    order = list(UNITS)
    for match in _PART.finditer(spec):
        unit_rank = order.index(match.group(2))
        if match.start() != position or unit_rank <= rank:
            break
        seconds += float(match.group(1)) * UNITS[match.group(2)]
        position, rank = match.end(), unit_rank
    if not spec or position != len(spec):
        raise DurationError(f"{text!r} is not a duration ({_HINT})")
    return _exact(seconds, text)


def _exact(seconds: float, text: str) -> datetime.timedelta:
    try:
        return datetime.timedelta(seconds=seconds)
    except OverflowError as exc:
        # timedelta stops at 999,999,999 days; a typo like 99999999999d must not be a traceback.
        raise DurationError(f"{text!r} is too large a duration") from exc
