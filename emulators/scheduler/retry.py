"""A job's `retryConfig`: which failed attempts are retried, and after how long.

Every rule is Cloud Scheduler's (RetryConfig in
https://cloud.google.com/scheduler/docs/reference/rest/v1/projects.locations.jobs#RetryConfig
and https://cloud.google.com/scheduler/docs/configuring/retry-jobs):
- `retryCount` 0-5 ("Values greater than 5 and negative values are not allowed"), default 0;
- `minBackoffDuration` default 5 s, `maxBackoffDuration` default 1 h, `maxDoublings` default 5,
  `maxRetryDuration` default 0 ("retry duration is unlimited");
- the wait "starts at min_backoff_duration, then doubles max_doublings times, then increases
  linearly, and finally retries at intervals of max_backoff_duration": with 10 s / 300 s / 3
  doublings the retries come 10, 20, 40, 80, 160, 240, 300, 300 ... s after each failure;
- `maxRetryDuration` is measured "from the time when an execution was first attempted. If
  specified with retryCount, the job will be retried until both limits are reached"; with both 0
  a failed attempt is not retried and the job waits for its next scheduled time. Read the way
  Cloud Tasks defines the same pair: a positive duration keeps retrying until the count is
  spent *and* the duration has passed; 0 puts no time limit on top of the count.
Durations must be at least 0 and the minimum backoff at most the maximum (inferred: the
doubling rule has no meaning otherwise).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from services.edge.scheduler_job import MAX_RETRY_COUNT

DEFAULT_MIN_BACKOFF_S = 5.0
DEFAULT_MAX_BACKOFF_S = 3600.0
DEFAULT_MAX_DOUBLINGS = 5


class RetryConfigError(ValueError):
    """The retryConfig is outside what Cloud Scheduler accepts."""


@dataclass(frozen=True)
class RetryConfig:
    """Cloud Scheduler's RetryConfig, with its defaults."""

    retry_count: int = 0
    min_backoff_s: float = DEFAULT_MIN_BACKOFF_S
    max_backoff_s: float = DEFAULT_MAX_BACKOFF_S
    max_doublings: int = DEFAULT_MAX_DOUBLINGS
    max_retry_duration_s: float = 0.0

    def __post_init__(self) -> None:
        problems = []
        if not isinstance(self.retry_count, int) or not 0 <= self.retry_count <= MAX_RETRY_COUNT:
            problems.append(f"retryCount={self.retry_count!r} must be a whole number 0-5")
        if not isinstance(self.max_doublings, int) or self.max_doublings < 0:
            problems.append(f"maxDoublings={self.max_doublings!r} must be a whole number >= 0")
        for name, value in (
            ("minBackoffDuration", self.min_backoff_s),
            ("maxBackoffDuration", self.max_backoff_s),
            ("maxRetryDuration", self.max_retry_duration_s),
        ):
            if not isinstance(value, int | float) or not 0 <= value < math.inf:
                problems.append(f"{name}={value!r} must be a number of seconds >= 0")
        if not problems and self.min_backoff_s > self.max_backoff_s:
            problems.append(
                f"minBackoffDuration={self.min_backoff_s:g}s must be at most "
                f"maxBackoffDuration={self.max_backoff_s:g}s"
            )
        if problems:
            raise RetryConfigError("retryConfig: " + "; ".join(problems))

    def backoff_s(self, retry: int) -> float:
        """How long after the failed attempt retry number `retry` (1 = the first retry) starts."""
        if retry < 1:
            raise ValueError(f"retry numbers start at 1, not {retry}")
        doublings = self.max_doublings
        if retry - 1 <= doublings:
            wait = self.min_backoff_s * 2 ** (retry - 1)
        else:  # linear steps of the last doubled interval
            wait = self.min_backoff_s * 2**doublings * (retry - doublings)
        return min(wait, self.max_backoff_s)

    def allows_retry(self, retries_done: int, since_first_attempt_s: float) -> bool:
        """Whether another retry may start, `retries_done` retries and `since_first_attempt_s`
        seconds into the execution."""
        count_left = retries_done < self.retry_count
        if self.max_retry_duration_s == 0:
            return count_left
        return count_left or since_first_attempt_s < self.max_retry_duration_s
