"""Metric names and shapes that the services emit and the Pulumi program alerts on.

Defined once here: the scan writes the custom gauges, the worker writes the structured log
fields the log-based metrics extract, and `infra/` imports these same objects to create
descriptors, log-based metrics, alert policies and the dashboard.
"""

from __future__ import annotations

import logging
import threading
from dataclasses import dataclass
from typing import Literal, Protocol

CUSTOM_PREFIX = "custom.googleapis.com/deferred_jobs/"
# Every scan gauge carries the partition (`scanPartitions`) whose run wrote it: with k > 1,
# k runs a minute write the same gauges, and without the label their points would be one
# series, each run overwriting the others'. The metric descriptors (infra/monitoring.py)
# declare it; the alerts reduce over it.
PARTITION_LABEL = "partition"

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
STALE_ENQUEUED = GaugeMetric(
    "stale_enqueued",
    "INT64",
    "1",
    "Jobs enqueued longer ago than the enqueued timeout: their message may be lost.",
)
OLDEST_ENQUEUED_AGE = GaugeMetric(
    "oldest_enqueued_age", "DOUBLE", "s", "Age of the oldest job waiting in the enqueued state."
)
RUN_QUARANTINED = GaugeMetric(
    "run_quarantined",
    "INT64",
    "1",
    "Undecodable job documents one scan run moved aside (failed, invalid_record).",
)

# The shard check (services/jobs/layout.py, docs/scan.md "Shard layout check").
SHARD_STRANDED = GaugeMetric(
    "shard_stranded",
    "INT64",
    "1",
    "Non-terminal jobs no shard query reaches: shard >= JOBS_SHARDS (counted at every "
    "housekeeping) or, while the shard layout is unknown, without a shard.",
)
SHARD_LAYOUT_MISMATCH = GaugeMetric(
    "shard_layout_mismatch",
    "INT64",
    "1",
    "1 while JOBS_SHARDS differs from the shard count the job records were last backfilled "
    "for (or the layout is unknown and records are out of reach): run jobsctl backfill-shards.",
)

# Budgets per action (services/jobs/lanes.py, docs/scan.md "Budgets per action").
ACTIONS_PAUSED = GaugeMetric(
    "actions_paused",
    "INT64",
    "1",
    "Actions whose claims one scan run held back because their dependency answered 429/503 "
    "with Retry-After (the pause lasts until then).",
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
    STALE_ENQUEUED,
    OLDEST_ENQUEUED_AGE,
    RUN_QUARANTINED,
    SHARD_STRANDED,
    SHARD_LAYOUT_MISMATCH,
    ACTIONS_PAUSED,
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
EVENT_JOB_QUARANTINED = "job_quarantined"  # an undecodable or unclaimable job document moved aside
# A job document written by a newer version met (and left untouched) by this one.
EVENT_JOB_FROM_NEWER_VERSION = "job_from_newer_version"
EVENT_UNKNOWN_ACTION = "unknown_action"  # a job whose action the worker lacks, deferred
EVENT_STORE_REJECTED = "store_rejected"  # Firestore refused a request retrying cannot fix
# The scan's ERROR line while job records are out of the shard queries' reach, or laid out for
# another shard count than JOBS_SHARDS (services/jobs/layout.py).
EVENT_SHARD_LAYOUT = "shard_layout"
# The worker's line when an action's dependency asked to wait (429/503 + Retry-After) and it
# recorded a pause of that action's claims (once per pause window, not per job).
EVENT_ACTION_PAUSED = "action_paused"
# A scan run or a worker's start refused because the instance's clock is further from
# Firestore's time than JOBS_MAX_CLOCK_SKEW_S (docs/state-machine.md, "Clock skew").
EVENT_CLOCK_SKEW = "clock_skew"


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
NEWER_RECORDS = LogMetric(
    "deferred_jobs_newer_records",
    EVENT_JOB_FROM_NEWER_VERSION,
    "Job documents written by a newer version, left untouched by this one.",
)

UNKNOWN_ACTIONS = LogMetric(
    "deferred_jobs_unknown_action",
    EVENT_UNKNOWN_ACTION,
    "Deliveries of jobs whose action the worker does not know (deferred, never failed).",
)

ACTION_PAUSES = LogMetric(
    "deferred_jobs_action_paused",
    EVENT_ACTION_PAUSED,
    "Pauses of an action's claims recorded because its dependency answered 429/503 with "
    "Retry-After (the line names the action).",
)

CLOCK_SKEW_REFUSALS = LogMetric(
    "deferred_jobs_clock_skew",
    EVENT_CLOCK_SKEW,
    "Scan runs and worker starts refused because the instance's clock was further from "
    "Firestore's time than the tolerated skew (the line gives offset_s).",
)

LOG_METRICS: tuple[LogMetric, ...] = (
    WORKER_DUE_TO_DONE,
    WORKER_ENQUEUE_TO_DONE,
    REJECTED_MESSAGES,
    FAILED_JOBS,
    SCAN_RUNS,
    NEWER_RECORDS,
    UNKNOWN_ACTIONS,
    ACTION_PAUSES,
    CLOCK_SKEW_REFUSALS,
)


# --- The metrics port: the scan reports one ScanReport per run to a MetricsSink. ---


class MetricsError(Exception):
    """Metrics could not be written."""


@dataclass(frozen=True)
class ScanReport:
    """The numbers one scan run reports: a value for each gauge in SCAN_GAUGES."""

    run_id: str
    oldest_overdue_age_s: float
    due_count: int
    stuck_claims: int
    claimed: int
    published: int
    publish_failed: int
    reclaimed: int
    claim_to_enqueue_latency_s: float
    stale_enqueued: int = 0
    oldest_enqueued_age_s: float = 0.0
    quarantined: int = 0
    shard_stranded: int = 0
    shard_layout_mismatch: int = 0
    actions_paused: int = 0
    partition: int = 0  # the partition whose run this is (0 with one partition)

    def gauge_values(self) -> dict[GaugeMetric, int | float]:
        """Each scan gauge with this run's value, in SCAN_GAUGES order."""
        values: dict[GaugeMetric, int | float] = {
            OLDEST_OVERDUE_AGE: float(self.oldest_overdue_age_s),
            DUE_COUNT: int(self.due_count),
            STUCK_CLAIMS: int(self.stuck_claims),
            RUN_CLAIMED: int(self.claimed),
            RUN_PUBLISHED: int(self.published),
            RUN_PUBLISH_FAILED: int(self.publish_failed),
            RUN_RECLAIMED: int(self.reclaimed),
            CLAIM_TO_ENQUEUE_LATENCY: float(self.claim_to_enqueue_latency_s),
            STALE_ENQUEUED: int(self.stale_enqueued),
            OLDEST_ENQUEUED_AGE: float(self.oldest_enqueued_age_s),
            RUN_QUARANTINED: int(self.quarantined),
            SHARD_STRANDED: int(self.shard_stranded),
            SHARD_LAYOUT_MISMATCH: int(self.shard_layout_mismatch),
            ACTIONS_PAUSED: int(self.actions_paused),
        }
        return {gauge: values[gauge] for gauge in SCAN_GAUGES}


class MetricsSink(Protocol):
    """Where a scan run's gauges go; called once per run, after the run."""

    def record_scan(self, report: ScanReport) -> None: ...


class InMemorySink:
    """Keeps every report, for tests and for a process that wants to look back."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._reports: list[ScanReport] = []

    def record_scan(self, report: ScanReport) -> None:
        with self._lock:
            self._reports.append(report)

    @property
    def reports(self) -> list[ScanReport]:
        with self._lock:
            return list(self._reports)


class LogSink:
    """Writes the gauges as one structured log line, for local runs without Cloud Monitoring."""

    def __init__(self, logger: logging.Logger | None = None) -> None:
        self._logger = logger or logging.getLogger(__name__)

    def record_scan(self, report: ScanReport) -> None:
        gauges = {g.short_name: v for g, v in report.gauge_values().items()}
        # A distinct event: EVENT_SCAN_RUN is reserved for the scan's own line per run, which
        # the SCAN_RUNS log-based metric counts; this line must not count twice.
        self._logger.info(
            "scan gauges",
            extra={"fields": {LOG_EVENT: EVENT_SCAN_GAUGES, "run_id": report.run_id, **gauges}},
        )


class NullSink:
    """Discards reports (JOBS_METRICS=none)."""

    def record_scan(self, report: ScanReport) -> None:
        return None


EVENT_SCAN_GAUGES = "scan_gauges"

MetricsKind = Literal["cloud", "log", "none"]
METRICS_KINDS: tuple[MetricsKind, ...] = ("cloud", "log", "none")
