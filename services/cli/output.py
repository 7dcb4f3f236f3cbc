"""What `jobsctl` writes: aligned tables or JSON on stdout, progress and errors on stderr.

Every command builds one `Report` (JSON-ready data plus the human text for it), so `--json`
and the table always say the same thing. Progress bars are plain text on stderr: stdout stays
clean for pipes. Only the live view (`watch`, view.py) draws with a terminal library.
"""

from __future__ import annotations

import datetime
import enum
import json
import math
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, TextIO


@dataclass(frozen=True)
class Report:
    """A command's answer: `data` for `--json`, `text` for people."""

    data: Any
    text: str
    exit_code: int = 0
    written: bool = False  # the command wrote its output itself (a live view)


def table(headers: Sequence[str], rows: Iterable[Sequence[object]]) -> str:
    """Left-aligned columns separated by two spaces; `-` for empty cells."""
    cells = [[str(h) for h in headers]] + [[cell_text(c) for c in row] for row in rows]
    widths = [max(len(row[i]) for row in cells) for i in range(len(headers))]
    lines = [
        "  ".join(c.ljust(w) for c, w in zip(row, widths, strict=True)).rstrip() for row in cells
    ]
    return "\n".join(lines)


def fields(pairs: Sequence[tuple[str, object]]) -> str:
    """A key/value block: `name:  value`, keys aligned."""
    width = max((len(k) for k, _ in pairs), default=0)
    return "\n".join(f"{k + ':':<{width + 1}}  {cell_text(v)}" for k, v in pairs)


def cell_text(value: object) -> str:
    if value is None or value == "":
        return "-"
    if isinstance(value, datetime.datetime):
        return timestamp_text(value)
    if isinstance(value, bool):
        return "yes" if value else "no"
    if isinstance(value, enum.Enum):
        return str(value.value)
    if isinstance(value, float):
        return f"{value:,.1f}"
    if isinstance(value, int):
        return f"{value:,}"
    return str(value)


def timestamp_text(value: datetime.datetime) -> str:
    """UTC, to the second: `2026-11-30 04:12:05Z`."""
    if value.tzinfo is not None:
        value = value.astimezone(datetime.UTC)
    return value.strftime("%Y-%m-%d %H:%M:%SZ")


def to_json(value: Any) -> Any:
    """Data made JSON-ready: timestamps in ISO 8601 UTC, enums by value, dataclasses as dicts."""
    if isinstance(value, datetime.datetime):
        if value.tzinfo is not None:
            value = value.astimezone(datetime.UTC)
        return value.isoformat().replace("+00:00", "Z")
    if isinstance(value, enum.Enum):
        return to_json(value.value)
    if isinstance(value, datetime.timedelta):
        return value.total_seconds()
    if isinstance(value, Mapping):
        return {str(k): to_json(v) for k, v in value.items()}
    if isinstance(value, list | tuple | set | frozenset):
        return [to_json(v) for v in value]
    if isinstance(value, float) and not math.isfinite(value):
        return None
    if hasattr(value, "__dataclass_fields__"):
        return {name: to_json(getattr(value, name)) for name in value.__dataclass_fields__}
    return value


def write(report: Report, stdout: TextIO, *, as_json: bool) -> None:
    if report.written:
        return
    if as_json:
        stdout.write(json.dumps(to_json(report.data), indent=2, sort_keys=True) + "\n")
    elif report.text:
        stdout.write(report.text.rstrip("\n") + "\n")


@dataclass
class Progress:
    """A text progress bar on `stream`; redraws in place on a terminal, else prints each 10 %."""

    stream: TextIO
    label: str
    total: int | None = None
    done: int = 0
    _last_step: int = field(default=0, repr=False)
    _shown: int = field(default=-1, repr=False)

    WIDTH = 30

    def advance(self, count: int = 1) -> None:
        self.done += count
        self._draw(final=False)

    def finish(self) -> None:
        self._draw(final=True)

    def _draw(self, *, final: bool) -> None:
        tty = _is_tty(self.stream)
        if not tty and not self._crossed_a_step() and not (final and self._shown != self.done):
            return
        self._shown = self.done
        self.stream.write(("\r" if tty else "") + self._line() + ("\n" if final or not tty else ""))
        self.stream.flush()

    def _crossed_a_step(self) -> bool:
        # Off a terminal, a line per 10 % (or per 1,000 items when the total is unknown).
        step = self.done * 10 // self.total if self.total else self.done // 1000
        crossed = step > self._last_step
        self._last_step = max(step, self._last_step)
        return crossed

    def _line(self) -> str:
        if not self.total:
            return f"{self.label}: {self.done:,}"
        share = min(self.done / self.total, 1.0)
        filled = int(share * self.WIDTH)
        bar = "#" * filled + "." * (self.WIDTH - filled)
        return f"{self.label}: [{bar}] {self.done:,}/{self.total:,} ({share:.0%})"


def _is_tty(stream: TextIO) -> bool:
    isatty = getattr(stream, "isatty", None)
    return bool(isatty and isatty())
