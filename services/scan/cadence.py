"""The Cloud Scheduler job that triggers the scan, as a stack deploys it unless told otherwise.

One source for two users: infra/config.py takes these as the defaults of `schedule`,
`timeZone`, `scanAttemptDeadlineS` and `scanRetryCount` (the deployed job, infra/scheduler.py),
and services/local runs its local Cloud Scheduler (emulators/scheduler) with the same values,
so `make run` triggers the scan at the cadence a default stack has.
"""

from __future__ import annotations

from services.edge import scheduler_job

# Every minute: Cloud Scheduler's finest cadence, with paced runs (services/jobs/budget.py)
# working most of each minute, so a default stack drains at the rate the operator sets.
DEFAULT_SCHEDULE = "* * * * *"
DEFAULT_TIME_ZONE = "Etc/UTC"
# Cloud Scheduler's own default for HTTP targets (services/edge/scheduler_job.py).
DEFAULT_ATTEMPT_DEADLINE_S = int(scheduler_job.DEFAULT_ATTEMPT_DEADLINE_S)
DEFAULT_RETRY_COUNT = 0

# How each run works at that cadence (docs/scan.md, "Modes"): paced, up to 50 s of the minute
# (the interval minus budget.PACED_MARGIN_S), at most 12,000 claims (200 jobs/s at one run a
# minute), polling for newly due work every 5 s and ending once nothing is due (the cheap
# choice). infra/config.py's scanMode, scanTimeBudgetS, scanMaxPerRun, scanPollS and
# scanEndWhenIdle default to these, and `make run` gives its scan the same.
DEFAULT_SCAN_MODE = "paced"
DEFAULT_RUN_TIME_BUDGET_S = 50
DEFAULT_RUN_MAX_PER_RUN = 12_000
DEFAULT_RUN_POLL_S = 5
DEFAULT_RUN_END_WHEN_IDLE = True
