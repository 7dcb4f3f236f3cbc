"""The environment variables the Pulumi program sets on the Cloud Run services.

The names are the services' own constants (services/edge/settings.py for the keys both read,
services/scan/settings.py, services/worker/settings.py), imported, never spelled again here:
a renamed variable changes both sides at once. Those modules are plain constants and
dataclasses, so importing them does no work. tests/infra proves each service gets only names
its Settings reads, with values its Settings accepts.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

import pulumi

from infra.config import StackConfig
from services.edge import scan_deployment
from services.edge import settings as common
from services.jobs.http_targets import targets_json
from services.scan import settings as scan
from services.worker import settings as worker

# Read by functions-framework (not by our Settings): which function of which file the one
# image serves. Paths are relative to the image's working directory (/app).
FUNCTION_TARGET = "FUNCTION_TARGET"
FUNCTION_SOURCE = "FUNCTION_SOURCE"
FUNCTION_SOURCES: Mapping[str, str] = {
    "scan": "services/scan/main.py",
    "worker": "services/worker/main.py",
    "api": "services/api/main.py",
    "console": "services/console/main.py",
}

# Read by functions-framework 3.10's gunicorn server (functions_framework/_http/gunicorn.py,
# https://github.com/GoogleCloudPlatform/functions-framework-python): THREADS request threads
# (default 4 x CPUs) and CLOUD_RUN_TIMEOUT_SECONDS. With more than one thread that is gunicorn
# gthread's `timeout`, which restarts a worker process whose main loop stops answering; with
# one thread (the scan), gunicorn's sync worker, restarted when one request outlives it.
#
# THREADED_TIMEOUT_ENABLED stays "false". "true" selects functions-framework's own gthread
# subclass (GThreadWorkerWithTimeoutSupport, PR #328), which interrupts a request thread at the
# timeout but, in the pinned 3.10.2, drops gunicorn's return value from `handle_request`: every
# response still says "Connection: keep-alive", yet the server then half-closes the connection
# and its one event-loop thread waits up to 2 s for the peer to close it. Measured with the
# worker benchmark's deployed set-up: 20.9 jobs/s with it, 76.9 without
# (docs/deploy.md, "Request timeout"). The request timeout is still enforced: Cloud Run's
# front end answers 504 and closes the connection at it
# (https://cloud.google.com/run/docs/configuring/request-timeout), so Pub/Sub redelivers; the
# handler, which Cloud Run does not stop, ends its own work before it (the worker's
# WORKER_MAX_DELIVERY_S below the timeout, checked between units of work, every Firestore and
# Storage call with its own timeout; the scan's time budget), which the thread interruption
# could do only between Python bytecodes anyway, and at the risk of leaving a lock held.
THREADS = "THREADS"
CLOUD_RUN_TIMEOUT_SECONDS = "CLOUD_RUN_TIMEOUT_SECONDS"
THREADED_TIMEOUT_ENABLED = "THREADED_TIMEOUT_ENABLED"
THREADED_TIMEOUT = "false"
SERVER_VARIABLES: tuple[str, ...] = (THREADS, CLOUD_RUN_TIMEOUT_SECONDS, THREADED_TIMEOUT_ENABLED)

# The services run behind Cloud Run's IAM invoker check (the stack keeps it on: each service
# has exactly one run.invoker binding), and say so to their token verification.
BEHIND_CLOUD_RUN_IAM = "true"

# "cloud": the scan writes its gauges to Cloud Monitoring.
SCAN_METRICS = "cloud"

SCAN_VARIABLES: tuple[str, ...] = (
    common.PROJECT,
    scan_deployment.TOPIC,
    scan.SCAN_AUDIENCE,
    scan.SCAN_ALLOWED_INVOKERS,
    scan_deployment.SCAN_TIME_BUDGET_S,
    scan_deployment.SCAN_MAX_PER_RUN,
    scan.SCAN_PUBLISH_TIMEOUT_S,
    scan_deployment.SCAN_INTERVAL_S,
    scan_deployment.CLAIM_TIMEOUT_S,
    scan.METRICS,
    scan.ENQUEUED_TIMEOUT_S,
    scan.SCAN_MODE,
    scan_deployment.SCAN_POLL_S,
    scan.SCAN_END_WHEN_IDLE,
    scan.SCAN_ATTEMPT_DEADLINE_S,
    scan.SCAN_PARTITIONS,
    scan.SUBSCRIPTION,
    common.TERMINAL_RETENTION_S,
    common.BEHIND_CLOUD_RUN_IAM,
    common.SHARDS,
    common.HTTP_TARGETS,
)
WORKER_VARIABLES: tuple[str, ...] = (
    common.PROJECT,
    common.TERMINAL_RETENTION_S,
    common.BEHIND_CLOUD_RUN_IAM,
    worker.WORKER_AUDIENCE,
    worker.WORKER_ALLOWED_INVOKERS,
    worker.WORKER_LEASE_S,
    worker.WORKER_MAX_DELIVERY_S,
    worker.WORKER_DEADLINE_MARGIN_S,
    worker.RETRY_LATER_DELAY_S,
    worker.WORKER_RETRY_LATER_AFTER_ATTEMPTS,
    worker.MEDIA_BUCKET,
    common.SHARDS,
    common.HTTP_TARGETS,
)


@dataclass(frozen=True)
class Wiring:
    """Values known only once other resources exist (names, URLs, emails)."""

    topic_name: str
    subscription_name: str
    scan_url: pulumi.Input[str]
    worker_url: pulumi.Input[str]
    scheduler_invoker_email: pulumi.Input[str]
    push_invoker_email: pulumi.Input[str]


def scan_environment(config: StackConfig, wiring: Wiring) -> Mapping[str, pulumi.Input[str]]:
    """The scan's JOBS_* variables (exactly SCAN_VARIABLES)."""
    return {
        common.PROJECT: config.project,
        # the topic ID (short name); the project is PROJECT
        scan_deployment.TOPIC: wiring.topic_name,
        scan.SCAN_AUDIENCE: wiring.scan_url,
        scan.SCAN_ALLOWED_INVOKERS: wiring.scheduler_invoker_email,  # comma-separated emails
        scan_deployment.SCAN_TIME_BUDGET_S: str(config.scan_time_budget_s),
        scan_deployment.SCAN_MAX_PER_RUN: str(config.scan_max_per_run),
        scan.SCAN_PUBLISH_TIMEOUT_S: str(config.scan_publish_timeout_s),
        scan_deployment.SCAN_INTERVAL_S: str(config.scan_interval_s),
        scan_deployment.CLAIM_TIMEOUT_S: str(config.claim_timeout_s),
        scan.METRICS: SCAN_METRICS,
        scan.ENQUEUED_TIMEOUT_S: str(config.enqueued_timeout_s),
        # Paced runs and the bound they are checked against at start (the scan refuses a
        # run longer than the attempt deadline, as the preview does).
        scan.SCAN_MODE: config.scan_mode,
        scan_deployment.SCAN_POLL_S: str(config.scan_poll_s),
        scan.SCAN_END_WHEN_IDLE: "true" if config.scan_end_when_idle else "false",
        scan.SCAN_ATTEMPT_DEADLINE_S: str(config.scan_attempt_deadline_s),
        scan.SCAN_PARTITIONS: str(config.scan_partitions),
        # The push subscription (ID) whose oldest-unacked age makes the stale-enqueued rescue
        # backlog-aware (read from Cloud Monitoring: roles/monitoring.viewer, identity.py).
        scan.SUBSCRIPTION: wiring.subscription_name,
        # Both services finish jobs (the scan's reclaimer fails them), so both set expire_at.
        common.TERMINAL_RETENTION_S: str(config.terminal_retention_s),
        common.BEHIND_CLOUD_RUN_IAM: BEHIND_CLOUD_RUN_IAM,
        # Every service that writes a new job (the worker's retries reschedule in place, but
        # all three share the key) computes its shard from the same count.
        common.SHARDS: str(config.shards),
        # Each target with a `rate` is a claim lane of its own (services/jobs/lanes.py).
        common.HTTP_TARGETS: targets_json(config.http_targets.targets),
    }


def worker_environment(config: StackConfig, wiring: Wiring) -> Mapping[str, pulumi.Input[str]]:
    """The worker's JOBS_* variables (exactly WORKER_VARIABLES)."""
    return {
        common.PROJECT: config.project,
        worker.WORKER_AUDIENCE: wiring.worker_url,
        worker.WORKER_ALLOWED_INVOKERS: wiring.push_invoker_email,  # comma-separated emails
        worker.WORKER_LEASE_S: str(config.worker_lease_s),
        # Below the request timeout and a third of the lease (infra/config.py checks both).
        worker.WORKER_MAX_DELIVERY_S: str(config.worker_max_delivery_s),
        worker.WORKER_DEADLINE_MARGIN_S: str(config.worker_deadline_margin_s),
        worker.RETRY_LATER_DELAY_S: str(config.retry_later_delay_s),
        worker.WORKER_RETRY_LATER_AFTER_ATTEMPTS: str(config.retry_later_after_attempts),
        worker.MEDIA_BUCKET: config.media_bucket,
        # The targets http.request calls (the stack's httpTargets, cloudRunService left out).
        common.HTTP_TARGETS: targets_json(config.http_targets.targets),
        common.TERMINAL_RETENTION_S: str(config.terminal_retention_s),
        common.BEHIND_CLOUD_RUN_IAM: BEHIND_CLOUD_RUN_IAM,
        common.SHARDS: str(config.shards),
    }


def server_environment(concurrency: int, timeout_s: int) -> Mapping[str, str]:
    """functions-framework's variables (exactly SERVER_VARIABLES) for a service that Cloud Run
    sends up to `concurrency` requests at once and stops waiting for after `timeout_s`.

    One thread per concurrent request: fewer and requests Cloud Run already admitted queue
    inside the instance, past the autoscaler's view; more and nothing uses them.
    """
    return {
        THREADS: str(concurrency),
        CLOUD_RUN_TIMEOUT_SECONDS: str(timeout_s),
        THREADED_TIMEOUT_ENABLED: THREADED_TIMEOUT,
    }
