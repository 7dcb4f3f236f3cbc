"""Fault injection for reliability tests: fail or delay the next N calls of a method."""

from __future__ import annotations

import threading
from dataclasses import dataclass

import grpc

from emulators.firestore.errors import Injected, InvalidArgument


@dataclass
class Fault:
    method: str
    status: grpc.StatusCode | None
    delay_s: float
    remaining: int
    message: str | None


def status_code(name: str) -> grpc.StatusCode:
    try:
        return grpc.StatusCode[name.upper()]
    except KeyError as exc:
        raise InvalidArgument(f"Unknown gRPC status {name!r}.") from exc


class FaultPlan:
    """Pending faults, consumed by calls in arrival order."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._faults: list[Fault] = []

    def inject(
        self,
        method: str,
        status: str | grpc.StatusCode | None = None,
        count: int = 1,
        delay_s: float = 0.0,
        message: str | None = None,
    ) -> None:
        if status is None and delay_s <= 0:
            raise InvalidArgument("A fault needs a status or a positive delay_s.")
        code = status_code(status) if isinstance(status, str) else status
        if code == grpc.StatusCode.OK:
            code = None
        if count < 1:
            raise InvalidArgument("count must be at least 1.")
        with self._lock:
            self._faults.append(Fault(method, code, float(delay_s), int(count), message))

    def clear(self) -> None:
        with self._lock:
            self._faults.clear()

    def pending(self) -> list[Fault]:
        with self._lock:
            return list(self._faults)

    def take(self, method: str) -> tuple[float, Injected | None]:
        """The delay to add and the error to raise (if any) for one call of ``method``."""
        with self._lock:
            for fault in self._faults:
                if fault.method in (method, "*"):
                    fault.remaining -= 1
                    if fault.remaining <= 0:
                        self._faults.remove(fault)
                    error = Injected(fault.status, fault.message) if fault.status else None
                    return fault.delay_s, error
        return 0.0, None
