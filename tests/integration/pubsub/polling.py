"""Waiting for asynchronous outcomes in tests: bounded loops that fail with what they saw."""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

from google.cloud import pubsub_v1


def wait_until(condition: Callable[[], bool], timeout_s: float = 20.0, what: str = "") -> None:
    """Poll `condition` until true; fail the test after `timeout_s` (a bound, not a timing)."""
    end = time.monotonic() + timeout_s
    while not condition():
        if time.monotonic() > end:
            raise AssertionError(f"timed out waiting for {what or condition}")
        time.sleep(0.02)


def pull_some(
    subscriber: pubsub_v1.SubscriberClient,
    subscription: str,
    count: int,
    timeout_s: float = 20.0,
    ack: bool = True,
) -> list[Any]:
    """Pull until `count` messages have arrived (acking them unless told not to)."""
    received: list[Any] = []
    end = time.monotonic() + timeout_s
    while len(received) < count:
        if time.monotonic() > end:
            raise AssertionError(f"pulled {len(received)} of {count} messages")
        response = subscriber.pull(
            subscription=subscription, max_messages=min(1000, count - len(received))
        )
        batch = list(response.received_messages)
        if ack and batch:
            subscriber.acknowledge(subscription=subscription, ack_ids=[m.ack_id for m in batch])
        received.extend(batch)
    return received
