"""Metric descriptors, log-based metrics, notification channels, alert policies, dashboard.

Every metric comes from services.telemetry.metrics (the scan's gauges, the log-based metrics built
from the services' structured log lines) or is a built-in Pub/Sub metric; nothing here names a
metric by a string of its own.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

import pulumi
import pulumiverse_time
from pulumi_gcp import logging as gcp_logging
from pulumi_gcp import monitoring

from infra.config import StackConfig
from infra.scope import Scope
from services.edge.resource_names import Names
from services.telemetry import metrics

PUBSUB_UNDELIVERED = "pubsub.googleapis.com/subscription/num_undelivered_messages"

# The monitored resource the scan writes its gauges on (CloudMonitoringSink's default). An
# alert condition's filter must name the resource type as well as the metric type.
SCAN_GAUGE_RESOURCE = "global"

# The scan gauges' thresholds take the largest value over the partitions' series: the oldest
# overdue age of any partition, stuck claims in any. (Counts like stuck claims are each
# partition's own, so any partition above 0 is what the alerts ask.)
GAUGE_REDUCER = "REDUCE_MAX"

# The gauge every scan run writes, even while paused: its absence means no scan ran.
SCAN_HEARTBEAT = metrics.DUE_COUNT

# Seconds from ~0.1 s to ~3 years in 30 exponential buckets: due-to-done can be days.
LATENCY_SCALE_S = 0.1
LATENCY_GROWTH = 2.0
LATENCY_BUCKETS = 30

# Cloud Monitoring answers 404 ("If a metric was created recently, it could take up to 10
# minutes to become available") to an alert policy naming a log-based metric created moments
# before, and the provider does not retry (terraform-provider-google issue 11102). Alerts that
# watch a metric this stack creates therefore wait this long after those metrics are created,
# with the Sleep resource of the Pulumi Registry's time package (pulumiverse_time,
# https://www.pulumi.com/registry/packages/time/api-docs/sleep/). The scan's gauge
# descriptors wait too: the same answer names any recently created metric, and they cost no
# extra time, since the log metrics' wait runs anyway. A Sleep delays only its creation: later
# `pulumi up`s do not wait, unless a new metric replaces it (its triggers).
METRIC_PROPAGATION = "11m"

# A shard layout that differs from JOBS_SHARDS is expected for the minutes between
# `jobsctl backfill-shards --apply` and the deploy of the new `shards` (docs/capacity.md,
# "Changing the shard count"); a change deployed without the backfill persists. The alert waits
# this long, so the documented procedure does not page and a forgotten backfill does.
SHARD_LAYOUT_FOR_S = 900


@dataclass(frozen=True)
class Monitoring:
    descriptors: list[monitoring.MetricDescriptor]
    log_metrics: list[gcp_logging.Metric]
    metrics_usable: pulumiverse_time.Sleep  # created once the stack's metrics can be alerted on
    channels: list[monitoring.NotificationChannel]
    alerts: dict[str, monitoring.AlertPolicy]
    dashboard: monitoring.Dashboard


def metric_filter(metric_type: str, *clauses: str) -> str:
    """A Cloud Monitoring filter on one metric type, plus extra clauses."""
    return " AND ".join((f'metric.type="{metric_type}"', *clauses))


def gauge_filter(gauge: metrics.GaugeMetric) -> str:
    """The filter for one of the scan's custom gauges."""
    return metric_filter(gauge.type, f'resource.type="{SCAN_GAUGE_RESOURCE}"')


def log_metric_filter(log_metric: metrics.LogMetric, names: Names) -> str:
    """Log lines of this stack's two services whose `event` is the metric's event."""
    clauses = [
        'resource.type="cloud_run_revision"',
        f'resource.labels.service_name=("{names.scan_service}" OR "{names.worker_service}")',
        f'jsonPayload.{metrics.LOG_EVENT}="{log_metric.event}"',
    ]
    if log_metric.value_field is not None:
        clauses.append(f"jsonPayload.{log_metric.value_field}:*")
    return " AND ".join(clauses)


def create_monitoring(
    config: StackConfig, names: Names, scope: Scope, opts: pulumi.ResourceOptions
) -> Monitoring:
    descriptors = [
        monitoring.MetricDescriptor(
            scope.name(f"gauge-{gauge.short_name}"),
            project=config.project,
            type=gauge.type,
            metric_kind="GAUGE",
            value_type=gauge.value_type,
            unit=gauge.unit,
            description=gauge.description,
            display_name=f"Deferred Jobs {gauge.short_name.replace('_', ' ')}",
            labels=[
                monitoring.MetricDescriptorLabelArgs(
                    key=metrics.PARTITION_LABEL,
                    value_type="STRING",
                    description="the scan partition whose run wrote the point",
                )
            ],
            opts=opts,
        )
        for gauge in metrics.SCAN_GAUGES
    ]
    log_metrics = [_log_metric(config, names, scope, m, opts) for m in metrics.LOG_METRICS]
    created: dict[str, pulumi.CustomResource] = {
        **{g.type: d for g, d in zip(metrics.SCAN_GAUGES, descriptors, strict=True)},
        **{m.type: lm for m, lm in zip(metrics.LOG_METRICS, log_metrics, strict=True)},
    }
    usable = pulumiverse_time.Sleep(
        scope.name("metrics-usable"),
        create_duration=METRIC_PROPAGATION,
        # A new or renamed metric replaces the Sleep, so alerts on it wait again.
        triggers={metric_type: resource.id for metric_type, resource in created.items()},
        opts=scope.opts(depends_on=list(created.values())),
    )
    channels = _channels(config, scope, opts)
    after_metrics = pulumi.ResourceOptions.merge(
        opts, pulumi.ResourceOptions(depends_on=[*descriptors, *log_metrics])
    )
    after_propagation = pulumi.ResourceOptions.merge(
        after_metrics, pulumi.ResourceOptions(depends_on=[usable])
    )
    alerts = {
        key: _alert_policy(
            config,
            scope.name(f"alert-{key}"),
            alert,
            [c.name for c in channels],
            after_propagation if watches_created_metric(alert.condition) else after_metrics,
        )
        for key, alert in alert_conditions(config, names).items()
    }
    dashboard = monitoring.Dashboard(
        scope.name("dashboard"),
        project=config.project,
        dashboard_json=json.dumps(dashboard_definition(config, names)),
        opts=after_metrics,
    )
    return Monitoring(descriptors, log_metrics, usable, channels, alerts, dashboard)


def condition_metric_type(condition: monitoring.AlertPolicyConditionArgs) -> str:
    """The metric type an alert condition's filter names (its first clause)."""
    body = condition.condition_threshold or condition.condition_absent
    kinds = (
        monitoring.AlertPolicyConditionConditionThresholdArgs,
        monitoring.AlertPolicyConditionConditionAbsentArgs,
    )
    if not isinstance(body, kinds) or not isinstance(body.filter, str):
        raise TypeError("every condition here is a threshold or an absence with a str filter")
    clause = body.filter.split(" AND ")[0]
    return clause.removeprefix('metric.type="').removesuffix('"')


def watches_created_metric(condition: monitoring.AlertPolicyConditionArgs) -> bool:
    """Whether the condition watches a metric this stack creates (and so must wait for it)."""
    created = {g.type for g in metrics.SCAN_GAUGES} | {m.type for m in metrics.LOG_METRICS}
    return condition_metric_type(condition) in created


def _log_metric(
    config: StackConfig,
    names: Names,
    scope: Scope,
    log_metric: metrics.LogMetric,
    opts: pulumi.ResourceOptions,
) -> gcp_logging.Metric:
    distribution = log_metric.value_field is not None
    return gcp_logging.Metric(
        scope.name(f"log-{log_metric.name}"),
        project=config.project,
        name=log_metric.name,
        description=log_metric.description,
        filter=log_metric_filter(log_metric, names),
        metric_descriptor=gcp_logging.MetricMetricDescriptorArgs(
            metric_kind="DELTA",
            value_type="DISTRIBUTION" if distribution else "INT64",
            unit="s" if distribution else "1",
        ),
        value_extractor=(
            f"EXTRACT(jsonPayload.{log_metric.value_field})" if distribution else None
        ),
        bucket_options=(
            gcp_logging.MetricBucketOptionsArgs(
                exponential_buckets=gcp_logging.MetricBucketOptionsExponentialBucketsArgs(
                    scale=LATENCY_SCALE_S,
                    growth_factor=LATENCY_GROWTH,
                    num_finite_buckets=LATENCY_BUCKETS,
                )
            )
            if distribution
            else None
        ),
        opts=opts,
    )


def _channels(
    config: StackConfig, scope: Scope, opts: pulumi.ResourceOptions
) -> list[monitoring.NotificationChannel]:
    channels = [
        monitoring.NotificationChannel(
            scope.name(f"email-{index}"),
            project=config.project,
            type="email",
            display_name=f"Deferred Jobs: {address}",
            labels={"email_address": address},
            opts=opts,
        )
        for index, address in enumerate(config.alert_emails)
    ]
    if config.slack_channel and config.slack_auth_token is not None:
        channels.append(
            monitoring.NotificationChannel(
                scope.name("slack"),
                project=config.project,
                type="slack",
                display_name=f"Deferred Jobs: {config.slack_channel}",
                labels={"channel_name": config.slack_channel},
                sensitive_labels=monitoring.NotificationChannelSensitiveLabelsArgs(
                    auth_token=config.slack_auth_token
                ),
                opts=opts,
            )
        )
    return channels


def _aligned(
    seconds: int, aligner: str, reducer: str | None = None
) -> list[monitoring.AlertPolicyConditionConditionThresholdAggregationArgs]:
    """Align each series; with `reducer`, reduce all series (the scan gauges' partitions) to
    one, so a condition evaluates one series whatever `scanPartitions` is."""
    return [
        monitoring.AlertPolicyConditionConditionThresholdAggregationArgs(
            alignment_period=f"{seconds}s",
            per_series_aligner=aligner,
            cross_series_reducer=reducer,
        )
    ]


def _threshold(
    title: str,
    filter_: str,
    *,
    above: float,
    for_s: int,
    align_s: int,
    aligner: str,
    reducer: str | None = None,
) -> monitoring.AlertPolicyConditionArgs:
    return monitoring.AlertPolicyConditionArgs(
        display_name=title,
        condition_threshold=monitoring.AlertPolicyConditionConditionThresholdArgs(
            filter=filter_,
            comparison="COMPARISON_GT",
            threshold_value=above,
            duration=f"{for_s}s",
            aggregations=_aligned(align_s, aligner, reducer),
        ),
    )


@dataclass(frozen=True)
class Alert:
    severity: str
    runbook: str
    condition: monitoring.AlertPolicyConditionArgs


def alert_conditions(config: StackConfig, names: Names) -> dict[str, Alert]:
    """Every alert of the stack, by key, before it becomes a resource."""
    # A gauge written once per scan run: align over at least one interval, or most windows
    # are empty.
    scan_align = max(60, -(-config.scan_interval_s // 60) * 60)
    conditions: dict[str, tuple[str, str, monitoring.AlertPolicyConditionArgs]] = {
        "overdue-age": (
            "CRITICAL",
            f"Oldest overdue job is older than the SLO ({config.overdue_age_slo_s} s) for "
            f"{config.overdue_for_min} min: the scan is not keeping up, or is paused.",
            _threshold(
                "Oldest overdue age above SLO",
                gauge_filter(metrics.OLDEST_OVERDUE_AGE),
                above=config.overdue_age_slo_s,
                for_s=config.overdue_for_min * 60,
                align_s=scan_align,
                aligner="ALIGN_MAX",
                reducer=GAUGE_REDUCER,
            ),
        ),
        "stuck-claims": (
            "ERROR",
            f"Claims older than the claim timeout ({config.claim_timeout_s} s) for "
            f"{config.stuck_claims_for_min} min: publishes are failing or scans crash.",
            _threshold(
                "Stuck claims present",
                gauge_filter(metrics.STUCK_CLAIMS),
                above=0,
                for_s=config.stuck_claims_for_min * 60,
                align_s=scan_align,
                aligner="ALIGN_MAX",
                reducer=GAUGE_REDUCER,
            ),
        ),
        "stale-enqueued": (
            "ERROR",
            f"Jobs have been enqueued for longer than {config.enqueued_timeout_s} s (beyond "
            f"Pub/Sub's whole retry path) for {config.stale_enqueued_for_min} min: their "
            "messages are probably lost. Runbook: docs/runbook.md, 'Stale enqueued jobs'.",
            _threshold(
                "Stale enqueued jobs present",
                gauge_filter(metrics.STALE_ENQUEUED),
                above=0,
                for_s=config.stale_enqueued_for_min * 60,
                align_s=scan_align,
                aligner="ALIGN_MAX",
                reducer=GAUGE_REDUCER,
            ),
        ),
        "scan-absent": (
            "CRITICAL",
            f"No scan run reported for {config.scan_absent_s} s (three scheduler intervals): "
            "check the Cloud Scheduler job and the scan service.",
            # Not reduced over partitions: each partition's series is checked on its own, so
            # one partition whose trigger stopped alerts while the others still run.
            monitoring.AlertPolicyConditionArgs(
                display_name="Scan runs absent",
                condition_absent=monitoring.AlertPolicyConditionConditionAbsentArgs(
                    filter=gauge_filter(SCAN_HEARTBEAT),
                    duration=f"{config.scan_absent_s}s",
                    trigger=monitoring.AlertPolicyConditionConditionAbsentTriggerArgs(count=1),
                ),
            ),
        ),
        "dead-letters": (
            "ERROR",
            f"Messages wait on {names.dead_letter_subscription}: jobs the worker refused "
            f"{config.dead_letter_attempts} times. Inspect them with the operator CLI.",
            _threshold(
                "Dead-lettered messages present",
                metric_filter(
                    PUBSUB_UNDELIVERED,
                    'resource.type="pubsub_subscription"',
                    f'resource.labels.subscription_id="{names.dead_letter_subscription}"',
                ),
                above=0,
                for_s=0,
                align_s=60,
                aligner="ALIGN_MAX",
            ),
        ),
        "failed-jobs": (
            "ERROR",
            "A job ended in the terminal failed state; inspect it with the operator CLI.",
            _threshold(
                "Jobs failed",
                metric_filter(metrics.FAILED_JOBS.type, 'resource.type="cloud_run_revision"'),
                above=0,
                for_s=0,
                align_s=300,
                aligner="ALIGN_SUM",
            ),
        ),
        "shards-stranded": (
            "ERROR",
            "Non-terminal jobs carry a shard no scan query names (shard >= the stack's "
            "`shards`, or none while the shard layout is unknown): they are never claimed, "
            "reclaimed or counted, so no overdue alert covers them. Run `jobsctl "
            "backfill-shards --shards N --apply` with the stack's N. Runbook: "
            "docs/runbook.md, 'Jobs out of shard reach'.",
            _threshold(
                "Jobs out of shard reach",
                gauge_filter(metrics.SHARD_STRANDED),
                above=0,
                for_s=0,
                align_s=scan_align,
                aligner="ALIGN_MAX",
                reducer=GAUGE_REDUCER,
            ),
        ),
        "shard-layout": (
            "ERROR",
            "The job records are laid out for another shard count than the stack's `shards` "
            f"for {SHARD_LAYOUT_FOR_S // 60} min: `shards` changed without `jobsctl "
            "backfill-shards`. Run `jobsctl backfill-shards --shards N --apply` with the "
            "stack's N. Runbook: docs/runbook.md, 'Jobs out of shard reach'.",
            _threshold(
                "Shard layout differs from the shard count",
                gauge_filter(metrics.SHARD_LAYOUT_MISMATCH),
                above=0,
                for_s=SHARD_LAYOUT_FOR_S,
                align_s=scan_align,
                aligner="ALIGN_MAX",
                reducer=GAUGE_REDUCER,
            ),
        ),
        "newer-records": (
            "ERROR",
            "Job documents written by a newer version of the code were met and left untouched "
            "(a rollback below the version that wrote them?): redeploy the newer revision. "
            "Runbook: docs/runbook.md, 'Records from a newer version'.",
            _threshold(
                "Records from a newer version",
                metric_filter(metrics.NEWER_RECORDS.type, 'resource.type="cloud_run_revision"'),
                above=0,
                for_s=0,
                align_s=300,
                aligner="ALIGN_SUM",
            ),
        ),
        "unknown-action": (
            "WARNING",
            "The worker met jobs whose action it does not know and deferred them (they wait, "
            "never fail): deploy a worker whose image has the action's plug-in. `jobsctl "
            "actions check` shows which. Runbook: docs/runbook.md, 'Jobs whose action no "
            "worker knows'.",
            _threshold(
                "Jobs whose action no worker knows",
                metric_filter(metrics.UNKNOWN_ACTIONS.type, 'resource.type="cloud_run_revision"'),
                above=0,
                for_s=0,
                align_s=300,
                aligner="ALIGN_SUM",
            ),
        ),
        "clock-skew": (
            "ERROR",
            "A scan run or a worker found its clock further from Firestore's than "
            "JOBS_MAX_CLOCK_SKEW_S and refused to claim, reclaim, start or take over (the jobs "
            "wait, none is lost): the instance's time is wrong. Runbook: docs/runbook.md, "
            "'Clock skew refused work'.",
            _threshold(
                "Clock skew refused work",
                metric_filter(
                    metrics.CLOCK_SKEW_REFUSALS.type, 'resource.type="cloud_run_revision"'
                ),
                above=0,
                for_s=0,
                align_s=300,
                aligner="ALIGN_SUM",
            ),
        ),
    }
    return {key: Alert(*alert) for key, alert in conditions.items()}


def _alert_policy(
    config: StackConfig,
    resource: str,
    alert: Alert,
    channels: list[pulumi.Output[str]],
    opts: pulumi.ResourceOptions,
) -> monitoring.AlertPolicy:
    return monitoring.AlertPolicy(
        resource,
        project=config.project,
        display_name=f"Deferred Jobs ({config.name_prefix}): {alert.condition.display_name}",
        combiner="OR",
        severity=alert.severity,
        conditions=[alert.condition],
        notification_channels=channels,
        documentation=monitoring.AlertPolicyDocumentationArgs(
            content=alert.runbook, mime_type="text/markdown"
        ),
        alert_strategy=monitoring.AlertPolicyAlertStrategyArgs(auto_close="1800s"),
        opts=opts,
    )


def _chart(title: str, filter_: str, aligner: str) -> dict[str, Any]:
    return {
        "title": title,
        "xyChart": {
            "dataSets": [
                {
                    "plotType": "LINE",
                    "timeSeriesQuery": {
                        "timeSeriesFilter": {
                            "filter": filter_,
                            "aggregation": {"alignmentPeriod": "300s", "perSeriesAligner": aligner},
                        }
                    },
                }
            ]
        },
    }


def dashboard_definition(config: StackConfig, names: Names) -> dict[str, Any]:
    """The dashboard JSON: one chart per scan gauge, per log-based metric, and the queues."""
    widgets = [
        _chart(gauge.description, gauge_filter(gauge), "ALIGN_MAX") for gauge in metrics.SCAN_GAUGES
    ]
    widgets += [
        _chart(
            log_metric.description,
            metric_filter(log_metric.type, 'resource.type="cloud_run_revision"'),
            "ALIGN_PERCENTILE_95" if log_metric.value_field else "ALIGN_SUM",
        )
        for log_metric in metrics.LOG_METRICS
    ]
    widgets += [
        _chart(
            f"Undelivered messages: {subscription}",
            metric_filter(
                PUBSUB_UNDELIVERED,
                'resource.type="pubsub_subscription"',
                f'resource.labels.subscription_id="{subscription}"',
            ),
            "ALIGN_MAX",
        )
        for subscription in (names.push_subscription, names.dead_letter_subscription)
    ]
    return {
        "displayName": f"Deferred Jobs ({config.name_prefix})",
        "gridLayout": {"columns": "2", "widgets": widgets},
    }
