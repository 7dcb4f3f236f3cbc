"""The scan's configuration: one frozen `ScanSettings`, read from JOBS_* variables once.

The variable names are module constants (and `ALL_KEYS`) so the Pulumi program sets exactly
what this reads. `from_env` names every missing or invalid key in one `SettingsError`.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass, field

from services.edge.publisher import DEFAULT_TIMEOUT_S as DEFAULT_PUBLISH_TIMEOUT_S
from services.edge.scan_deployment import (
    CLAIM_TIMEOUT_S,
    DEFAULT_CLAIM_TIMEOUT_S,
    DEFAULT_INTERVAL_S,
    DEFAULT_MAX_PER_RUN,
    DEFAULT_TIME_BUDGET_S,
    MAX_ENQUEUED_TIMEOUT_S,
    MIN_ENQUEUED_TIMEOUT_S,
    SCAN_INTERVAL_S,
    SCAN_MAX_PER_RUN,
    SCAN_POLL_S,
    SCAN_TIME_BUDGET_S,
    TOPIC,
    read_claim_timeout_s,
    read_interval_s,
    read_max_per_run,
    read_poll_s,
    read_time_budget_s,
)
from services.edge.scheduler_job import (
    DEFAULT_ATTEMPT_DEADLINE_S,
    MAX_ATTEMPT_DEADLINE_S,
    MIN_ATTEMPT_DEADLINE_S,
)
from services.edge.settings import (
    COMMON_KEYS,
    DEFAULT_CLOCK_SKEW_S,
    DEFAULT_FIRESTORE_TIMEOUT_S,
    DEFAULT_MAX_CLOCK_SKEW_S,
    DEFAULT_TERMINAL_RETENTION_S,
    GOOGLE_CERTS_URL,
    HTTP_TARGETS,
    MAX_CLOCK_SKEW_S,
    SHARDS,
    CommonSettings,
    EnvReader,
    read_http_targets,
    read_max_clock_skew_s,
)
from services.jobs.budget import (
    DEFAULT_ENQUEUED_TIMEOUT_S,
    DEFAULT_HOUSEKEEPING_INTERVAL_S,
    DEFAULT_POLL_S,
    PACED_MARGIN_S,
    SCAN_MODES,
    ScanLimits,
    ScanMode,
)
from services.jobs.http_targets import HttpTarget
from services.telemetry import metrics

# The scan's own (the shared ones are services.edge.settings', read through CommonSettings;
# those jobsctl and the infra read too are services.edge.scan_deployment's).
SCAN_AUDIENCE = "JOBS_SCAN_AUDIENCE"
SCAN_ALLOWED_INVOKERS = "JOBS_SCAN_ALLOWED_INVOKERS"
SCAN_PAGE_SIZE = "JOBS_SCAN_PAGE_SIZE"
SCAN_PUBLISH_TIMEOUT_S = "JOBS_SCAN_PUBLISH_TIMEOUT_S"
RECLAIM_LIMIT = "JOBS_RECLAIM_LIMIT"
HOUSEKEEPING_INTERVAL_S = "JOBS_SCAN_HOUSEKEEPING_INTERVAL_S"
METRICS = "JOBS_METRICS"
SCAN_RUN_RETENTION_S = "JOBS_SCAN_RUN_RETENTION_S"
ENQUEUED_TIMEOUT_S = "JOBS_ENQUEUED_TIMEOUT_S"
# Paced runs (services/scan/pacer.py) and the bounds a run must finish inside.
SCAN_MODE = "JOBS_SCAN_MODE"
SCAN_END_WHEN_IDLE = "JOBS_SCAN_END_WHEN_IDLE"
SCAN_ATTEMPT_DEADLINE_S = "JOBS_SCAN_ATTEMPT_DEADLINE_S"
SCAN_PARTITIONS = "JOBS_SCAN_PARTITIONS"
# The push subscription whose oldest-unacked age (Cloud Monitoring) makes the stale-enqueued
# rescue backlog-aware (services/scan/queue_age.py); unset, the rescue measures from
# enqueued_at alone. The Monitoring endpoint is Google's unless the emulator's host:port is set
# (emulators/monitoring; the local stack sets it).
SUBSCRIPTION = "JOBS_SUBSCRIPTION"
MONITORING_EMULATOR_HOST = "JOBS_MONITORING_EMULATOR_HOST"

ALL_KEYS = (
    *COMMON_KEYS,
    TOPIC,
    SCAN_AUDIENCE,
    SCAN_ALLOWED_INVOKERS,
    SCAN_TIME_BUDGET_S,
    SCAN_MAX_PER_RUN,
    SCAN_PAGE_SIZE,
    SCAN_INTERVAL_S,
    SCAN_PUBLISH_TIMEOUT_S,
    CLAIM_TIMEOUT_S,
    RECLAIM_LIMIT,
    HOUSEKEEPING_INTERVAL_S,
    METRICS,
    SCAN_RUN_RETENTION_S,
    ENQUEUED_TIMEOUT_S,
    SCAN_MODE,
    SCAN_POLL_S,
    SCAN_END_WHEN_IDLE,
    SCAN_ATTEMPT_DEADLINE_S,
    SCAN_PARTITIONS,
    SUBSCRIPTION,
    MONITORING_EMULATOR_HOST,
    HTTP_TARGETS,
    MAX_CLOCK_SKEW_S,
)

DEFAULT_PAGE_SIZE = 200
# One claim transaction per page; Firestore transactions stay well under 10 MiB at 500 docs.
MAX_PAGE_SIZE = 500
DEFAULT_RECLAIM_LIMIT = 500
# Housekeeping (reclaimer, backlog counts, scan_runs record) at most this far apart on an idle
# instance; 0 = every run. Bounded by the shortest claim timeout's order of magnitude.
_MAX_HOUSEKEEPING_INTERVAL_S = 3600.0
DEFAULT_RUN_RETENTION_S = 30 * 86400.0
# Partitions (Scheduler jobs, each owning a group of shards) are at most the shards' maximum.
MAX_PARTITIONS = 64
# A run's lease outlasts its longest run by this much: a clock step or a slow release never
# lets a second run in while the first may still publish.
LEASE_SLACK_S = 30.0


@dataclass(frozen=True)
class ScanSettings:
    """Everything the scan reads from its environment."""

    project: str
    topic: str
    audience: str
    allowed_invokers: frozenset[str]
    certs_url: str = GOOGLE_CERTS_URL
    auth_clock_skew_s: int = DEFAULT_CLOCK_SKEW_S
    time_budget_s: float = DEFAULT_TIME_BUDGET_S
    max_per_run: int = DEFAULT_MAX_PER_RUN
    page_size: int = DEFAULT_PAGE_SIZE
    interval_s: float = DEFAULT_INTERVAL_S
    publish_timeout_s: float = DEFAULT_PUBLISH_TIMEOUT_S
    claim_timeout_s: float = DEFAULT_CLAIM_TIMEOUT_S
    reclaim_limit: int = DEFAULT_RECLAIM_LIMIT
    housekeeping_interval_s: float = DEFAULT_HOUSEKEEPING_INTERVAL_S
    metrics: metrics.MetricsKind = "cloud"
    run_retention_s: float = DEFAULT_RUN_RETENTION_S
    log_level: str = "INFO"
    enqueued_timeout_s: float = DEFAULT_ENQUEUED_TIMEOUT_S
    terminal_retention_s: float = DEFAULT_TERMINAL_RETENTION_S
    firestore_timeout_s: float = DEFAULT_FIRESTORE_TIMEOUT_S
    behind_cloud_run_iam: bool = False
    # JOBS_SHARDS: the due index\'s shard count (services/jobs/shard.py).
    shards: int = 1
    mode: ScanMode = "one-pass"
    poll_s: float = DEFAULT_POLL_S
    end_when_idle: bool = True
    attempt_deadline_s: float = DEFAULT_ATTEMPT_DEADLINE_S
    partitions: int = 1
    subscription: str | None = None
    monitoring_emulator_host: str | None = None
    # JOBS_HTTP_TARGETS: each target with a `rate` is a claim lane of its own
    # (services/jobs/lanes.py, key http.request/<target>).
    http_targets: Mapping[str, HttpTarget] = field(default_factory=dict)
    # JOBS_MAX_CLOCK_SKEW_S: a run whose clock is further from Firestore's claims and reclaims
    # nothing (docs/state-machine.md, "Clock skew").
    max_clock_skew_s: int = DEFAULT_MAX_CLOCK_SKEW_S

    @classmethod
    def from_env(cls, environ: Mapping[str, str] | None = None) -> ScanSettings:
        """Read and validate; raises SettingsError naming every bad key."""
        env = EnvReader(os.environ if environ is None else environ)
        common = CommonSettings.read(env)
        settings = cls(
            **common.as_fields(),
            topic=env.str(TOPIC),
            audience=env.url(SCAN_AUDIENCE),
            allowed_invokers=frozenset(env.csv(SCAN_ALLOWED_INVOKERS)),
            time_budget_s=read_time_budget_s(env),
            max_per_run=read_max_per_run(env),
            page_size=env.int(SCAN_PAGE_SIZE, DEFAULT_PAGE_SIZE, min=1, max=MAX_PAGE_SIZE),
            interval_s=read_interval_s(env),
            publish_timeout_s=env.duration_s(
                SCAN_PUBLISH_TIMEOUT_S, DEFAULT_PUBLISH_TIMEOUT_S, min=0.1, max=600.0
            ),
            claim_timeout_s=read_claim_timeout_s(env),
            reclaim_limit=env.int(RECLAIM_LIMIT, DEFAULT_RECLAIM_LIMIT, min=0, max=MAX_PAGE_SIZE),
            housekeeping_interval_s=env.duration_s(
                HOUSEKEEPING_INTERVAL_S,
                DEFAULT_HOUSEKEEPING_INTERVAL_S,
                min=0.0,
                max=_MAX_HOUSEKEEPING_INTERVAL_S,
            ),
            metrics=_metrics_kind(env.choice(METRICS, metrics.METRICS_KINDS, default="cloud")),
            run_retention_s=env.duration_s(
                SCAN_RUN_RETENTION_S, DEFAULT_RUN_RETENTION_S, min=60.0, max=365 * 86400.0
            ),
            enqueued_timeout_s=env.duration_s(
                ENQUEUED_TIMEOUT_S,
                DEFAULT_ENQUEUED_TIMEOUT_S,
                min=MIN_ENQUEUED_TIMEOUT_S,
                max=MAX_ENQUEUED_TIMEOUT_S,
            ),
            mode=_mode(env.choice(SCAN_MODE, SCAN_MODES, default="one-pass")),
            poll_s=read_poll_s(env),
            end_when_idle=env.bool(SCAN_END_WHEN_IDLE, True),
            attempt_deadline_s=env.duration_s(
                SCAN_ATTEMPT_DEADLINE_S,
                DEFAULT_ATTEMPT_DEADLINE_S,
                min=MIN_ATTEMPT_DEADLINE_S,
                max=MAX_ATTEMPT_DEADLINE_S,
            ),
            partitions=env.int(SCAN_PARTITIONS, 1, min=1, max=MAX_PARTITIONS),
            subscription=env.str(SUBSCRIPTION, "") or None,
            monitoring_emulator_host=env.str(MONITORING_EMULATOR_HOST, "") or None,
            http_targets=read_http_targets(env),
            max_clock_skew_s=read_max_clock_skew_s(env),
        )
        for key, message in run_bound_problems(settings):
            env.problem(key, message)
        if "/" in settings.topic:
            env.problem(TOPIC, f"must be a topic ID, not a path; got {settings.topic!r}")
        if settings.subscription is not None and "/" in settings.subscription:
            env.problem(
                SUBSCRIPTION,
                f"must be a subscription ID, not a path; got {settings.subscription!r}",
            )
        if settings.claim_timeout_s <= settings.time_budget_s + settings.publish_timeout_s:
            # Shorter, and the next run would reclaim claims this run may still be publishing.
            env.problem(
                CLAIM_TIMEOUT_S,
                f"must exceed {SCAN_TIME_BUDGET_S} + {SCAN_PUBLISH_TIMEOUT_S} "
                f"({settings.time_budget_s + settings.publish_timeout_s:g}s); "
                f"got {settings.claim_timeout_s:g}s",
            )
        env.finish()
        return settings

    @property
    def run_length_s(self) -> float:
        """The longest a run works: its time budget, then its last publishes."""
        return self.time_budget_s + self.publish_timeout_s

    def limits(self) -> ScanLimits:
        return ScanLimits(
            time_budget_s=self.time_budget_s,
            max_per_run=self.max_per_run,
            page_size=self.page_size,
            interval_s=self.interval_s,
            claim_timeout_s=self.claim_timeout_s,
            reclaim_limit=self.reclaim_limit,
            enqueued_timeout_s=self.enqueued_timeout_s,
            housekeeping_interval_s=self.housekeeping_interval_s,
            mode=self.mode,
            poll_s=self.poll_s,
            end_when_idle=self.end_when_idle,
            partitions=self.partitions,
            shards=self.shards,
            lease_s=self.run_length_s + LEASE_SLACK_S,
        )


def run_bound_problems(settings: ScanSettings) -> list[tuple[str, str]]:
    """(key, problem) for every way a run could outlast what waits for it: Cloud Scheduler's
    attempt deadline (then it retries while the run still claims:
    https://cloud.google.com/scheduler/docs/configuring/deduplicate-job-requests), which the
    infra also sets as Cloud Run's request timeout (infra/program.py; at that timeout Cloud
    Run answers 504 and does not stop the handler:
    https://cloud.google.com/run/docs/configuring/request-timeout), or, for a paced run, the
    next scheduled execution (a late run delays it: Job.schedule,
    https://cloud.google.com/scheduler/docs/reference/rest/v1/projects.locations.jobs).
    The infra checks the same rules on its keys at `pulumi preview` (infra/config.py)."""
    problems: list[tuple[str, str]] = []
    longest = settings.run_length_s
    budget_terms = f"{SCAN_TIME_BUDGET_S} + {SCAN_PUBLISH_TIMEOUT_S} = {longest:g}s"
    if longest >= settings.attempt_deadline_s:
        problems.append(
            (
                SCAN_TIME_BUDGET_S,
                f"{budget_terms} must be less than {SCAN_ATTEMPT_DEADLINE_S}="
                f"{settings.attempt_deadline_s:g}s: a run must answer before Cloud Scheduler "
                "stops waiting and retries",
            )
        )
    if settings.mode == "paced":
        room = settings.interval_s - PACED_MARGIN_S
        if settings.time_budget_s > room:
            problems.append(
                (
                    SCAN_TIME_BUDGET_S,
                    f"={settings.time_budget_s:g}s: a paced run works for its time budget, "
                    f"which must be at most {SCAN_INTERVAL_S} - {PACED_MARGIN_S:g}s = "
                    f"{room:g}s, so it ends before the next scheduled run",
                )
            )
        if settings.poll_s >= settings.time_budget_s:
            problems.append(
                (
                    SCAN_POLL_S,
                    f"={settings.poll_s:g}s must be less than {SCAN_TIME_BUDGET_S}="
                    f"{settings.time_budget_s:g}s: a paced run polls several times a run",
                )
            )
    if settings.partitions > settings.shards:
        problems.append(
            (
                SCAN_PARTITIONS,
                f"={settings.partitions} must be at most {SHARDS}={settings.shards}: each "
                "partition owns at least one shard",
            )
        )
    return problems


def _mode(value: str) -> ScanMode:
    return "paced" if value == "paced" else "one-pass"


def _metrics_kind(value: str) -> metrics.MetricsKind:
    for kind in metrics.METRICS_KINDS:
        if kind == value:
            return kind
    return "none"  # unreachable: EnvReader.choice returns one of the kinds
