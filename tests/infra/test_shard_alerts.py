"""The shard check's two gauges (services/telemetry/metrics.py) and their alert policies agree: the
scan writes a point of each on the resource the alerts watch, and each alert names the gauge
the scan writes, with the threshold and wait docs/runbook.md gives."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

from infra.monitoring import SCAN_GAUGE_RESOURCE, SHARD_LAYOUT_FOR_S
from services.edge.monitoring import CloudMonitoringSink
from services.scan.summary import scan_report
from services.store.runs import ScanRun
from services.telemetry import metrics
from services.telemetry.metrics import ScanReport
from tests.infra.conftest import StackRun

AT = datetime(2026, 12, 2, tzinfo=UTC)
ALERTS = {
    "alert-shards-stranded": (metrics.SHARD_STRANDED, 0),
    "alert-shard-layout": (metrics.SHARD_LAYOUT_MISMATCH, SHARD_LAYOUT_FOR_S),
}


def _condition(stack: StackRun, name: str) -> tuple[Any, Any]:
    policy = stack.one("monitoring/alertPolicy:AlertPolicy", name).state
    return policy, policy["conditions"][0]["conditionThreshold"]


def test_each_shard_alert_watches_the_gauge_the_scan_writes(stack: StackRun) -> None:
    for name, (gauge, wait_s) in ALERTS.items():
        policy, condition = _condition(stack, name)
        assert condition["filter"].split(" AND ")[0] == f'metric.type="{gauge.type}"'
        assert f'resource.type="{SCAN_GAUGE_RESOURCE}"' in condition["filter"]
        assert (condition["comparison"], condition["thresholdValue"]) == ("COMPARISON_GT", 0)
        assert condition["duration"] == f"{wait_s}s"
        assert policy["severity"] == "ERROR"
        content = policy["documentation"]["content"]
        assert "jobsctl backfill-shards" in content and "docs/runbook.md" in content


def test_the_scan_reports_both_shard_gauges_on_the_alerted_resource() -> None:
    run = ScanRun(
        run_id="r1",
        started_at=AT,
        finished_at=AT,
        stopped_because="drained",
        shard_stranded=211,
        shard_layout_mismatch=True,
    )
    report = scan_report(run)
    values = report.gauge_values()
    assert (values[metrics.SHARD_STRANDED], values[metrics.SHARD_LAYOUT_MISMATCH]) == (211, 1)
    series = CloudMonitoringSink(client=None, project="p").time_series(report)
    written = {s.metric.type: s for s in series}
    for gauge in (metrics.SHARD_STRANDED, metrics.SHARD_LAYOUT_MISMATCH):
        assert written[gauge.type].resource.type == SCAN_GAUGE_RESOURCE
        assert gauge.value_type == "INT64"
        assert written[gauge.type].points[0].value.int64_value == values[gauge]


def test_a_default_report_has_both_shard_gauges_at_zero() -> None:
    values = ScanReport("run-1", 0.0, 0, 0, 0, 0, 0, 0, 0.0).gauge_values()
    assert values[metrics.SHARD_STRANDED] == values[metrics.SHARD_LAYOUT_MISMATCH] == 0
