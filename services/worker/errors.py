"""The worker's exceptions: why a push request was refused. (What an action reports, its
`TransientError`, `PermanentError`, ..., is the domain's: services.jobs.errors.)"""

from __future__ import annotations


class WorkerError(Exception):
    """The worker could not process a delivery."""

    def __init__(self, message: str | None = None) -> None:
        super().__init__(message or self.__doc__)


class MalformedDelivery(WorkerError):
    """The push request is not a job delivery this worker understands."""

    def __init__(self, reason: str, detail: str | None = None) -> None:
        # `reason` is a short fixed code (metrics and the rejected record group by it);
        # `detail` is for the operator and may name the offending field.
        super().__init__(detail or reason)
        self.reason = reason
