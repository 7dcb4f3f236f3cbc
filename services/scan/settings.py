"""The scan's configuration: one frozen `ScanSettings`, read from JOBS_* variables once.

The variable names are module constants (and `ALL_KEYS`) so the Pulumi program sets exactly
what this reads. `from_env` names every missing or invalid key in one `SettingsError`.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass

from services.jobs import metrics
from services.jobs.auth import DEFAULT_CLOCK_SKEW_S, GOOGLE_CERTS_URL
from services.jobs.publisher import DEFAULT_TIMEOUT_S as DEFAULT_PUBLISH_TIMEOUT_S
from services.jobs.settings import (
    AUTH_CLOCK_SKEW_S,
    BEHIND_CLOUD_RUN_IAM,
    COMMON_KEYS,
    DEFAULT_FIRESTORE_TIMEOUT_S,
    DEFAULT_TERMINAL_RETENTION_S,
    FIRESTORE_TIMEOUT_S,
    LOG_LEVEL,
    OIDC_CERTS_URL,
    PROJECT,
    TERMINAL_RETENTION_S,
    CommonSettings,
    EnvReader,
    SettingsError,
)
from services.scan.budget import DEFAULT_HOUSEKEEPING_INTERVAL_S
from services.scan.scanner import DEFAULT_ENQUEUED_TIMEOUT_S, ScanLimits

__all__ = [
    "ALL_KEYS",
    "AUTH_CLOCK_SKEW_S",
    "BEHIND_CLOUD_RUN_IAM",
    "FIRESTORE_TIMEOUT_S",
    "LOG_LEVEL",
    "OIDC_CERTS_URL",
    "PROJECT",
    "TERMINAL_RETENTION_S",
    "ScanSettings",
    "SettingsError",
    "claim_timeout_floor_s",
]

# The scan's own (the shared ones are services.jobs.settings', read through CommonSettings).
TOPIC = "JOBS_TOPIC"
SCAN_AUDIENCE = "JOBS_SCAN_AUDIENCE"
SCAN_ALLOWED_INVOKERS = "JOBS_SCAN_ALLOWED_INVOKERS"
SCAN_TIME_BUDGET_S = "JOBS_SCAN_TIME_BUDGET_S"
SCAN_MAX_PER_RUN = "JOBS_SCAN_MAX_PER_RUN"
SCAN_PAGE_SIZE = "JOBS_SCAN_PAGE_SIZE"
SCAN_INTERVAL_S = "JOBS_SCAN_INTERVAL_S"
SCAN_PUBLISH_TIMEOUT_S = "JOBS_SCAN_PUBLISH_TIMEOUT_S"
CLAIM_TIMEOUT_S = "JOBS_CLAIM_TIMEOUT_S"
RECLAIM_LIMIT = "JOBS_RECLAIM_LIMIT"
HOUSEKEEPING_INTERVAL_S = "JOBS_SCAN_HOUSEKEEPING_INTERVAL_S"
METRICS = "JOBS_METRICS"
SCAN_RUN_RETENTION_S = "JOBS_SCAN_RUN_RETENTION_S"
ENQUEUED_TIMEOUT_S = "JOBS_ENQUEUED_TIMEOUT_S"

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
)

# Cloud Scheduler's attempt deadline is at most 30 min; a run should end well inside it.
MAX_TIME_BUDGET_S = 1800.0
DEFAULT_TIME_BUDGET_S = 60.0
DEFAULT_MAX_PER_RUN = 1000
MAX_PER_RUN_LIMIT = 100_000
DEFAULT_PAGE_SIZE = 200
# One claim transaction per page; Firestore transactions stay well under 10 MiB at 500 docs.
MAX_PAGE_SIZE = 500
DEFAULT_INTERVAL_S = 60.0  # Cloud Scheduler's finest schedule is every minute
MIN_INTERVAL_S = 1.0
DEFAULT_CLAIM_TIMEOUT_S = 600.0
_MIN_CLAIM_TIMEOUT_S, _MAX_CLAIM_TIMEOUT_S = 1.0, 7 * 86400.0
DEFAULT_RECLAIM_LIMIT = 500
# Housekeeping (reclaimer, backlog counts, scan_runs record) at most this far apart on an idle
# instance; 0 = every run. Bounded by the shortest claim timeout's order of magnitude.
_MAX_HOUSEKEEPING_INTERVAL_S = 3600.0
DEFAULT_RUN_RETENTION_S = 30 * 86400.0
# Enqueued-timeout bounds: at least 5 minutes, at most 7 days (Pub/Sub's longest message
# retention). The default (scanner.DEFAULT_ENQUEUED_TIMEOUT_S) says why it is 3 h; the infra
# sets the value per stack from its Pub/Sub settings.
MIN_ENQUEUED_TIMEOUT_S, MAX_ENQUEUED_TIMEOUT_S = 300.0, 7 * 86400.0


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
            time_budget_s=env.duration_s(
                SCAN_TIME_BUDGET_S, DEFAULT_TIME_BUDGET_S, min=1.0, max=MAX_TIME_BUDGET_S
            ),
            max_per_run=env.int(
                SCAN_MAX_PER_RUN, DEFAULT_MAX_PER_RUN, min=1, max=MAX_PER_RUN_LIMIT
            ),
            page_size=env.int(SCAN_PAGE_SIZE, DEFAULT_PAGE_SIZE, min=1, max=MAX_PAGE_SIZE),
            interval_s=env.duration_s(
                SCAN_INTERVAL_S, DEFAULT_INTERVAL_S, min=MIN_INTERVAL_S, max=86400.0
            ),
            publish_timeout_s=env.duration_s(
                SCAN_PUBLISH_TIMEOUT_S, DEFAULT_PUBLISH_TIMEOUT_S, min=0.1, max=600.0
            ),
            claim_timeout_s=env.duration_s(
                CLAIM_TIMEOUT_S,
                DEFAULT_CLAIM_TIMEOUT_S,
                min=_MIN_CLAIM_TIMEOUT_S,
                max=_MAX_CLAIM_TIMEOUT_S,
            ),
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
        )
        if "/" in settings.topic:
            env.problem(TOPIC, f"must be a topic ID, not a path; got {settings.topic!r}")
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
        )


def claim_timeout_floor_s(environ: Mapping[str, str]) -> float | None:
    """JOBS_CLAIM_TIMEOUT_S when set (parsed and bounded as the scan does), else None.

    For tools beside the scan (jobsctl) that must honour the same floor; raises SettingsError.
    """
    env = EnvReader(environ)
    if not environ.get(CLAIM_TIMEOUT_S, "").strip():
        return None
    floor = env.duration_s(CLAIM_TIMEOUT_S, min=_MIN_CLAIM_TIMEOUT_S, max=_MAX_CLAIM_TIMEOUT_S)
    env.finish()
    return floor


def _metrics_kind(value: str) -> metrics.MetricsKind:
    for kind in metrics.METRICS_KINDS:
        if kind == value:
            return kind
    return "none"  # unreachable: EnvReader.choice returns one of the kinds
