"""What Cloud Scheduler accepts in a Job beyond its schedule (scheduler_cron.py): the attempt
deadline and the retry count, the limits both the local Cloud Scheduler (emulators/scheduler)
enforces and the stack (infra/config.py) and the scan's settings validate against.

From the Job resource (https://cloud.google.com/scheduler/docs/reference/rest/v1/
projects.locations.jobs): `attemptDeadline` "For HTTP targets, the default is 3 minutes. The
deadline must be in the interval [15 seconds, 30 minutes]"; `retryConfig.retryCount` "Values
greater than 5 and negative values are not allowed", default 0.
"""

from __future__ import annotations

MIN_ATTEMPT_DEADLINE_S = 15.0
MAX_ATTEMPT_DEADLINE_S = 30 * 60.0
DEFAULT_ATTEMPT_DEADLINE_S = 180.0
MAX_RETRY_COUNT = 5
