from __future__ import annotations

import logging
from typing import Any

import pytest
from google.api import metric_pb2
from google.cloud import monitoring_v3

from services.edge.monitoring import MAX_SERIES_PER_REQUEST, CloudMonitoringSink, build_sink
from services.telemetry import metrics
from services.telemetry.metrics import InMemorySink, LogSink, NullSink, ScanReport

REPORT = ScanReport(
    run_id="r1",
    oldest_overdue_age_s=42.5,
    due_count=7,
    stuck_claims=1,
    claimed=5,
    published=4,
    publish_failed=1,
    reclaimed=2,
    claim_to_enqueue_latency_s=0.25,
)


class FakeMetricClient:
    def __init__(self, fail: bool = False) -> None:
        self.requests: list[dict[str, Any]] = []
        self.fail = fail

    def create_time_series(self, *, name: str, time_series: list[Any]) -> None:
        if self.fail:
            raise RuntimeError("monitoring is down")
        self.requests.append({"name": name, "time_series": list(time_series)})


def test_cloud_sink_writes_one_gauge_point_per_scan_metric() -> None:
    client = FakeMetricClient()
    CloudMonitoringSink(client, "p1", now=lambda: 1_700_000_000.5).record_scan(REPORT)
    assert len(client.requests) == 1
    request = client.requests[0]
    assert request["name"] == "projects/p1"
    series = request["time_series"]
    assert [s.metric.type for s in series] == [g.type for g in metrics.SCAN_GAUGES]
    by_type = {s.metric.type: s for s in series}
    due = by_type[metrics.DUE_COUNT.type]
    assert due.points[0].value.int64_value == 7
    assert due.resource.type == "global" and due.resource.labels["project_id"] == "p1"
    assert by_type[metrics.OLDEST_OVERDUE_AGE.type].points[0].value.double_value == 42.5
    assert all(len(s.points) == 1 for s in series)
    assert due.points[0].interval.end_time.timestamp() == pytest.approx(1_700_000_000.5)
    # The request the real client would send is a valid proto with typed values.
    wire = monitoring_v3.CreateTimeSeriesRequest(name="projects/p1", time_series=series)
    parsed = monitoring_v3.CreateTimeSeriesRequest.deserialize(
        monitoring_v3.CreateTimeSeriesRequest.serialize(wire)
    )
    descriptor = metric_pb2.MetricDescriptor
    kinds = {s.metric.type: (s.metric_kind, s.value_type) for s in parsed.time_series}
    assert kinds[metrics.DUE_COUNT.type] == (descriptor.GAUGE, descriptor.INT64)
    assert kinds[metrics.OLDEST_OVERDUE_AGE.type] == (descriptor.GAUGE, descriptor.DOUBLE)


def test_cloud_sink_splits_writes_at_200_series_per_request() -> None:
    client = FakeMetricClient()
    sink = CloudMonitoringSink(client, "p1")
    series = (sink.time_series(REPORT) * 100)[:480]
    sink.write(series)
    assert [len(r["time_series"]) for r in client.requests] == [200, 200, 80]
    assert MAX_SERIES_PER_REQUEST == 200


def test_cloud_sink_can_report_as_a_generic_task() -> None:
    sink = CloudMonitoringSink(FakeMetricClient(), "p1", resource="generic_task")
    resource = sink.time_series(REPORT)[0].resource
    assert resource.type == "generic_task"
    assert set(resource.labels) == {"project_id", "location", "namespace", "job", "task_id"}


def test_a_failing_monitoring_write_is_logged_not_raised(caplog: pytest.LogCaptureFixture) -> None:
    CloudMonitoringSink(FakeMetricClient(fail=True), "p1").record_scan(REPORT)
    assert "monitoring is down" in caplog.text


def test_log_sink_writes_the_gauges_under_their_own_event(caplog: pytest.LogCaptureFixture) -> None:
    with caplog.at_level(logging.INFO):
        LogSink().record_scan(REPORT)
    (record,) = caplog.records
    fields = record.fields  # type: ignore[attr-defined]
    assert fields[metrics.LOG_EVENT] == metrics.EVENT_SCAN_GAUGES != metrics.EVENT_SCAN_RUN
    assert fields["due_count"] == 7 and fields["oldest_overdue_age"] == 42.5


def test_in_memory_sink_keeps_every_report() -> None:
    sink = InMemorySink()
    sink.record_scan(REPORT)
    sink.record_scan(REPORT)
    assert sink.reports == [REPORT, REPORT]


def test_build_sink_picks_the_configured_kind() -> None:
    assert isinstance(build_sink("log", "p1"), LogSink)
    assert isinstance(build_sink("none", "p1"), NullSink)
    with pytest.raises(metrics.MetricsError):
        build_sink("statsd", "p1")  # type: ignore[arg-type]
