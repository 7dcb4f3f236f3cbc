"""The Cloud Scheduler job that triggers the scan, as a stack deploys it unless told otherwise.

One source for two users: infra/config.py takes these as the defaults of `schedule`,
`timeZone`, `scanAttemptDeadlineS` and `scanRetryCount` (the deployed job, infra/scheduler.py),
and services/local runs its local Cloud Scheduler (emulators/scheduler) with the same values,
so `make run` triggers the scan at the cadence a default stack has.
"""

from __future__ import annotations

# Every minute: Cloud Scheduler's finest cadence, with paced runs (services/scan/budget.py)
# working most of each minute, so a default stack drains at the rate the operator sets.
DEFAULT_SCHEDULE = "* * * * *"
DEFAULT_TIME_ZONE = "Etc/UTC"
DEFAULT_ATTEMPT_DEADLINE_S = 180  # Cloud Scheduler's own default for HTTP targets
DEFAULT_RETRY_COUNT = 0
