"""Cloud Scheduler's request headers: names and value formats, written and read back."""

from __future__ import annotations

from datetime import UTC, datetime
from zoneinfo import ZoneInfo

import pytest

from services.edge.scheduler_request import (
    SchedulerHeaderError,
    format_schedule_time,
    job_id_from_header,
    parse_schedule_time,
)

NOON = datetime(2026, 10, 16, 12, 0, tzinfo=UTC)


def test_schedule_times_are_rfc3339_in_utc_or_with_the_job_zone_offset() -> None:
    assert format_schedule_time(NOON) == "2026-10-16T12:00:00Z"
    in_la = format_schedule_time(NOON, ZoneInfo("America/Los_Angeles"))
    assert in_la == "2026-10-16T05:00:00-07:00"  # the dedup page's own example
    assert format_schedule_time(NOON.replace(microsecond=5), ZoneInfo("Etc/UTC")).endswith(":00Z")


@pytest.mark.parametrize(
    "value",
    [
        "2026-10-16T12:00:00Z",
        "2026-10-16t12:00:00z",
        "2026-10-16T05:00:00-07:00",
        "2026-10-16T14:00:00+02:00",
        "2026-10-16T12:00:00.000000000Z",
    ],
)
def test_any_offset_reads_back_as_the_same_instant(value: str) -> None:
    assert parse_schedule_time(value) == NOON


@pytest.mark.parametrize(
    "value",
    ["", "2026-10-16 12:00:00Z", "2026-10-16T12:00:00", "2026-13-16T12:00:00Z", "soon"],
)
def test_a_malformed_schedule_time_is_refused(value: str) -> None:
    with pytest.raises(SchedulerHeaderError, match="X-CloudScheduler-ScheduleTime"):
        parse_schedule_time(value)


def test_the_job_name_header_reads_as_the_short_id_whichever_form_google_sends() -> None:
    assert job_id_from_header("deferred-jobs-scan") == "deferred-jobs-scan"
    full = "projects/p/locations/europe-west1/jobs/deferred-jobs-scan"
    assert job_id_from_header(full) == "deferred-jobs-scan"
    for bad in ("", "a/b", "projects/p/locations/l/jobs/", "x" * 501, "job id"):
        with pytest.raises(SchedulerHeaderError, match="X-CloudScheduler-JobName"):
            job_id_from_header(bad)
