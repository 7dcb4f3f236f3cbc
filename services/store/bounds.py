"""The timeout and retry every Firestore call of the store gets (`CallBounds`)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from google.api_core import exceptions as api_exceptions
from google.api_core import retry as api_retry

# Without these the client waits up to 300 s for a read and 60 s for a commit when Firestore is
# unreachable; a scan run or a push must answer 503 long before Pub/Sub or the scheduler gives up.
DEFAULT_CALL_TIMEOUT_S = 10.0

# The transient errors a read is retried on (and a query outside a transaction resumed after).
RETRYABLE = (
    api_exceptions.ServiceUnavailable,
    api_exceptions.DeadlineExceeded,
    api_exceptions.InternalServerError,
    api_exceptions.ResourceExhausted,
)


def bounded_retry(deadline_s: float) -> api_retry.Retry:
    """Retry transient Firestore errors with backoff, giving up after `deadline_s` in all."""
    return api_retry.Retry(
        predicate=api_retry.if_exception_type(*RETRYABLE),
        initial=0.1,
        maximum=2.0,
        multiplier=2.0,
        timeout=deadline_s,
    )


@dataclass(frozen=True)
class CallBounds:
    """The per-call timeout and the retry every Firestore request of a store gets.

    `retry` None means `bounded_retry(2 * timeout_s)`: a couple of attempts, then 503.
    """

    timeout_s: float = DEFAULT_CALL_TIMEOUT_S
    retry: api_retry.Retry | None = None

    def __post_init__(self) -> None:
        if not self.timeout_s > 0:
            raise ValueError("timeout_s must be positive")

    @property
    def kwargs(self) -> dict[str, Any]:
        """`retry=` and `timeout=` for a read (get, query, aggregation, begin)."""
        return {"retry": self.retry or bounded_retry(2 * self.timeout_s), "timeout": self.timeout_s}

    @property
    def write_kwargs(self) -> dict[str, Any]:
        """For a write: timeout only, since a retried create would answer AlreadyExists for
        its own first attempt (and a conditional write FAILED_PRECONDITION)."""
        return {"retry": None, "timeout": self.timeout_s}
