"""The worker's exceptions: what an action reports, and why a push request was refused."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any


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


class ActionError(WorkerError):
    """The action did not complete."""


class TransientError(ActionError):
    """The action failed for a reason that may pass; Pub/Sub should deliver it again soon."""


class DependencyDown(TransientError):
    """A dependency of the action is down for long; retry the job much later, not soon."""


class Interrupted(ActionError):
    """The action stopped between units of work at its deadline; `progress` says what it
    finished, so the next delivery resumes with what is left."""

    def __init__(self, progress: Mapping[str, Any], message: str | None = None) -> None:
        super().__init__(message or "stopped at the deadline between units of work")
        self.progress = dict(progress)


class PermanentError(ActionError):
    """The action can never succeed as scheduled; the job fails at once."""


class RetryAfter(TransientError):
    """The dependency asked to be called again after `delay_s` seconds (429 or 503 with
    `Retry-After`): the job waits that long, without spending an attempt."""

    def __init__(self, delay_s: float, message: str | None = None) -> None:
        super().__init__(message or f"the dependency asked to wait {delay_s:g} s")
        self.delay_s = delay_s
