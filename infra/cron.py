"""The unix-cron schedule Cloud Scheduler runs the scan on: parsing, validation, longest gap.

Cloud Scheduler rejects a bad schedule only at `pulumi up`, after other resources changed; this
module rejects it at preview, names the bad field, and works out the longest gap between two
runs, which the services (JOBS_SCAN_INTERVAL_S) and the "scan runs absent" alert both need.
"""

from __future__ import annotations

import datetime as dt
import itertools
from dataclasses import dataclass

from infra.errors import CronError

MINUTES_PER_DAY = 24 * 60

_MONTH_NAMES = ("JAN", "FEB", "MAR", "APR", "MAY", "JUN", "JUL", "AUG", "SEP", "OCT", "NOV", "DEC")
_DAY_NAMES = ("SUN", "MON", "TUE", "WED", "THU", "FRI", "SAT")


@dataclass(frozen=True)
class _FieldSpec:
    name: str
    low: int
    high: int
    names: tuple[str, ...] = ()
    name_base: int = 0  # the value of names[0]


_FIELDS = (
    _FieldSpec("minute", 0, 59),
    _FieldSpec("hour", 0, 23),
    _FieldSpec("day-of-month", 1, 31),
    _FieldSpec("month", 1, 12, _MONTH_NAMES, 1),
    _FieldSpec("day-of-week", 0, 7, _DAY_NAMES, 0),
)


@dataclass(frozen=True)
class CronSchedule:
    """A parsed schedule: the set of allowed values of each of the five fields."""

    expression: str
    minutes: frozenset[int]
    hours: frozenset[int]
    days_of_month: frozenset[int]
    months: frozenset[int]
    days_of_week: frozenset[int]  # 0 = Sunday (7 is folded into 0)
    day_of_month_restricted: bool
    day_of_week_restricted: bool

    def runs_on(self, day: dt.date) -> bool:
        """Whether the schedule fires at least once on `day` (vixie-cron day semantics)."""
        if day.month not in self.months:
            return False
        dom = day.day in self.days_of_month
        dow = (day.isoweekday() % 7) in self.days_of_week
        # Vixie cron: when both day fields are restricted, either one matching is enough.
        if self.day_of_month_restricted and self.day_of_week_restricted:
            return dom or dow
        return dom and dow

    def longest_gap_s(self, start: dt.date = dt.date(2024, 1, 1), days: int = 2 * 366) -> int:
        """The longest time between two consecutive runs, in seconds, over `days` from `start`.

        Two years starting on a leap year see every month length and weekday combination that
        matters for the short schedules this project accepts.
        The gap is measured on the schedule's own wall clock: a daylight-saving change in a
        non-UTC time zone can stretch one gap by up to an hour.
        """
        offsets = sorted(h * 60 + m for h in self.hours for m in self.minutes)
        run_days = [
            index for index in range(days) if self.runs_on(start + dt.timedelta(days=index))
        ]
        if len(run_days) * len(offsets) < 2:
            raise CronError(f"schedule {self.expression!r} fires less than twice in two years")
        gap = max((b - a for a, b in itertools.pairwise(offsets)), default=0)
        for first, second in itertools.pairwise(run_days):
            across = (second - first) * MINUTES_PER_DAY + offsets[0] - offsets[-1]
            gap = max(gap, across)
        if len(run_days) == 1:
            gap = max(gap, MINUTES_PER_DAY)
        return gap * 60


def parse_cron(expression: str) -> CronSchedule:
    """Parse a 5-field unix-cron expression; raise CronError naming the bad field."""
    parts = expression.split()
    if len(parts) != len(_FIELDS):
        raise CronError(
            f"schedule {expression!r} has {len(parts)} fields; expected 5 "
            "(minute hour day-of-month month day-of-week)"
        )
    values = [_parse_field(part, spec) for part, spec in zip(parts, _FIELDS, strict=True)]
    days_of_week = frozenset(0 if day == 7 else day for day in values[4])
    return CronSchedule(
        expression=expression,
        minutes=values[0],
        hours=values[1],
        days_of_month=values[2],
        months=values[3],
        days_of_week=days_of_week,
        day_of_month_restricted=not parts[2].startswith("*"),
        day_of_week_restricted=not parts[4].startswith("*"),
    )


def _parse_field(text: str, spec: _FieldSpec) -> frozenset[int]:
    allowed: set[int] = set()
    for item in text.split(","):
        allowed.update(_parse_item(item, spec))
    return frozenset(allowed)


def _parse_item(item: str, spec: _FieldSpec) -> range:
    where = f"{spec.name} field {item!r}"
    base, _, step_text = item.partition("/")
    step = 1
    if step_text:
        step = _number(step_text, spec, where, as_step=True)
    if base == "*":
        low, high = spec.low, spec.high
    elif "-" in base:
        low_text, _, high_text = base.partition("-")
        low, high = _number(low_text, spec, where), _number(high_text, spec, where)
        if low > high:
            raise CronError(f"{where}: range start {low} is after its end {high}")
    else:
        low = _number(base, spec, where)
        # "5/15" means "from 5 to the end, every 15" in vixie cron.
        high = spec.high if step_text else low
    return range(low, high + 1, step)


def _number(text: str, spec: _FieldSpec, where: str, *, as_step: bool = False) -> int:
    upper = text.upper()
    if not as_step and upper in spec.names:
        return spec.names.index(upper) + spec.name_base
    if not text.isdigit():
        raise CronError(f"{where}: {text!r} is not a number")
    value = int(text)
    if as_step:
        if value < 1:
            raise CronError(f"{where}: step must be at least 1")
        return value
    if not spec.low <= value <= spec.high:
        raise CronError(f"{where}: {value} is outside {spec.low}-{spec.high}")
    return value
