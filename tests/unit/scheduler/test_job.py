"""An HTTP job's settings, refused as Cloud Scheduler refuses them."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

import pytest

from emulators.scheduler.job import FixedCadence, HttpJob, JobConfigError

NAME = "projects/p/locations/europe-west1/jobs/deferred-jobs-scan"


def _job(**overrides: Any) -> HttpJob:
    settings: dict[str, Any] = {
        "name": NAME,
        "uri": "http://127.0.0.1:8100",
        "oidc_service_account_email": "s@p.iam.gserviceaccount.com",
        "schedule": "*/5 * * * *",
    }
    return HttpJob(**{**settings, **overrides})


def test_defaults_are_googles_for_an_http_target() -> None:
    job = _job()
    assert job.attempt_deadline_s == 180 and job.time_zone == "Etc/UTC"
    assert job.audience == "http://127.0.0.1:8100"  # the URI, when no audience is set
    assert job.job_id == "deferred-jobs-scan"
    assert job.test_cadence_s is None


@pytest.mark.parametrize("deadline", [15, 180, 1800])
def test_attempt_deadlines_from_15_s_to_30_min_are_accepted(deadline: float) -> None:
    assert _job(attempt_deadline_s=deadline).attempt_deadline_s == deadline


@pytest.mark.parametrize(
    ("overrides", "named"),
    [
        ({"attempt_deadline_s": 14.9}, "attemptDeadline=14.9s must be in [15s, 1800s]"),
        ({"attempt_deadline_s": 1801}, "attemptDeadline=1801s"),
        ({"name": "deferred-jobs-scan"}, "name='deferred-jobs-scan' must be projects/"),
        ({"name": NAME.replace("deferred-jobs-scan", "scan.job")}, "JOB_ID"),
        ({"name": NAME + "x" * 500}, "at most 500"),
        ({"uri": "ftp://host/x"}, "httpTarget.uri='ftp://host/x'"),
        ({"oidc_service_account_email": ""}, "serviceAccountEmail=''"),
        ({"schedule": "61 * * * *"}, "schedule: minute field '61'"),
        ({"time_zone": "CET+1"}, "timeZone: time zone 'CET+1'"),
        ({"http_method": "GET", "body": b"{}"}, "body is not allowed with GET"),
        ({"test_cadence_s": 0}, "test cadence 0 must be"),
        ({"schedule": "0 0 31 2 *"}, "never fires"),
    ],
)
def test_settings_outside_googles_limits_are_refused_by_name(
    overrides: dict[str, Any], named: str
) -> None:
    with pytest.raises(JobConfigError) as caught:
        _job(**overrides)
    assert named in str(caught.value)


def test_a_test_cadence_replaces_the_schedule_and_says_so() -> None:
    timetable = _job(test_cadence_s=0.5).timetable
    assert isinstance(timetable, FixedCadence)
    start = datetime(2026, 1, 1, 12, 0, 0, 100_000, tzinfo=UTC)
    assert timetable.next_after(start) == datetime(2026, 1, 1, 12, 0, 0, 500_000, tzinfo=UTC)
