"""`make run`'s local Cloud Scheduler job is the job a default stack deploys.

infra/config.py takes its trigger defaults from services/scan/cadence.py and infra/scheduler.py
passes them to the cloudscheduler.Job; services/local builds its local job from the same
module. If either side changes alone, the local cadence stops being production's.
"""

from __future__ import annotations

import io
from typing import Any

from infra.config import parse_config
from services.edge.resource_names import Names
from services.edge.scan_deployment import SCAN_MAX_PER_RUN, SCAN_POLL_S, SCAN_TIME_BUDGET_S
from services.local.system import SCHEDULER_LOCATION, LocalSystem, Options
from services.scan.settings import SCAN_ATTEMPT_DEADLINE_S, SCAN_END_WHEN_IDLE, SCAN_MODE
from tests.infra.conftest import StackRun, stack_config

MINIMAL: dict[str, Any] = {
    "image": "europe-west1-docker.pkg.dev/p/r/app:1",
    "mediaBucket": "media",
    "gcp:project": "p",
    "gcp:region": "europe-west1",
    "alertEmails": [],
    "apiCallers": [],
}


def test_the_local_job_has_a_default_stacks_schedule_zone_deadline_and_retries() -> None:
    config = parse_config(MINIMAL)
    system = LocalSystem(Options(), io.StringIO())
    system.endpoints.scan_url = "http://127.0.0.1:8100"
    job = system.scheduler_job()
    assert job.schedule == config.schedule == "* * * * *"
    assert job.time_zone == config.time_zone
    assert job.attempt_deadline_s == config.scan_attempt_deadline_s
    assert job.retry.retry_count == config.scan_retry_count
    assert job.test_cadence_s is None  # the test cadence is never the default
    assert job.job_id == Names.for_prefix(config.name_prefix).scheduler_job
    # The scan budgets for the same interval as a deployed scan (JOBS_SCAN_INTERVAL_S).
    assert Options().budget_interval_s == config.scan_interval_s


def test_the_local_scan_runs_as_a_default_stacks_scan() -> None:
    """Mode, run length, per-run cap, polling and deadline: `make run`'s scan gets the values
    infra puts in a default stack's scan environment (infra/env.py)."""
    config = parse_config(MINIMAL)
    local = Options().scan_run_environment
    assert local == {
        SCAN_MODE: config.scan_mode,
        SCAN_TIME_BUDGET_S: str(config.scan_time_budget_s),
        SCAN_MAX_PER_RUN: str(config.scan_max_per_run),
        SCAN_POLL_S: str(config.scan_poll_s),
        SCAN_END_WHEN_IDLE: "true" if config.scan_end_when_idle else "false",
        SCAN_ATTEMPT_DEADLINE_S: str(config.scan_attempt_deadline_s),
    }
    assert config.scan_mode == "paced"
    # A test cadence (seconds apart) leaves a paced run no room: it runs one-pass.
    assert Options(test_cadence_s=2.0).scan_run_environment == {SCAN_MODE: "one-pass"}


def test_the_deployed_job_takes_the_stack_values(dev: StackRun) -> None:
    job = dict(dev.one("cloudscheduler/job:Job", "scan-trigger").state)
    values = stack_config("dev")
    config = parse_config(
        {
            **MINIMAL,
            **{k.removeprefix("deferred-jobs:"): v for k, v in values.items()},
        }
    )
    assert job["schedule"] == config.schedule
    assert job["timeZone"] == config.time_zone
    assert job["attemptDeadline"] == f"{config.scan_attempt_deadline_s}s"
    assert job["retryConfig"]["retryCount"] == config.scan_retry_count


def test_the_local_location_is_the_region_of_both_committed_stacks() -> None:
    assert {stack_config(s)["gcp:region"] for s in ("dev", "prod")} == {SCHEDULER_LOCATION}
