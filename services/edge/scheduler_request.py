"""What a Cloud Scheduler request carries: the header names and the format of their values.

Defined once: the local Cloud Scheduler (emulators/scheduler) sends these headers and anything in
services/ that reads them (the scan, to tell retries of one scheduled execution apart) imports
the same names and parsers from here.

Cloud Scheduler adds to every HTTP request (https://cloud.google.com/scheduler/docs/reference/
rest/v1/projects.locations.jobs#HttpTarget, "Cloud Scheduler sets some headers"):
- `X-CloudScheduler: true`;
- `X-CloudScheduler-JobName`: the job. "Deduplicate job requests"
  (https://cloud.google.com/scheduler/docs/configuring/deduplicate-job-requests) documents the
  short JOB_ID of projects/PROJECT_ID/locations/LOCATION_ID/jobs/JOB_ID; the API reference says
  "the job name". The local scheduler sends the short ID; `job_id_from_header` accepts both, so
  a reader works whichever Google sends;
- `X-CloudScheduler-ScheduleTime`: for unix-cron jobs, the scheduled time of the execution, RFC
  3339 as an offset of UTC (`2026-10-16T12:00:00Z` or `2026-10-16T05:00:00-07:00`), the same on
  every retry of that execution. For a forced run (`gcloud scheduler jobs run`) it "may use the
  timestamp of the next scheduled execution, or be omitted" (same page): a reader must accept
  its absence, and a forced run can share the value of the next scheduled execution.
"""

from __future__ import annotations

import re
from datetime import UTC, datetime, timedelta, timezone, tzinfo

CLOUD_SCHEDULER_HEADER = "X-CloudScheduler"
JOB_NAME_HEADER = "X-CloudScheduler-JobName"
SCHEDULE_TIME_HEADER = "X-CloudScheduler-ScheduleTime"
# Cloud Scheduler's HTTP requests identify themselves by this user agent (the value the local
# scheduler has always sent; Cloud Run request logs show it for Scheduler-triggered requests).
USER_AGENT = "Google-Cloud-Scheduler"

# A job ID "can contain only letters ([A-Za-z]), numbers ([0-9]), hyphens (-), or underscores
# (_). The maximum length is 500 characters." (Job.name in the API reference above.)
_JOB_ID = re.compile(r"^[A-Za-z0-9_-]{1,500}\Z")
_JOB_NAME = re.compile(r"^projects/[^/]+/locations/[^/]+/jobs/(?P<id>[^/]+)\Z")
# RFC 3339 date-time (section 5.6): a T (or t, or space is not allowed here) separator, optional
# fraction, and Z or a +hh:mm/-hh:mm offset.
_RFC3339 = re.compile(
    r"^(?P<date>\d{4}-\d{2}-\d{2})[Tt](?P<time>\d{2}:\d{2}:\d{2})(?P<fraction>\.\d{1,9})?"
    r"(?P<zone>[Zz]|[+-]\d{2}:\d{2})\Z"
)


class SchedulerHeaderError(ValueError):
    """A Cloud Scheduler header value is malformed."""


def job_id_from_header(value: str) -> str:
    """The short job ID in an `X-CloudScheduler-JobName` value, whether Google sent the ID or
    the full `projects/P/locations/L/jobs/ID` name; SchedulerHeaderError when it is neither."""
    text = value.strip()
    match = _JOB_NAME.match(text)
    job_id = match.group("id") if match else text
    if not _JOB_ID.match(job_id):
        raise SchedulerHeaderError(
            f"{JOB_NAME_HEADER}={value[:120]!r} is not a job ID (letters, digits, '-', '_', at "
            "most 500) or projects/P/locations/L/jobs/ID"
        )
    return job_id


def format_schedule_time(instant: datetime, zone: tzinfo | None = None) -> str:
    """`instant` as Cloud Scheduler writes it: RFC 3339, whole seconds, `Z` for UTC, else the
    offset `zone` has at that instant (a job's time zone)."""
    if instant.tzinfo is None:
        raise ValueError(f"{instant!r} has no timezone; pass an aware datetime")
    local = instant.astimezone(zone or UTC).replace(microsecond=0)
    offset = local.utcoffset() or timedelta(0)
    if offset == timedelta(0):
        return local.strftime("%Y-%m-%dT%H:%M:%SZ")
    return local.isoformat()


def parse_schedule_time(value: str) -> datetime:
    """An `X-CloudScheduler-ScheduleTime` value as an aware UTC datetime (two values name the
    same execution when they are the same instant, whatever offset each was written with)."""
    match = _RFC3339.match(value.strip())
    if not match:
        raise SchedulerHeaderError(
            f"{SCHEDULE_TIME_HEADER}={value[:80]!r} is not an RFC 3339 date-time with an offset"
        )
    zone_text = match.group("zone")
    if zone_text in ("Z", "z"):
        zone: tzinfo = UTC
    else:
        sign = 1 if zone_text[0] == "+" else -1
        hours, minutes = int(zone_text[1:3]), int(zone_text[4:6])
        if hours > 23 or minutes > 59:
            raise SchedulerHeaderError(f"{SCHEDULE_TIME_HEADER}={value!r}: bad UTC offset")
        zone = timezone(sign * timedelta(hours=hours, minutes=minutes))
    fraction = (match.group("fraction") or ".0")[1:7].ljust(6, "0")
    try:
        parsed = datetime.fromisoformat(f"{match.group('date')}T{match.group('time')}")
    except ValueError as exc:
        raise SchedulerHeaderError(f"{SCHEDULE_TIME_HEADER}={value!r}: {exc}") from exc
    return parsed.replace(microsecond=int(fraction), tzinfo=zone).astimezone(UTC)
