"""Structured logging for Cloud Run: one JSON object per line, trace-correlated.

Cloud Logging reads `severity`, `message`, `time`, `logging.googleapis.com/trace` and
`logging.googleapis.com/spanId` from each line; every other key lands in `jsonPayload`, where
log-based metrics (see `metrics.py`) extract fields such as `outcome` or `due_to_done_s`.

Usage:
    logger.info("job done", extra={"fields": {"job_id": job_id, "outcome": "completed"}})

    with bind_request(request_trace(request.headers), project, run_id=run_id):
        ...  # every line logged in this block, on this thread or task, carries trace + run_id

A request's trace is read from W3C `traceparent` first and Google's older
`X-Cloud-Trace-Context` second: Cloud Run sends both, and Google's guidance is to prefer
`traceparent` and fall back to the other (https://cloud.google.com/trace/docs/trace-context).

`configure_logging` installs the formatter on the root logger; the service factories call it,
never an import.
"""

from __future__ import annotations

import datetime
import json
import logging
import re
import sys
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from contextvars import ContextVar
from dataclasses import dataclass
from types import MappingProxyType
from typing import IO, Any, Protocol

TRACE_HEADER = "X-Cloud-Trace-Context"
TRACEPARENT_HEADER = "traceparent"
TRACE_KEY = "logging.googleapis.com/trace"
SPAN_KEY = "logging.googleapis.com/spanId"
SAMPLED_KEY = "logging.googleapis.com/trace_sampled"
SOURCE_KEY = "logging.googleapis.com/sourceLocation"

# The `extra=` key whose mapping is merged into the JSON line.
FIELDS = "fields"

# Keys the formatter owns; a bound or per-call field cannot overwrite them.
_RESERVED = frozenset({"severity", "message", "time", "logger", SOURCE_KEY})

# TRACE_ID/SPAN_ID;o=OPTIONS — the span and the options are optional.
_TRACE_HEADER_RE = re.compile(r"^([0-9a-fA-F]{32})(?:/([0-9]+))?(?:;o=([01]))?$")
# 00-TRACE_ID-SPAN_ID-FLAGS (https://www.w3.org/TR/trace-context/#traceparent-header).
_TRACEPARENT_RE = re.compile(r"^00-([0-9a-f]{32})-([0-9a-f]{16})-([0-9a-f]{2})$")

_bound: ContextVar[Mapping[str, object]] = ContextVar(
    "deferred_jobs_log_fields", default=MappingProxyType({})
)

# Python level -> Cloud Logging severity (NOTSET and custom levels map to DEFAULT).
_SEVERITIES = {
    logging.DEBUG: "DEBUG",
    logging.INFO: "INFO",
    logging.WARNING: "WARNING",
    logging.ERROR: "ERROR",
    logging.CRITICAL: "CRITICAL",
}


@dataclass(frozen=True)
class TraceContext:
    """What an `X-Cloud-Trace-Context: TRACE_ID/SPAN_ID;o=1` header says."""

    trace_id: str
    span_id: str | None = None
    sampled: bool | None = None

    def fields(self, project: str | None) -> dict[str, object]:
        """The log keys Cloud Logging uses to group lines under this trace."""
        trace = f"projects/{project}/traces/{self.trace_id}" if project else self.trace_id
        fields: dict[str, object] = {TRACE_KEY: trace}
        if self.span_id is not None:
            fields[SPAN_KEY] = self.span_id
        if self.sampled is not None:
            fields[SAMPLED_KEY] = self.sampled
        return fields


def parse_trace_header(value: str | None) -> TraceContext | None:
    """The trace context in a header value, or None when absent or malformed."""
    match = _TRACE_HEADER_RE.match((value or "").strip())
    if match is None:
        return None
    trace_id, span_id, options = match.groups()
    sampled = None if options is None else options == "1"
    return TraceContext(trace_id.lower(), span_id, sampled)


def parse_traceparent(value: str | None) -> TraceContext | None:
    """The trace context in a `traceparent` value, or None when absent, malformed or all-zero.
    Its span ID is kept in hexadecimal, the form Cloud Logging's `spanId` takes."""
    match = _TRACEPARENT_RE.match((value or "").strip())
    if match is None:
        return None
    trace_id, span_id, flags = match.groups()
    if set(trace_id) == {"0"} or set(span_id) == {"0"}:
        return None
    return TraceContext(trace_id, span_id, bool(int(flags, 16) & 1))


class Headers(Protocol):
    def get(self, key: str, /) -> str | None: ...


def request_trace(headers: Headers) -> TraceContext | None:
    """A request's trace: its `traceparent` when well formed, else its X-Cloud-Trace-Context."""
    return parse_traceparent(headers.get(TRACEPARENT_HEADER)) or parse_trace_header(
        headers.get(TRACE_HEADER)
    )


@contextmanager
def bound(**fields: object) -> Iterator[None]:
    """Add `fields` to every line logged inside the block (nests; inner values win)."""
    token = _bound.set(MappingProxyType({**_bound.get(), **fields}))
    try:
        yield
    finally:
        _bound.reset(token)


@contextmanager
def bind_request(
    trace_header: str | TraceContext | None, project: str | None, **fields: object
) -> Iterator[None]:
    """Bind a request's trace (`request_trace`, or an X-Cloud-Trace-Context value when well
    formed) and `fields` for the block."""
    trace = trace_header if isinstance(trace_header, TraceContext) else None
    if isinstance(trace_header, str):
        trace = parse_trace_header(trace_header)
    trace_fields = trace.fields(project) if trace else {}
    with bound(**trace_fields, **fields):
        yield


def bound_fields() -> Mapping[str, object]:
    """The fields bound in the current context."""
    return _bound.get()


class JsonFormatter(logging.Formatter):
    """Formats a record as one line of JSON in Cloud Logging's structured shape."""

    def format(self, record: logging.LogRecord) -> str:
        entry: dict[str, Any] = dict(_bound.get())
        extra = getattr(record, FIELDS, None)
        if isinstance(extra, Mapping):
            entry.update(extra)
        for key in _RESERVED & entry.keys():
            # Keep the caller's value visible rather than silently dropping it.
            entry[f"field.{key}"] = entry.pop(key)
        entry.update(
            severity=_SEVERITIES.get(record.levelno, "DEFAULT"),
            message=self._message(record),
            time=_rfc3339(record.created),
            logger=record.name,
        )
        entry[SOURCE_KEY] = {
            "file": record.pathname,
            "line": str(record.lineno),
            "function": record.funcName,
        }
        return json.dumps(entry, default=_json_default, ensure_ascii=False)

    def _message(self, record: logging.LogRecord) -> str:
        # The traceback goes in `message` so Error Reporting groups the error.
        message = record.getMessage()
        if record.exc_info:
            record.exc_text = record.exc_text or self.formatException(record.exc_info)
        if record.exc_text:
            message = f"{message}\n{record.exc_text}"
        if record.stack_info:
            message = f"{message}\n{self.formatStack(record.stack_info)}"
        return message


def configure_logging(level: str | int = "INFO", stream: IO[str] | None = None) -> None:
    """Send every log line to `stream` (stdout) as JSON at `level`; replaces earlier calls."""
    resolved = logging.getLevelName(level.upper()) if isinstance(level, str) else level
    if not isinstance(resolved, int):
        raise ValueError(f"unknown log level {level!r}")
    root = logging.getLogger()
    for handler in [h for h in root.handlers if isinstance(h, _JsonHandler)]:
        root.removeHandler(handler)
    root.addHandler(_JsonHandler(stream or sys.stdout))
    root.setLevel(resolved)


class _JsonHandler(logging.StreamHandler[IO[str]]):
    """Ours, so a second `configure_logging` replaces it instead of doubling every line."""

    def __init__(self, stream: IO[str]) -> None:
        super().__init__(stream)
        self.setFormatter(JsonFormatter())


def _rfc3339(created: float) -> str:
    moment = datetime.datetime.fromtimestamp(created, tz=datetime.UTC)
    return moment.isoformat(timespec="microseconds").replace("+00:00", "Z")


def _json_default(value: object) -> object:
    if isinstance(value, datetime.datetime | datetime.date):
        return value.isoformat()
    if isinstance(value, set | frozenset):
        return sorted(value, key=str)
    return str(value)
