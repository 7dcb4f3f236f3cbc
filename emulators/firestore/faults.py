"""Firestore fault injection: which faults the admin API may inject (the plan itself is shared)."""

from __future__ import annotations

import grpc

from emulators import faults
from emulators.faults import Fault
from emulators.firestore.errors import InvalidArgument

ANY_METHOD = "*"


def status_code(name: str) -> grpc.StatusCode:
    code = faults.status_named(name)
    if code is None:
        raise InvalidArgument(f"Unknown gRPC status {name!r}.")
    return code


class FaultPlan(faults.FaultPlan):
    """Pending faults, consumed by calls in arrival order; method "*" matches every call."""

    def __init__(self) -> None:
        super().__init__(wildcard=ANY_METHOD)

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
        self.append(Fault(method, code, float(delay_s), int(count), message))
