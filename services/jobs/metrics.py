"""Metric names and shapes that the services emit and the Pulumi program alerts on.

Defined once here: the scan writes the custom gauges, the worker writes the structured log
fields the log-based metrics extract, and `infra/` imports these same objects to create
descriptors, log-based metrics, alert policies and the dashboard.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

CUSTOM_PREFIX = "custom.googleapis.com/deferred_jobs/"

ValueType = Literal["INT64", "DOUBLE"]


@dataclass(frozen=True)
class GaugeMetric:
    """A custom Cloud Monitoring gauge, written once per scan run."""

    short_name: str
    value_type: ValueType
    unit: str
    description: str

    @property
    def type(self) -> str:
        return CUSTOM_PREFIX + self.short_name


OLDEST_OVERDUE_AGE = GaugeMetric(
    "oldest_overdue_age", "DOUBLE", "s", "Age of the oldest deferred job past its due time."
)
DUE_COUNT = GaugeMetric("due_count", "INT64", "1", "Deferred jobs whose due time has passed.")
STUCK_CLAIMS = GaugeMetric(
    "stuck_claims", "INT64", "1", "Claimed jobs older than the claim timeout."
)
RUN_CLAIMED = GaugeMetric("run_claimed", "INT64", "1", "Jobs claimed by one scan run.")
RUN_PUBLISHED = GaugeMetric("run_published", "INT64", "1", "Job IDs published by one scan run.")
RUN_PUBLISH_FAILED = GaugeMetric(
    "run_publish_failed", "INT64", "1", "Publishes that failed in one scan run."
)
RUN_RECLAIMED = GaugeMetric(
    "run_reclaimed", "INT64", "1", "Expired claims and leases reclaimed by one scan run."
)
CLAIM_TO_ENQUEUE_LATENCY = GaugeMetric(
    "claim_to_enqueue_latency", "DOUBLE", "s", "Longest claim-to-enqueue time in one scan run."
)

SCAN_GAUGES: tuple[GaugeMetric, ...] = (
    OLDEST_OVERDUE_AGE,
    DUE_COUNT,
    STUCK_CLAIMS,
    RUN_CLAIMED,
    RUN_PUBLISHED,
    RUN_PUBLISH_FAILED,
    RUN_RECLAIMED,
    CLAIM_TO_ENQUEUE_LATENCY,
)

# Structured log fields the worker writes on its one line per outcome; log-based metrics
# extract from exactly these keys (jsonPayload.<key>).
LOG_EVENT = "event"
LOG_OUTCOME = "outcome"
LOG_DUE_TO_DONE_S = "due_to_done_s"
LOG_ENQUEUE_TO_DONE_S = "enqueue_to_done_s"
LOG_ATTEMPT = "attempt"

EVENT_WORKER_OUTCOME = "worker_outcome"
EVENT_REJECTED = "push_rejected"
EVENT_JOB_FAILED = "job_failed"
EVENT_SCAN_RUN = "scan_run"


@dataclass(frozen=True)
class LogMetric:
    """A log-based metric: a counter, or a distribution extracted from `value_field`."""

    name: str
    event: str
    description: str
    value_field: str | None = None  # None: a counter of matching lines

    @property
    def type(self) -> str:
        return "logging.googleapis.com/user/" + self.name


WORKER_DUE_TO_DONE = LogMetric(
    "deferred_jobs_due_to_done",
    EVENT_WORKER_OUTCOME,
    "Seconds from a job's due time to its completion.",
    LOG_DUE_TO_DONE_S,
)
WORKER_ENQUEUE_TO_DONE = LogMetric(
    "deferred_jobs_enqueue_to_done",
    EVENT_WORKER_OUTCOME,
    "Seconds from a job's enqueue to its completion.",
    LOG_ENQUEUE_TO_DONE_S,
)
REJECTED_MESSAGES = LogMetric(
    "deferred_jobs_rejected", EVENT_REJECTED, "Push messages the worker could never process."
)
FAILED_JOBS = LogMetric(
    "deferred_jobs_failed", EVENT_JOB_FAILED, "Jobs that ended in the terminal failed state."
)
SCAN_RUNS = LogMetric("deferred_jobs_scan_runs", EVENT_SCAN_RUN, "Completed scan runs.")

LOG_METRICS: tuple[LogMetric, ...] = (
    WORKER_DUE_TO_DONE,
    WORKER_ENQUEUE_TO_DONE,
    REJECTED_MESSAGES,
    FAILED_JOBS,
    SCAN_RUNS,
)
