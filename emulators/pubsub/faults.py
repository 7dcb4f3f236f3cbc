"""Pub/Sub's fault injection: which faults the admin API may add (the plan itself is shared)."""

from __future__ import annotations

import grpc

from emulators import faults
from emulators.faults import Fault
from emulators.pubsub.exceptions import InvalidArgument


def status_from(value: str | grpc.StatusCode | None) -> grpc.StatusCode | None:
    """A gRPC status from its name ("UNAVAILABLE"), or None for a delay-only fault."""
    if value is None or isinstance(value, grpc.StatusCode):
        return value
    status = faults.status_named(value)
    if status is None:
        raise InvalidArgument(f"unknown gRPC status {value!r}")
    if status is grpc.StatusCode.OK:
        raise InvalidArgument("a fault needs a non-OK status or a delay")
    return status


class FaultPlan(faults.FaultPlan):
    """The faults waiting to happen; each names one RPC exactly."""

    def add(
        self,
        method: str,
        status: str | grpc.StatusCode | None = None,
        delay_s: float = 0.0,
        count: int = 1,
    ) -> Fault:
        code = status_from(status)
        if not method:
            raise InvalidArgument("a fault needs a method name, e.g. 'Publish'")
        if code is None and delay_s <= 0:
            raise InvalidArgument("a fault needs a status or a positive delay_s")
        if count < 1 or delay_s < 0:
            raise InvalidArgument("count must be >= 1 and delay_s >= 0")
        return self.append(Fault(method, code, float(delay_s), int(count)))
