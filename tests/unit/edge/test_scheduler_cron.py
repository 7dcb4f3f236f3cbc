"""Cloud Scheduler's unix-cron grammar and when a schedule fires, in its time zone."""

from __future__ import annotations

import itertools
from datetime import UTC, datetime, timedelta
from zoneinfo import ZoneInfo

import pytest

from services.edge.scheduler_cron import CronSchedule, ScheduleError, TimeZoneError, time_zone

UTC_ZONE = ZoneInfo("Etc/UTC")
NEW_YORK = ZoneInfo("America/New_York")


def _runs(expression: str, start: datetime, count: int, zone: ZoneInfo = UTC_ZONE) -> list:
    schedule = CronSchedule.parse(expression)
    runs, at = [], start
    for _ in range(count):
        at = schedule.next_after(at, zone)
        runs.append(at)
    return runs


@pytest.mark.parametrize(
    ("expression", "field", "values"),
    [
        ("*/15 * * * *", "minutes", {0, 15, 30, 45}),
        ("5-20/5 * * * *", "minutes", {5, 10, 15, 20}),
        ("1,2,5-6 * * * *", "minutes", {1, 2, 5, 6}),
        ("50/5 * * * *", "minutes", {50, 55}),  # a start with a step runs to the end
        ("0 0-23/2 * * *", "hours", set(range(0, 24, 2))),
        ("0 0 * JAN-MAR *", "months", {1, 2, 3}),
        ("0 0 * jul,Dec *", "months", {7, 12}),
        ("0 0 * * MON-FRI", "days_of_week", {1, 2, 3, 4, 5}),
        ("0 0 * * 7", "days_of_week", {0}),  # 7 is Sunday too
        ("0 0 * * 5-7", "days_of_week", {5, 6, 0}),
        ("0 0 * * sun", "days_of_week", {0}),
    ],
)
def test_fields_accept_ranges_lists_steps_and_names(
    expression: str, field: str, values: set[int]
) -> None:
    assert getattr(CronSchedule.parse(expression), field) == values


@pytest.mark.parametrize(
    ("expression", "named"),
    [
        ("* * * *", "has 4 fields; expected 5"),
        ("* * * * * *", "has 6 fields"),
        ("60 * * * *", "minute field '60': 60 is outside 0-59"),
        ("* 24 * * *", "hour field '24'"),
        ("* * 0 * *", "day-of-month field '0'"),
        ("* * 32 * *", "day-of-month field '32'"),
        ("* * * 13 *", "month field '13'"),
        ("* * * * 8", "day-of-week field '8'"),
        ("*/0 * * * *", "minute field '*/0': step must be at least 1"),
        ("10-5 * * * *", "minute field '10-5': range start 10 is after its end 5"),
        ("1,,2 * * * *", "minute field ''"),
        ("* * * * SUNDAY", "day-of-week field 'SUNDAY'"),
        ("* * * JAN-FOO *", "month field 'JAN-FOO'"),
        ("* * * * MON/x", "day-of-week field 'MON/x'"),
        ("L * * * *", "minute field 'L'"),  # no L, W, # or ? (not in Google's grammar)
        ("* * L * *", "day-of-month field 'L'"),
        ("* * ? * *", "day-of-month field '?'"),
        ("@hourly", "has 1 fields"),
        ("every 5 minutes", "has 3 fields"),
        ("٣ * * * *", "minute field '٣'"),  # a non-ASCII digit
    ],
)
def test_an_invalid_expression_is_refused_naming_the_field(expression: str, named: str) -> None:
    with pytest.raises(ScheduleError) as caught:
        CronSchedule.parse(expression)
    assert named in str(caught.value)


def test_runs_are_whole_minutes_strictly_after_the_instant() -> None:
    start = datetime(2026, 3, 2, 12, 0, 30, tzinfo=UTC)
    assert _runs("* * * * *", start, 3) == [
        datetime(2026, 3, 2, 12, m, tzinfo=UTC) for m in (1, 2, 3)
    ]
    on_the_minute = datetime(2026, 3, 2, 12, 5, tzinfo=UTC)
    assert _runs("*/5 * * * *", on_the_minute, 1) == [datetime(2026, 3, 2, 12, 10, tzinfo=UTC)]


def test_with_both_day_fields_restricted_either_one_matching_is_enough() -> None:
    # The 13th of the month OR any Friday, at 09:00 (crontab(5)); March 2026: Fri 6, 13, 20.
    start = datetime(2026, 3, 1, tzinfo=UTC)
    days = [run.day for run in _runs("0 9 13 * FRI", start, 4)]
    assert days == [6, 13, 20, 27]


def test_with_one_day_field_a_star_only_the_other_one_restricts() -> None:
    start = datetime(2026, 3, 1, tzinfo=UTC)
    assert [run.day for run in _runs("0 9 13 * *", start, 2)] == [13, 13]
    assert [run.month for run in _runs("0 9 13 * *", start, 2)] == [3, 4]
    assert [run.day for run in _runs("0 9 * * FRI", start, 2)] == [6, 13]
    # A stepped star is still "*" for this rule (crontab(5)): every day, not either/or.
    assert [run.day for run in _runs("0 9 */1 * FRI", start, 2)] == [6, 13]


def test_the_schedule_runs_on_the_job_time_zone_wall_clock() -> None:
    start = datetime(2026, 1, 14, 23, 0, tzinfo=UTC)
    [run] = _runs("0 9 * * *", start, 1, ZoneInfo("Asia/Tokyo"))
    assert run == datetime(2026, 1, 15, 0, 0, tzinfo=UTC)  # 09:00 JST = 00:00 UTC
    [run] = _runs("0 9 * * *", start, 1, NEW_YORK)
    assert run == datetime(2026, 1, 15, 14, 0, tzinfo=UTC)  # 09:00 EST = 14:00 UTC


def test_a_wall_time_skipped_by_daylight_saving_does_not_run() -> None:
    # New York springs forward on 2026-03-08: 02:00-02:59 does not exist that day.
    runs = _runs("30 2 * * *", datetime(2026, 3, 6, 12, tzinfo=UTC), 3, NEW_YORK)
    assert [run.astimezone(NEW_YORK).day for run in runs] == [7, 9, 10]


def test_a_wall_time_that_happens_twice_runs_twice() -> None:
    # New York falls back on 2026-11-01: 01:30 happens at 05:30 and 06:30 UTC.
    runs = _runs("30 1 * * *", datetime(2026, 10, 31, 12, tzinfo=UTC), 3, NEW_YORK)
    assert runs == [
        datetime(2026, 11, 1, 5, 30, tzinfo=UTC),
        datetime(2026, 11, 1, 6, 30, tzinfo=UTC),
        datetime(2026, 11, 2, 6, 30, tzinfo=UTC),
    ]


def test_hourly_runs_keep_real_hour_gaps_across_daylight_saving() -> None:
    # Every hour at :00 over the spring change: 01:00 EST, then 03:00 EDT one real hour later.
    runs = _runs("0 * * * *", datetime(2026, 3, 8, 5, 30, tzinfo=UTC), 3, NEW_YORK)
    gaps = {b - a for a, b in itertools.pairwise(runs)}
    assert gaps == {timedelta(hours=1)}


def test_a_leap_day_schedule_finds_its_next_run_years_ahead_and_an_impossible_one_none() -> None:
    [run] = _runs("0 0 29 2 *", datetime(2026, 3, 1, tzinfo=UTC), 1)
    assert run == datetime(2028, 2, 29, tzinfo=UTC)
    assert (
        CronSchedule.parse("0 0 31 2 *").next_after(datetime(2026, 1, 1, tzinfo=UTC), UTC_ZONE)
        is None
    )


def test_a_naive_instant_is_refused() -> None:
    with pytest.raises(ValueError, match="no timezone"):
        CronSchedule.parse("* * * * *").next_after(datetime(2026, 1, 1), UTC_ZONE)


def test_time_zones_are_tz_database_names() -> None:
    assert time_zone("Europe/Berlin") == ZoneInfo("Europe/Berlin")
    for bad in ("CEST", "Mars/Olympus", "", "../etc/passwd"):
        with pytest.raises(TimeZoneError, match="not a tz database name"):
            time_zone(bad)


def test_longest_gap_is_the_widest_wall_clock_interval() -> None:
    assert CronSchedule.parse("*/5 * * * *").longest_gap_s() == 300
    assert CronSchedule.parse("0 9,17 * * *").longest_gap_s() == 16 * 3600
