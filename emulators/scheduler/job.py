"""A local Cloud Scheduler job with an HTTP target: its settings, checked as Google checks them.

Fields and limits from the Job resource
(https://cloud.google.com/scheduler/docs/reference/rest/v1/projects.locations.jobs):
- `name` is projects/PROJECT_ID/locations/LOCATION_ID/jobs/JOB_ID; a JOB_ID "can contain only
  letters ([A-Za-z]), numbers ([0-9]), hyphens (-), or underscores (_). The maximum length is 500
  characters"; a PROJECT_ID letters, numbers, hyphens, colons or periods;
- `schedule` is unix-cron (cron.py), evaluated in `timeZone`, a tz database name, default
  Etc/UTC (https://cloud.google.com/scheduler/docs/configuring/cron-job-schedules);
- `attemptDeadline`: "For HTTP targets, the default is 3 minutes. The deadline must be in the
  interval [15 seconds, 30 minutes]";
- `retryConfig` (retry.py);
- `httpTarget.oidcToken{serviceAccountEmail, audience}`: the audience defaults to the target URI.

`test_cadence_s` is a TEST SETTING and nothing Google has: the job fires every that many
seconds instead of on its cron schedule (every other rule unchanged). Nothing measured with it is
a production figure; the default is None (the cron schedule).
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from typing import Protocol
from urllib.parse import urlsplit
from zoneinfo import ZoneInfo

from emulators.scheduler.retry import RetryConfig
from services.edge.scheduler_cron import CronSchedule, ScheduleError, TimeZoneError, time_zone
from services.edge.scheduler_job import (
    DEFAULT_ATTEMPT_DEADLINE_S,
    MAX_ATTEMPT_DEADLINE_S,
    MIN_ATTEMPT_DEADLINE_S,
)

DEFAULT_TIME_ZONE = "Etc/UTC"

_JOB_NAME = re.compile(
    r"^projects/(?P<project>[A-Za-z0-9:.-]+)/locations/(?P<location>[a-z0-9-]+)"
    r"/jobs/(?P<id>[A-Za-z0-9_-]{1,500})\Z"
)
_HTTP_METHODS = frozenset({"POST", "GET", "HEAD", "PUT", "DELETE", "PATCH", "OPTIONS"})


class JobConfigError(ValueError):
    """The job's settings are outside what Cloud Scheduler accepts."""


class Timetable(Protocol):
    def next_after(self, instant: datetime) -> datetime | None:
        """The first scheduled time strictly after `instant`, in UTC (None: never again)."""
        ...


@dataclass(frozen=True)
class CronTimetable:
    """The job's cron schedule in its time zone."""

    schedule: CronSchedule
    zone: ZoneInfo

    def next_after(self, instant: datetime) -> datetime | None:
        return self.schedule.next_after(instant, self.zone)


@dataclass(frozen=True)
class FixedCadence:
    """TEST SETTING, not Cloud Scheduler: a run every `seconds` (multiples of it since the Unix
    epoch), for tests that need the scan triggered faster than once a minute."""

    seconds: float

    def next_after(self, instant: datetime) -> datetime | None:
        ticks = math.floor(instant.timestamp() / self.seconds) + 1
        return datetime.fromtimestamp(ticks * self.seconds, UTC)


@dataclass(frozen=True)
class HttpJob:
    """One job: where it sends, when, with which deadline, retries and OIDC identity."""

    name: str
    uri: str
    oidc_service_account_email: str
    schedule: str
    time_zone: str = DEFAULT_TIME_ZONE
    attempt_deadline_s: float = DEFAULT_ATTEMPT_DEADLINE_S
    retry: RetryConfig = field(default_factory=RetryConfig)
    oidc_audience: str = ""  # empty: the URI, as Google defaults it
    http_method: str = "POST"
    body: bytes = b""
    headers: tuple[tuple[str, str], ...] = ()
    test_cadence_s: float | None = None  # TEST SETTING (see the module docstring)

    def __post_init__(self) -> None:
        problems: list[str] = []
        if not _JOB_NAME.match(self.name):
            problems.append(
                f"name={self.name!r} must be projects/PROJECT_ID/locations/LOCATION_ID/jobs/"
                "JOB_ID (JOB_ID: letters, digits, '-', '_', at most 500)"
            )
        scheme = urlsplit(self.uri).scheme
        if scheme not in ("http", "https") or not urlsplit(self.uri).hostname:
            problems.append(f"httpTarget.uri={self.uri!r} must be an http(s) URL with a host")
        if not self.oidc_service_account_email or "@" not in self.oidc_service_account_email:
            problems.append(
                "httpTarget.oidcToken.serviceAccountEmail="
                f"{self.oidc_service_account_email!r} is not an email address"
            )
        try:
            CronSchedule.parse(self.schedule)
        except ScheduleError as exc:
            problems.append(f"schedule: {exc}")
        try:
            time_zone(self.time_zone)
        except TimeZoneError as exc:
            problems.append(f"timeZone: {exc}")
        deadline = self.attempt_deadline_s
        if not MIN_ATTEMPT_DEADLINE_S <= deadline <= MAX_ATTEMPT_DEADLINE_S:
            problems.append(
                f"attemptDeadline={deadline!r}s must be in [15s, 1800s] for an HTTP target"
            )
        if self.http_method not in _HTTP_METHODS:
            problems.append(f"httpTarget.httpMethod={self.http_method!r} is not an HTTP method")
        if self.body and self.http_method not in ("POST", "PUT", "PATCH"):
            # HttpTarget.body: a body goes only with a method that carries one (API reference).
            problems.append(f"httpTarget.body is not allowed with {self.http_method}")
        cadence = self.test_cadence_s
        if cadence is not None and not 0 < cadence < math.inf:
            problems.append(f"test cadence {cadence!r} must be a number of seconds above 0")
        if problems:
            raise JobConfigError(f"job {self.name}: " + "; ".join(problems))
        if self.test_cadence_s is None and self.timetable.next_after(_EPOCH_CHECK) is None:
            raise JobConfigError(f"job {self.name}: schedule {self.schedule!r} never fires")

    @property
    def job_id(self) -> str:
        """The short JOB_ID of `name`."""
        return self.name.rsplit("/", 1)[-1]

    @property
    def audience(self) -> str:
        return self.oidc_audience or self.uri

    @property
    def zone(self) -> ZoneInfo:
        return time_zone(self.time_zone)

    @property
    def timetable(self) -> Timetable:
        if self.test_cadence_s is not None:
            return FixedCadence(self.test_cadence_s)
        return CronTimetable(CronSchedule.parse(self.schedule), self.zone)

    @property
    def attempt_deadline(self) -> timedelta:
        return timedelta(seconds=self.attempt_deadline_s)


# Any instant does to ask whether a schedule fires at all within the search horizon.
_EPOCH_CHECK = datetime(2024, 1, 1, tzinfo=UTC)
