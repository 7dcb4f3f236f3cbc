"""The `Publisher`: puts job IDs on the jobs topic through the official Pub/Sub client.

A message is the job ID (UTF-8 bytes) with attributes `generation` (the claim's fencing
number, so a worker can drop a stale message) and `run_id` (which scan run sent it). The
client batches messages; `publish` returns the client's future, and the caller waits for
every one before recording the outcome. Retries of transient errors are bounded by
`timeout_s` so a scan run never waits on Pub/Sub longer than its own time budget allows.
"""

from __future__ import annotations

import contextlib
import logging
import threading
from concurrent import futures
from typing import Any

from google.api_core import exceptions as gexc
from google.api_core import retry as gretry

logger = logging.getLogger(__name__)

ATTR_GENERATION = "generation"
ATTR_RUN_ID = "run_id"

# The errors the Publish RPC's own default retry treats as transient.
_TRANSIENT = (
    gexc.Aborted,
    gexc.Cancelled,
    gexc.DeadlineExceeded,
    gexc.InternalServerError,
    gexc.ResourceExhausted,
    gexc.ServiceUnavailable,
    gexc.Unknown,
)

DEFAULT_TIMEOUT_S = 30.0
# Up to 1,000 messages per request is Pub/Sub's limit; a job ID message is ~100 bytes, so a
# full batch is far below the 10 MB request limit. 20 ms lets a page of publishes coalesce.
DEFAULT_MAX_MESSAGES = 1000
DEFAULT_MAX_LATENCY_S = 0.02
DEFAULT_MAX_BYTES = 1_000_000


class PublishError(Exception):
    """The job ID could not be published."""

    def __init__(self, message: str | None = None) -> None:
        super().__init__(message or (self.__doc__ or "").strip())


class Publisher:
    """Publishes job IDs to one topic; share one per process, `close()` it at shutdown."""

    def __init__(self, client: Any, topic_path: str, *, timeout_s: float = DEFAULT_TIMEOUT_S):
        if timeout_s <= 0:
            raise ValueError(f"timeout_s must be > 0, got {timeout_s}")
        self._client = client
        self.topic_path = topic_path
        self.timeout_s = timeout_s
        self._retry = gretry.Retry(
            initial=0.1,
            maximum=min(5.0, timeout_s),
            multiplier=2.0,
            predicate=gretry.if_exception_type(*_TRANSIENT),
            timeout=timeout_s,
        )
        self._lock = threading.Lock()
        self._pending: set[futures.Future[str]] = set()
        self._closed = False

    @classmethod
    def create(
        cls,
        project: str,
        topic: str,
        *,
        timeout_s: float = DEFAULT_TIMEOUT_S,
        max_messages: int = DEFAULT_MAX_MESSAGES,
        max_latency_s: float = DEFAULT_MAX_LATENCY_S,
        max_bytes: int = DEFAULT_MAX_BYTES,
    ) -> Publisher:
        """A Publisher with its own PublisherClient (which honours PUBSUB_EMULATOR_HOST)."""
        import google.cloud.pubsub_v1 as pubsub_v1

        batch = pubsub_v1.types.BatchSettings(
            max_bytes=max_bytes, max_latency=max_latency_s, max_messages=max_messages
        )
        client = pubsub_v1.PublisherClient(batch_settings=batch)
        return cls(client, client.topic_path(project, topic), timeout_s=timeout_s)

    def publish(self, job_id: str, generation: int, run_id: str) -> futures.Future[str]:
        """Queue one message; the future resolves to the message ID or raises the error.

        Raises PublishError at once if the message cannot even be queued (closed publisher,
        invalid message).
        """
        with self._lock:
            if self._closed:
                raise PublishError("publisher is closed")
        try:
            future: futures.Future[str] = self._client.publish(
                self.topic_path,
                job_id.encode("utf-8"),
                retry=self._retry,
                timeout=self.timeout_s,
                **{ATTR_GENERATION: str(generation), ATTR_RUN_ID: run_id},
            )
        except (ValueError, TypeError, RuntimeError, gexc.GoogleAPIError) as exc:
            raise PublishError(f"cannot publish job {job_id!r}: {exc}") from exc
        with self._lock:
            self._pending.add(future)
        future.add_done_callback(self._forget)
        return future

    def _forget(self, future: futures.Future[str]) -> None:
        with self._lock:
            self._pending.discard(future)

    def close(self, timeout_s: float | None = None) -> None:
        """Send what is batched, wait for it (up to `timeout_s`), then close the channel."""
        with self._lock:
            if self._closed:
                return
            self._closed = True
            pending = list(self._pending)
        # RuntimeError: already stopped by someone else, so nothing is left to flush.
        with contextlib.suppress(RuntimeError):
            self._client.stop()
        _done, not_done = futures.wait(pending, timeout=timeout_s or self.timeout_s)
        if not_done:
            logger.warning("closing the publisher with %d publishes unresolved", len(not_done))
        transport = getattr(self._client, "transport", None)
        if transport is not None:
            transport.close()
