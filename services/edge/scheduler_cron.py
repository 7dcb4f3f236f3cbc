"""Cloud Scheduler's unix-cron schedules: the grammar it accepts and when a job fires.

The grammar (https://cloud.google.com/scheduler/docs/configuring/cron-job-schedules): five
fields, minute (0-59), hour (0-23), day of the month (1-31), month (1-12 or JAN-DEC), day of the
week (0-6 or SUN-SAT, 7 also Sunday); `*` is first-last, `a-b` an inclusive range, `/n` a step
through a range or `*`, `,` a list. Minute granularity: nothing finer than once a minute.
The page says the format is "based on unix-cron"; unix cron runs a job when either day field
matches if both are restricted (crontab(5), https://man7.org/linux/man-pages/man5/crontab.5.html:
"If both fields are restricted (i.e., do not contain the "*" character), the command will be
run when either field matches the current time"), and this module does the same.

Time zones: the schedule is evaluated in the job's time zone on wall-clock time, and "for some
time zones, daylight saving time can cause jobs to run or not run unexpectedly ... In instances
where a time can occur twice (such as the case when clocks go backwards) and your job is
scheduled at this time" (same page). Taken literally here: a wall time that does not exist
(clocks go forward) never fires, a wall time that happens twice fires twice, each at its own
instant, as crontab(5)'s DST note on BSD cron describes.

Defined here, below both of its users, as part of the Cloud Scheduler contract (beside
scheduler_request.py and scheduler_job.py): the local Cloud Scheduler (emulators/scheduler)
runs jobs on this grammar and infra/cron.py validates a stack's schedule with it, so the deployed
job and the local one accept and run the same schedules.
"""

from __future__ import annotations

import datetime as dt
import functools
import itertools
from dataclasses import dataclass
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

MINUTES_PER_DAY = 24 * 60
# How far ahead a next run is searched: a leap day ("0 0 29 2 *") recurs within 8 years.
_HORIZON_DAYS = 8 * 366

_MONTH_NAMES = ("JAN", "FEB", "MAR", "APR", "MAY", "JUN", "JUL", "AUG", "SEP", "OCT", "NOV", "DEC")
_DAY_NAMES = ("SUN", "MON", "TUE", "WED", "THU", "FRI", "SAT")


class ScheduleError(ValueError):
    """The schedule is not a 5-field unix-cron expression Cloud Scheduler accepts."""


class TimeZoneError(ValueError):
    """The time zone is not a tz database name."""


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


def time_zone(name: str) -> ZoneInfo:
    """The tz database zone `name` (a job's `timeZone`); TimeZoneError naming it otherwise."""
    try:
        return ZoneInfo(name)
    except (ValueError, ZoneInfoNotFoundError) as exc:
        raise TimeZoneError(f"time zone {name!r} is not a tz database name (e.g. Etc/UTC)") from exc


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

    @classmethod
    def parse(cls, expression: str) -> CronSchedule:
        """Parse a 5-field unix-cron expression; ScheduleError naming the bad field."""
        parts = expression.split()
        if len(parts) != len(_FIELDS):
            raise ScheduleError(
                f"schedule {expression!r} has {len(parts)} fields; expected 5 "
                "(minute hour day-of-month month day-of-week)"
            )
        values = [_parse_field(part, spec) for part, spec in zip(parts, _FIELDS, strict=True)]
        return cls(
            expression=expression,
            minutes=values[0],
            hours=values[1],
            days_of_month=values[2],
            months=values[3],
            days_of_week=frozenset(0 if day == 7 else day for day in values[4]),
            # crontab(5): a day field is unrestricted when it is "*" (with or without a step).
            day_of_month_restricted=not parts[2].startswith("*"),
            day_of_week_restricted=not parts[4].startswith("*"),
        )

    def runs_on(self, day: dt.date) -> bool:
        """Whether the schedule fires at least once on `day` (its wall-clock date)."""
        if day.month not in self.months:
            return False
        dom = day.day in self.days_of_month
        dow = (day.isoweekday() % 7) in self.days_of_week
        if self.day_of_month_restricted and self.day_of_week_restricted:
            return dom or dow
        return dom and dow

    def matches(self, wall: dt.datetime) -> bool:
        """Whether the wall-clock minute `wall` (naive, in the job's zone) is a run time."""
        return wall.minute in self.minutes and wall.hour in self.hours and self.runs_on(wall.date())

    def runs_of_day(self, day: dt.date, zone: dt.tzinfo) -> list[dt.datetime]:
        """The UTC instants the schedule fires on wall-clock `day` in `zone`, in order: none for
        a wall time skipped by a DST change, two for one that happens twice."""
        return list(_runs_of_day(self, day, zone))

    def next_after(self, instant: dt.datetime, zone: dt.tzinfo) -> dt.datetime | None:
        """The first run strictly after `instant` (aware), in UTC; None if there is none within
        8 years (a schedule such as "0 0 31 2 *" never fires)."""
        if instant.tzinfo is None:
            raise ValueError(f"{instant!r} has no timezone; pass an aware datetime")
        # Start a day early: a DST change can put a wall date's runs before the UTC instant.
        start = instant.astimezone(zone).date() - dt.timedelta(days=1)
        found: dt.datetime | None = None
        for offset in range(_HORIZON_DAYS):
            day = start + dt.timedelta(days=offset)
            later = [run for run in self.runs_of_day(day, zone) if run > instant]
            if later and (found is None or later[0] < found):
                found = later[0]
            elif found is not None:
                return found  # the day after the first day with a run: nothing earlier remains
        return found

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
            raise ScheduleError(f"schedule {self.expression!r} fires less than twice in two years")
        gap = max((b - a for a, b in itertools.pairwise(offsets)), default=0)
        for first, second in itertools.pairwise(run_days):
            across = (second - first) * MINUTES_PER_DAY + offsets[0] - offsets[-1]
            gap = max(gap, across)
        if len(run_days) == 1:
            gap = max(gap, MINUTES_PER_DAY)
        return gap * 60


@functools.lru_cache(maxsize=64)
def _runs_of_day(schedule: CronSchedule, day: dt.date, zone: dt.tzinfo) -> tuple[dt.datetime, ...]:
    # Cached: the scheduler asks for the same days again for each run (1,440 runs a day).
    if not schedule.runs_on(day):
        return ()
    instants: set[dt.datetime] = set()
    for hour, minute in itertools.product(sorted(schedule.hours), sorted(schedule.minutes)):
        instants.update(_instants(dt.datetime(day.year, day.month, day.day, hour, minute), zone))
    return tuple(sorted(instants))


def _instants(wall: dt.datetime, zone: dt.tzinfo) -> set[dt.datetime]:
    """Every UTC instant whose wall time in `zone` is `wall`: 0 (skipped), 1, or 2 (repeated)."""
    found = set()
    for fold in (0, 1):
        instant = wall.replace(tzinfo=zone, fold=fold).astimezone(dt.UTC)
        if instant.astimezone(zone).replace(tzinfo=None) == wall:
            found.add(instant)
    return found


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
            raise ScheduleError(f"{where}: range start {low} is after its end {high}")
    else:
        low = _number(base, spec, where)
        # "5/15" means "from 5 to the end, every 15" in unix cron.
        high = spec.high if step_text else low
    return range(low, high + 1, step)


def _number(text: str, spec: _FieldSpec, where: str, *, as_step: bool = False) -> int:
    upper = text.upper()
    if not as_step and upper in spec.names:
        return spec.names.index(upper) + spec.name_base
    if not text.isascii() or not text.isdigit():
        raise ScheduleError(f"{where}: {text!r} is not a number")
    value = int(text)
    if as_step:
        if value < 1:
            raise ScheduleError(f"{where}: step must be at least 1")
        return value
    if not spec.low <= value <= spec.high:
        raise ScheduleError(f"{where}: {value} is outside {spec.low}-{spec.high}")
    return value
