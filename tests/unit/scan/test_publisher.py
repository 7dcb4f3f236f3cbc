"""The Publisher's message shape and lifecycle over a fake client (the emulator tests use the
real PublisherClient)."""

from __future__ import annotations

from concurrent import futures
from typing import Any

import pytest

from services.edge.publisher import ATTR_GENERATION, ATTR_RUN_ID, Publisher, PublishError


class FakeClient:
    def __init__(self) -> None:
        self.published: list[tuple[str, bytes, dict[str, Any]]] = []
        self.futures: list[futures.Future[str]] = []
        self.stopped = 0
        self.transport = self
        self.closed = False

    def publish(self, topic: str, data: bytes, **kwargs: Any) -> futures.Future[str]:
        self.published.append((topic, data, kwargs))
        future: futures.Future[str] = futures.Future()
        self.futures.append(future)
        return future

    def stop(self) -> None:
        self.stopped += 1
        for i, future in enumerate(self.futures):
            if not future.done():
                future.set_result(f"m{i}")

    def close(self) -> None:
        self.closed = True


def test_a_message_is_the_job_id_with_generation_and_run_id_attributes() -> None:
    client = FakeClient()
    publisher = Publisher(client, "projects/p/topics/jobs", timeout_s=5)
    publisher.publish("media.delete_source:m1:d1:abc", 7, "run-1")
    ((topic, data, kwargs),) = client.published
    assert topic == "projects/p/topics/jobs"
    assert data == b"media.delete_source:m1:d1:abc"
    assert kwargs[ATTR_GENERATION] == "7" and kwargs[ATTR_RUN_ID] == "run-1"
    assert kwargs["timeout"] == 5
    assert kwargs["retry"]._timeout == 5  # transient retries end within the timeout


def test_close_flushes_waits_for_pending_publishes_and_closes_the_channel() -> None:
    client = FakeClient()
    publisher = Publisher(client, "projects/p/topics/jobs")
    future = publisher.publish("j1", 1, "r")
    publisher.close()
    assert future.result(timeout=0) == "m0"
    assert client.stopped == 1 and client.closed
    publisher.close()  # idempotent
    assert client.stopped == 1


def test_publishing_after_close_is_refused() -> None:
    publisher = Publisher(FakeClient(), "projects/p/topics/jobs")
    publisher.close()
    with pytest.raises(PublishError, match="closed"):
        publisher.publish("j1", 1, "r")


def test_a_message_the_client_rejects_at_once_raises_publish_error() -> None:
    class Rejecting(FakeClient):
        def publish(self, topic: str, data: bytes, **kwargs: Any) -> futures.Future[str]:
            raise ValueError("bad attribute")

    with pytest.raises(PublishError, match="bad attribute"):
        Publisher(Rejecting(), "projects/p/topics/jobs").publish("j1", 1, "r")
