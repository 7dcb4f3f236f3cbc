"""The scan's gauges in Cloud Monitoring: `CloudMonitoringSink` on the official
`google-cloud-monitoring` client, and `build_sink`, which picks the sink `JOBS_METRICS` names.

Here, at the edge, because it needs the Google client; the gauges themselves, their names and
the in-process sinks stay in `services/telemetry/metrics.py` (standard library only).
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from typing import Any, Literal

from services.telemetry.metrics import (
    METRICS_KINDS,
    PARTITION_LABEL,
    LogSink,
    MetricsError,
    MetricsKind,
    MetricsSink,
    NullSink,
    ScanReport,
)

# Cloud Monitoring accepts at most 200 time series in one CreateTimeSeries request.
MAX_SERIES_PER_REQUEST = 200

MonitoredResource = Literal["global", "generic_task"]


class CloudMonitoringSink:
    """Writes one point per scan gauge with `MetricServiceClient.create_time_series`.

    `client` is a `google.cloud.monitoring_v3.MetricServiceClient` (built by `build_sink`, never
    at import). A failed write is logged and swallowed: the scan's work is done by then, and the
    log line per run still carries the same numbers.
    """

    def __init__(
        self,
        client: Any,
        project: str,
        *,
        resource: MonitoredResource = "global",
        task_labels: dict[str, str] | None = None,
        now: Callable[[], float] = time.time,
    ) -> None:
        self._client = client
        self._project = project
        self._resource = resource
        self._task_labels = dict(task_labels or {})
        self._now = now

    def record_scan(self, report: ScanReport) -> None:
        try:
            self.write(self.time_series(report))
        except Exception as exc:  # any client failure: report it, never fail the run
            logging.getLogger(__name__).warning(
                "writing scan gauges to Cloud Monitoring failed: %s",
                exc,
                extra={"fields": {"run_id": report.run_id}},
            )

    def write(self, series: list[Any]) -> None:
        """CreateTimeSeries in requests of at most MAX_SERIES_PER_REQUEST series."""
        for start in range(0, len(series), MAX_SERIES_PER_REQUEST):
            self._client.create_time_series(
                name=f"projects/{self._project}",
                time_series=series[start : start + MAX_SERIES_PER_REQUEST],
            )

    def time_series(self, report: ScanReport) -> list[Any]:
        """The TimeSeries messages for one report (one point each, all at the same instant)."""
        from google.cloud import monitoring_v3

        end = self._now()
        seconds = int(end)
        interval = monitoring_v3.TimeInterval(
            {"end_time": {"seconds": seconds, "nanos": int((end - seconds) * 1e9)}}
        )
        resource = {"type": self._resource, "labels": self._resource_labels()}
        # One series per (gauge, partition): partitions' runs never overwrite each other.
        labels = {PARTITION_LABEL: str(report.partition)}
        out = []
        for gauge, value in report.gauge_values().items():
            typed = (
                {"int64_value": int(value)}
                if gauge.value_type == "INT64"
                else {"double_value": float(value)}
            )
            out.append(
                monitoring_v3.TimeSeries(
                    {
                        "metric": {"type": gauge.type, "labels": labels},
                        "resource": resource,
                        "metric_kind": "GAUGE",
                        "value_type": gauge.value_type,
                        "unit": gauge.unit,
                        "points": [{"interval": interval, "value": typed}],
                    }
                )
            )
        return out

    def _resource_labels(self) -> dict[str, str]:
        if self._resource == "global":
            return {"project_id": self._project}
        labels = {"project_id": self._project, "location": "global", "namespace": "deferred-jobs"}
        labels.update({"job": "scan", "task_id": "scan"})
        labels.update(self._task_labels)
        return labels


def build_sink(kind: MetricsKind, project: str) -> MetricsSink:
    """The sink for `kind`; `cloud` builds a MetricServiceClient here, at startup."""
    if kind == "cloud":
        from google.cloud import monitoring_v3

        return CloudMonitoringSink(monitoring_v3.MetricServiceClient(), project)
    if kind == "log":
        return LogSink()
    if kind == "none":
        return NullSink()
    raise MetricsError(f"unknown metrics sink {kind!r}; expected one of {METRICS_KINDS}")
