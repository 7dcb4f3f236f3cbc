"""The push subscription's backlog age, as Cloud Monitoring reports it: what the stale-enqueued
rescue needs to tell a lost message from one still waiting (issue 24, finding 9).

Pub/Sub reports `pubsub.googleapis.com/subscription/oldest_unacked_message_age` (GAUGE, INT64,
seconds) per subscription: "Sampled every 60 seconds. After sampling, data is not visible for
up to 120 seconds" (https://cloud.google.com/monitoring/api/metrics_gcp_p_z). A point says
that at its sample time every unacked message had been published at or after sample time -
age (`QueueAge.unacked_since`). The scan marks a job enqueued only after its publish is
acknowledged, so a job enqueued before that instant had no message left in the subscription
at the sample: it was acked, dead-lettered or dropped, and an acked message never comes back.
An older sample only moves the instant earlier, which is the safe side.

`MonitoringQueueAge` reads the newest point with one `projects.timeSeries.list` call
(https://cloud.google.com/monitoring/api/ref_v3/rest/v3/projects.timeSeries/list) through the
official client, once per housekeeping. Anything that keeps it from an answer (an API error,
a missing permission, no point in the lookback window) is "unavailable": the caller skips the
rescue for that run, never falls back to measuring from `enqueued_at` alone.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import TYPE_CHECKING, Any, Protocol

from google.api_core import exceptions as api_exceptions
from google.api_core import retry as api_retry

from services.jobs.clock import Clock

if TYPE_CHECKING:
    from services.scan.settings import ScanSettings

logger = logging.getLogger(__name__)

OLDEST_UNACKED_AGE = "pubsub.googleapis.com/subscription/oldest_unacked_message_age"
SUBSCRIPTION_RESOURCE = "pubsub_subscription"
# How far back a point is looked for: the 60 s sampling plus the 120 s visibility delay leave
# the newest point at most 3 minutes old; 10 minutes rides out a few missed samples.
LOOKBACK = timedelta(minutes=10)
# Taken off the instant the sample gives: the INT64 gauge drops the fraction of a second (an
# age of 59.9 s reads 59), and Pub/Sub stamps publish times with its clock, the scan marks
# `enqueued_at` with its own. The rescue waits hours anyway; 10 s costs nothing.
MARGIN = timedelta(seconds=10)
# The reason on the WARNING line of a read that gave no age.
REASON_UNAVAILABLE = "queue_age_unavailable"
# One call per housekeeping: a slow Monitoring API must not eat the run's time budget.
CALL_TIMEOUT_S = 10.0


@dataclass(frozen=True)
class QueueAge:
    """One sample of the subscription's oldest unacked message age."""

    sampled_at: datetime
    oldest_unacked_age_s: float

    @property
    def unacked_since(self) -> datetime:
        """Every message unacked at the sample was published at or after this instant (less
        `MARGIN`: the gauge counts whole seconds, and publish times are Pub/Sub's clock)."""
        return self.sampled_at - timedelta(seconds=self.oldest_unacked_age_s) - MARGIN


class QueueAgeSource(Protocol):
    """Where the scan reads the backlog age; None when it cannot be known now."""

    def oldest_unacked(self) -> QueueAge | None: ...


def subscription_filter(project: str, subscription: str) -> str:
    """The monitoring filter for one subscription's oldest-unacked-age series
    (https://cloud.google.com/monitoring/api/v3/filters)."""
    return (
        f'metric.type = "{OLDEST_UNACKED_AGE}" AND '
        f'resource.type = "{SUBSCRIPTION_RESOURCE}" AND '
        f'resource.labels.project_id = "{project}" AND '
        f'resource.labels.subscription_id = "{subscription}"'
    )


class MonitoringQueueAge:
    """`QueueAgeSource` over Cloud Monitoring's read API (`MetricServiceClient`)."""

    def __init__(
        self,
        client: Any,
        project: str,
        subscription: str,
        clock: Clock,
        *,
        lookback: timedelta = LOOKBACK,
        timeout_s: float = CALL_TIMEOUT_S,
    ) -> None:
        if "/" in subscription:
            raise ValueError(f"subscription must be an ID, not a path: {subscription!r}")
        self._client = client
        self._project = project
        self._subscription = subscription
        self._clock = clock
        self._lookback = lookback
        self._timeout_s = timeout_s

    def oldest_unacked(self) -> QueueAge | None:
        from google.cloud import monitoring_v3

        now = self._clock.now()
        request = monitoring_v3.ListTimeSeriesRequest(
            name=f"projects/{self._project}",
            filter=subscription_filter(self._project, self._subscription),
            interval=monitoring_v3.TimeInterval(start_time=now - self._lookback, end_time=now),
            view=monitoring_v3.ListTimeSeriesRequest.TimeSeriesView.FULL,
        )
        try:
            # Retried on UNAVAILABLE / DEADLINE_EXCEEDED within the one bound, never the
            # client's default (a minute or more), which would eat the run's time budget.
            retry = api_retry.Retry(
                predicate=api_retry.if_exception_type(
                    api_exceptions.ServiceUnavailable, api_exceptions.DeadlineExceeded
                ),
                initial=0.2,
                maximum=2.0,
                timeout=self._timeout_s,
            )
            pages = self._client.list_time_series(
                request=request, retry=retry, timeout=self._timeout_s
            )
            series = list(pages)
        except (api_exceptions.GoogleAPIError, ValueError) as exc:
            logger.warning(
                "backlog age unavailable: %s",
                exc,
                extra={"fields": {"reason": REASON_UNAVAILABLE, "error_type": type(exc).__name__}},
            )
            return None
        newest: QueueAge | None = None
        for one in series:
            for point in one.points:
                at = point.interval.end_time.astimezone(UTC)
                if newest is None or at > newest.sampled_at:
                    newest = QueueAge(at, float(point.value.int64_value))
        if newest is None:
            logger.warning(
                "backlog age unavailable: no %s point for %s in the last %s",
                OLDEST_UNACKED_AGE,
                self._subscription,
                self._lookback,
                extra={"fields": {"reason": REASON_UNAVAILABLE}},
            )
        return newest


def monitoring_client(endpoint: str | None = None) -> Any:
    """The official `MetricServiceClient`; with `endpoint` ("host:port"), one on a plain
    channel without credentials, for the local Monitoring emulator (emulators/monitoring)."""
    from google.cloud import monitoring_v3

    if endpoint is None:
        return monitoring_v3.MetricServiceClient()
    import grpc
    from google.auth.credentials import AnonymousCredentials
    from google.cloud.monitoring_v3.services.metric_service.transports import (
        MetricServiceGrpcTransport,
    )

    transport = MetricServiceGrpcTransport(
        channel=grpc.insecure_channel(endpoint), credentials=AnonymousCredentials()
    )
    return monitoring_v3.MetricServiceClient(transport=transport)


def build_queue_age(settings: ScanSettings, clock: Clock) -> QueueAgeSource | None:
    """The scan's source: Cloud Monitoring (or the emulator at JOBS_MONITORING_EMULATOR_HOST)
    for JOBS_SUBSCRIPTION, or None when no subscription is configured."""
    if settings.subscription is None:
        return None
    client = monitoring_client(settings.monitoring_emulator_host)
    return MonitoringQueueAge(client, settings.project, settings.subscription, clock)
