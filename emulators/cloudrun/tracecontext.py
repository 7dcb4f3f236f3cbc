"""The trace headers Cloud Run gives every request: W3C `traceparent` and Google's older
`X-Cloud-Trace-Context`, naming one trace.

Google Cloud's services that propagate trace context accept and produce both headers, and
prefer `traceparent`; `X-Cloud-Trace-Context` is `TRACE_ID/SPAN_ID;o=OPTIONS` with a decimal
span ID where `traceparent` is `00-TRACE_ID-SPAN_ID-FLAGS` with a hexadecimal one
(https://cloud.google.com/trace/docs/trace-context; the format is W3C Trace Context,
https://www.w3.org/TR/trace-context/#traceparent-header). Cloud Run populates them on every
request (https://cloud.google.com/run/docs/trace).

`completed(headers)` is what the front end forwards: a well-formed header the caller sent is
kept, the other is derived from it (same trace, same span, same sampled flag), and when the
caller sent neither (or only malformed ones) both are made fresh. A malformed value is
replaced, as W3C Trace Context tells a participant that cannot parse `traceparent` to do.
"""

from __future__ import annotations

import re
import secrets
from collections.abc import Mapping
from dataclasses import dataclass

from emulators.cloudrun.contract import TRACE_HEADER as CLOUD_TRACE
from emulators.cloudrun.contract import TRACEPARENT_HEADER as TRACEPARENT

_TRACEPARENT = re.compile(r"00-([0-9a-f]{32})-([0-9a-f]{16})-([0-9a-f]{2})")
_CLOUD_TRACE = re.compile(r"([0-9a-fA-F]{32})(?:/([0-9]{1,20}))?(?:;o=([0-9]+))?")
_MAX_SPAN = 2**64 - 1


@dataclass(frozen=True)
class Trace:
    trace_id: str  # 32 lowercase hex digits, not all zero
    span_id: int  # 1 .. 2**64 - 1
    sampled: bool

    @property
    def traceparent(self) -> str:
        return f"00-{self.trace_id}-{self.span_id:016x}-{'01' if self.sampled else '00'}"

    @property
    def cloud_trace(self) -> str:
        return f"{self.trace_id}/{self.span_id};o={1 if self.sampled else 0}"


def fresh() -> Trace:
    return Trace(secrets.token_hex(16), secrets.randbits(63) | 1, True)


def parse_traceparent(value: str | None) -> Trace | None:
    match = _TRACEPARENT.fullmatch((value or "").strip())
    if match is None:
        return None
    trace_id, span, flags = match.groups()
    if set(trace_id) == {"0"} or set(span) == {"0"}:
        return None  # all-zero IDs are invalid (W3C Trace Context 3.2.2.3, 3.2.2.4)
    return Trace(trace_id, int(span, 16), bool(int(flags, 16) & 1))


def parse_cloud_trace(value: str | None) -> Trace | None:
    match = _CLOUD_TRACE.fullmatch((value or "").strip())
    if match is None:
        return None
    trace_id, span, options = match.groups()
    span_id = int(span) if span else 0
    if set(trace_id) == {"0"} or not 0 < span_id <= _MAX_SPAN:
        return None
    return Trace(trace_id.lower(), span_id, options is None or options == "1")


def completed(headers: Mapping[str, str]) -> dict[str, str]:
    """Both trace headers for a request whose headers (any case) are `headers`."""
    lowered = {k.lower(): v for k, v in headers.items()}
    sent_parent = lowered.get(TRACEPARENT.lower())
    sent_cloud = lowered.get(CLOUD_TRACE.lower())
    parent = parse_traceparent(sent_parent)
    cloud = parse_cloud_trace(sent_cloud)
    base = parent or cloud or fresh()
    return {
        TRACEPARENT: sent_parent.strip() if parent and sent_parent else base.traceparent,
        CLOUD_TRACE: sent_cloud.strip() if cloud and sent_cloud else base.cloud_trace,
    }
