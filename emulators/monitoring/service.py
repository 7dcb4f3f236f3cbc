"""`MetricService`: ListTimeSeries of Pub/Sub's `subscription/oldest_unacked_message_age` over
`Samples`, on the wire protocol of google.monitoring.v3 (the client library's own protos).

The filter language (https://cloud.google.com/monitoring/api/v3/filters) is taken as far as
the reader needs: `key = "value"` comparisons joined by AND, on `metric.type`, `resource.type`,
`resource.labels.project_id` and `resource.labels.subscription_id`. A filter that does not
parse, a missing name or end time, or an interval ending before it starts is INVALID_ARGUMENT,
as from Google; another metric, another filter key, an aggregation or an ordering, which Google
would serve, is UNIMPLEMENTED here. Other methods are not registered (gRPC: UNIMPLEMENTED).
"""

from __future__ import annotations

import logging
import re
from collections.abc import Callable
from typing import Any

import grpc
from google.api import metric_pb2, monitored_resource_pb2
from google.cloud.monitoring_v3 import types
from google.protobuf.message import DecodeError

from emulators.monitoring.errors import InvalidArgument, MonitoringEmulatorError, Unimplemented
from emulators.monitoring.samples import Samples

logger = logging.getLogger(__name__)

SERVICE_NAME = "google.monitoring.v3.MetricService"
OLDEST_UNACKED_AGE = "pubsub.googleapis.com/subscription/oldest_unacked_message_age"
SUBSCRIPTION_RESOURCE = "pubsub_subscription"

ListTimeSeriesRequest: Any = types.ListTimeSeriesRequest.pb()
ListTimeSeriesResponse: Any = types.ListTimeSeriesResponse.pb()
TimeSeries: Any = types.TimeSeries.pb()

_KEYS = frozenset(
    {
        "metric.type",
        "resource.type",
        "resource.labels.project_id",
        "resource.labels.subscription_id",
    }
)
_CLAUSE = re.compile(r'\s*([A-Za-z_][\w.]*)\s*=\s*"([^"\\]*)"\s*')
_PROJECT = re.compile(r"projects/([a-z0-9][-a-z0-9.:]*)")
_HEADERS_VIEW = 1  # ListTimeSeriesRequest.TimeSeriesView.HEADERS


def parse_filter(text: str) -> dict[str, str]:
    """`key = "value" AND ...` as {key: value}; InvalidArgument when it does not parse."""
    if not text.strip():
        raise InvalidArgument("Field filter had an invalid value: a filter is required")
    clauses: dict[str, str] = {}
    for part in re.split(r"\bAND\b", text):
        match = _CLAUSE.fullmatch(part)
        if match is None:
            raise InvalidArgument(f"Could not parse filter {text!r} near {part.strip()!r}")
        key, value = match.groups()
        if key in clauses and clauses[key] != value:
            return {**clauses, key: "\0"}  # two different values of one key: matches nothing
        clauses[key] = value
    unsupported = sorted(set(clauses) - _KEYS)
    if unsupported:
        raise Unimplemented(f"this emulator does not filter on {', '.join(unsupported)}")
    if "metric.type" not in clauses:
        raise InvalidArgument("Field filter had an invalid value: it must name a metric.type")
    if clauses["metric.type"] != OLDEST_UNACKED_AGE:
        raise Unimplemented(f"this emulator serves only {OLDEST_UNACKED_AGE}")
    return clauses


def list_time_series(samples: Samples, request: Any) -> Any:
    """The ListTimeSeries answer for `request` (a raw protobuf)."""
    match = _PROJECT.fullmatch(request.name)
    if match is None:
        raise InvalidArgument(f"Field name had an invalid value: {request.name!r}")
    project = match.group(1)
    clauses = parse_filter(request.filter)
    if request.HasField("aggregation") or request.order_by:
        raise Unimplemented("this emulator returns raw points: no aggregation or order_by")
    if not request.interval.HasField("end_time"):
        raise InvalidArgument("Field interval.end_time had an invalid value: it is required")
    end = request.interval.end_time.ToNanoseconds() / 1e9
    start = (
        request.interval.start_time.ToNanoseconds() / 1e9
        if request.interval.HasField("start_time")
        else None
    )
    if start is not None and start > end:
        raise InvalidArgument("Field interval.start_time had an invalid value: after end_time")
    response = ListTimeSeriesResponse()
    if clauses.get("resource.type", SUBSCRIPTION_RESOURCE) != SUBSCRIPTION_RESOURCE:
        return response
    if clauses.get("resource.labels.project_id", project) != project:
        return response
    prefix = f"projects/{project}/subscriptions/"
    wanted = clauses.get("resource.labels.subscription_id")
    for path in samples.subscriptions():
        if not path.startswith(prefix):
            continue
        subscription = path[len(prefix) :]
        if wanted is not None and subscription != wanted:
            continue
        points = samples.visible(path, start, end)
        if not points:
            continue  # Google leaves out series with no point in the interval
        series = response.time_series.add()
        series.metric.CopyFrom(metric_pb2.Metric(type=OLDEST_UNACKED_AGE))
        series.resource.CopyFrom(
            monitored_resource_pb2.MonitoredResource(
                type=SUBSCRIPTION_RESOURCE,
                labels={"project_id": project, "subscription_id": subscription},
            )
        )
        series.metric_kind = metric_pb2.MetricDescriptor.MetricKind.GAUGE
        series.value_type = metric_pb2.MetricDescriptor.ValueType.INT64
        series.unit = "s"
        if request.view == _HEADERS_VIEW:
            continue
        for point in points:
            added = series.points.add()
            nanos = int(point.sampled_at * 1e9)
            added.interval.end_time.FromNanoseconds(nanos)
            added.interval.start_time.FromNanoseconds(nanos)
            added.value.int64_value = point.age_s
    return response


def generic_handler(samples: Samples) -> grpc.GenericRpcHandler:
    def handle(raw: bytes, context: grpc.ServicerContext) -> Any:
        try:
            try:
                request = ListTimeSeriesRequest.FromString(raw)
            except DecodeError as exc:
                raise InvalidArgument(f"Invalid ListTimeSeries request: {exc}") from exc
            return list_time_series(samples, request)
        except MonitoringEmulatorError as exc:
            context.abort(exc.code, exc.message)
        except Exception as exc:
            logger.exception("ListTimeSeries failed")
            context.abort(grpc.StatusCode.INTERNAL, f"emulator error: {exc}")

    serialize: Callable[[Any], bytes] = ListTimeSeriesResponse.SerializeToString
    return grpc.method_handlers_generic_handler(
        SERVICE_NAME,
        {
            "ListTimeSeries": grpc.unary_unary_rpc_method_handler(
                handle, response_serializer=serialize
            )
        },
    )
