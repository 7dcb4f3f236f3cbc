"""The environment variables the Pulumi program sets on the two Cloud Run services.

The services read these names (prefix JOBS_) in their Settings (services/scan/settings.py,
services/worker/settings.py); this module is the infra side's only list of them, and
tests/infra proves each service's Settings accepts exactly what the stack sets.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

import pulumi

from infra.config import StackConfig

PROJECT = "JOBS_PROJECT"
METRICS = "JOBS_METRICS"  # "cloud": the scan writes its gauges to Cloud Monitoring

# The scan's variables.
TOPIC = "JOBS_TOPIC"  # the topic ID (short name); the project is JOBS_PROJECT
SCAN_AUDIENCE = "JOBS_SCAN_AUDIENCE"
SCAN_ALLOWED_INVOKERS = "JOBS_SCAN_ALLOWED_INVOKERS"  # comma-separated service account emails
SCAN_TIME_BUDGET_S = "JOBS_SCAN_TIME_BUDGET_S"
SCAN_MAX_PER_RUN = "JOBS_SCAN_MAX_PER_RUN"
SCAN_PUBLISH_TIMEOUT_S = "JOBS_SCAN_PUBLISH_TIMEOUT_S"
SCAN_INTERVAL_S = "JOBS_SCAN_INTERVAL_S"
CLAIM_TIMEOUT_S = "JOBS_CLAIM_TIMEOUT_S"

# The worker's variables.
WORKER_AUDIENCE = "JOBS_WORKER_AUDIENCE"
WORKER_ALLOWED_INVOKERS = "JOBS_WORKER_ALLOWED_INVOKERS"  # comma-separated emails
WORKER_LEASE_S = "JOBS_WORKER_LEASE_S"
RETRY_LATER_DELAY_S = "JOBS_RETRY_LATER_DELAY_S"
WORKER_RETRY_LATER_AFTER_ATTEMPTS = "JOBS_WORKER_RETRY_LATER_AFTER_ATTEMPTS"
MEDIA_BUCKET = "JOBS_MEDIA_BUCKET"

# Read by functions-framework (not by our Settings): which function of which file the one
# image serves. Paths are relative to the image's working directory (/app).
FUNCTION_TARGET = "FUNCTION_TARGET"
FUNCTION_SOURCE = "FUNCTION_SOURCE"
FUNCTION_SOURCES: Mapping[str, str] = {
    "scan": "services/scan/main.py",
    "worker": "services/worker/main.py",
}

SCAN_VARIABLES: tuple[str, ...] = (
    PROJECT,
    TOPIC,
    SCAN_AUDIENCE,
    SCAN_ALLOWED_INVOKERS,
    SCAN_TIME_BUDGET_S,
    SCAN_MAX_PER_RUN,
    SCAN_PUBLISH_TIMEOUT_S,
    SCAN_INTERVAL_S,
    CLAIM_TIMEOUT_S,
    METRICS,
)
WORKER_VARIABLES: tuple[str, ...] = (
    PROJECT,
    WORKER_AUDIENCE,
    WORKER_ALLOWED_INVOKERS,
    WORKER_LEASE_S,
    RETRY_LATER_DELAY_S,
    WORKER_RETRY_LATER_AFTER_ATTEMPTS,
    MEDIA_BUCKET,
)


@dataclass(frozen=True)
class Wiring:
    """Values known only once other resources exist (names, URLs, emails)."""

    topic_name: str
    scan_url: pulumi.Input[str]
    worker_url: pulumi.Input[str]
    scheduler_invoker_email: pulumi.Input[str]
    push_invoker_email: pulumi.Input[str]


def scan_environment(config: StackConfig, wiring: Wiring) -> Mapping[str, pulumi.Input[str]]:
    """The scan's JOBS_* variables (exactly SCAN_VARIABLES)."""
    return {
        PROJECT: config.project,
        TOPIC: wiring.topic_name,
        SCAN_AUDIENCE: wiring.scan_url,
        SCAN_ALLOWED_INVOKERS: wiring.scheduler_invoker_email,
        SCAN_TIME_BUDGET_S: str(config.scan_time_budget_s),
        SCAN_MAX_PER_RUN: str(config.scan_max_per_run),
        SCAN_PUBLISH_TIMEOUT_S: str(config.scan_publish_timeout_s),
        SCAN_INTERVAL_S: str(config.scan_interval_s),
        CLAIM_TIMEOUT_S: str(config.claim_timeout_s),
        METRICS: "cloud",
    }


def worker_environment(config: StackConfig, wiring: Wiring) -> Mapping[str, pulumi.Input[str]]:
    """The worker's JOBS_* variables (exactly WORKER_VARIABLES)."""
    return {
        PROJECT: config.project,
        WORKER_AUDIENCE: wiring.worker_url,
        WORKER_ALLOWED_INVOKERS: wiring.push_invoker_email,
        WORKER_LEASE_S: str(config.worker_lease_s),
        RETRY_LATER_DELAY_S: str(config.retry_later_delay_s),
        WORKER_RETRY_LATER_AFTER_ATTEMPTS: str(config.retry_later_after_attempts),
        MEDIA_BUCKET: config.media_bucket,
    }
