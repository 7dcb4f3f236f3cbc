"""Injected faults: make the next N calls of one RPC fail with a status, or answer late."""

from __future__ import annotations

import threading
from dataclasses import dataclass

import grpc

from emulators.pubsub.exceptions import InvalidArgument


@dataclass
class Fault:
    """What to do to the next `remaining` calls of `method` (e.g. "Publish")."""

    method: str
    status: grpc.StatusCode | None
    delay_s: float
    remaining: int

    def describe(self) -> dict[str, object]:
        return {
            "method": self.method,
            "status": self.status.name if self.status else None,
            "delay_s": self.delay_s,
            "count": self.remaining,
        }


def status_from(value: str | grpc.StatusCode | None) -> grpc.StatusCode | None:
    """A gRPC status from its name ("UNAVAILABLE"), or None for a delay-only fault."""
    if value is None or isinstance(value, grpc.StatusCode):
        return value
    try:
        status = grpc.StatusCode[value.upper()]
    except KeyError as exc:
        raise InvalidArgument(f"unknown gRPC status {value!r}") from exc
    if status is grpc.StatusCode.OK:
        raise InvalidArgument("a fault needs a non-OK status or a delay")
    return status


class FaultPlan:
    """The faults waiting to happen, consumed in the order they were added."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._faults: list[Fault] = []

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
        fault = Fault(method, code, float(delay_s), int(count))
        with self._lock:
            self._faults.append(fault)
        return fault

    def take(self, method: str) -> Fault | None:
        """The fault the next call of `method` suffers, if any (uses up one of its count)."""
        with self._lock:
            for fault in self._faults:
                if fault.method == method:
                    fault.remaining -= 1
                    if fault.remaining <= 0:
                        self._faults.remove(fault)
                    return fault
        return None

    def clear(self) -> None:
        with self._lock:
            self._faults.clear()

    def describe(self) -> list[dict[str, object]]:
        with self._lock:
            return [f.describe() for f in self._faults]
