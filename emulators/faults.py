"""Injected faults: the next N calls of an emulator method fail with a status, or answer late."""

from __future__ import annotations

import threading
from dataclasses import dataclass

import grpc


@dataclass
class Fault:
    """What to do to the next `remaining` calls of `method` (e.g. "Publish")."""

    method: str
    status: grpc.StatusCode | None
    delay_s: float
    remaining: int
    message: str | None = None

    def describe(self) -> dict[str, object]:
        return {
            "method": self.method,
            "status": self.status.name if self.status else None,
            "delay_s": self.delay_s,
            "count": self.remaining,
        }


def status_named(name: str) -> grpc.StatusCode | None:
    """The gRPC status called `name` ("unavailable" or "UNAVAILABLE"), or None if there is none.

    None rather than an error so that each emulator refuses an unknown name with its own
    InvalidArgument and wording.
    """
    try:
        return grpc.StatusCode[name.upper()]
    except KeyError:
        return None


class FaultPlan:
    """The faults waiting to happen, consumed in the order they were added.

    `wildcard` is a method name that matches every method (None: only exact names match).
    """

    def __init__(self, wildcard: str | None = None) -> None:
        self._wildcard = wildcard
        self._lock = threading.Lock()
        self._faults: list[Fault] = []

    def append(self, fault: Fault) -> Fault:
        with self._lock:
            self._faults.append(fault)
        return fault

    def take(self, method: str) -> Fault | None:
        """The fault the next call of `method` suffers, if any (uses up one of its count)."""
        with self._lock:
            for fault in self._faults:
                if fault.method == method or (
                    self._wildcard is not None and fault.method == self._wildcard
                ):
                    fault.remaining -= 1
                    if fault.remaining <= 0:
                        self._faults.remove(fault)
                    return fault
        return None

    def clear(self) -> None:
        with self._lock:
            self._faults.clear()

    def pending(self) -> list[Fault]:
        with self._lock:
            return list(self._faults)

    def describe(self) -> list[dict[str, object]]:
        return [fault.describe() for fault in self.pending()]
