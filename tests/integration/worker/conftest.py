"""Fixtures for the worker's integration tests: a served worker, and a push topic aimed at it."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Any

import pytest
from google.cloud import pubsub_v1

from tests.integration.worker.harness import PushTopic, WorkerHarness, push_topic


def _harness(request: pytest.FixtureRequest, *, cloud_run: bool) -> Iterator[WorkerHarness]:
    harness = WorkerHarness(
        project=request.getfixturevalue("firestore_project"),
        firestore_client=request.getfixturevalue("firestore_client"),
        storage_client=request.getfixturevalue("storage_client"),
        bucket=request.getfixturevalue("storage_bucket"),
        oidc_server=request.getfixturevalue("oidc_server"),
        cloud_run=cloud_run,
    )
    try:
        yield harness
    finally:
        harness.close()


@pytest.fixture
def worker(request: pytest.FixtureRequest) -> Iterator[WorkerHarness]:
    """The worker as on Cloud Run: behind the local front end, configured as behind IAM."""
    yield from _harness(request, cloud_run=True)


@pytest.fixture
def direct_worker(request: pytest.FixtureRequest) -> Iterator[WorkerHarness]:
    """The worker alone: callers reach the app directly and it verifies full signatures."""
    yield from _harness(request, cloud_run=False)


@pytest.fixture
def push(
    worker: WorkerHarness,
    publisher_client: pubsub_v1.PublisherClient,
    subscriber_client: pubsub_v1.SubscriberClient,
    pubsub_project: str,
) -> Iterator[Callable[..., PushTopic]]:
    """`push(**options)` creates the topic + push subscription (with dead letters) to the worker."""
    created: list[PushTopic] = []

    def make(**options: Any) -> PushTopic:
        topic = push_topic(
            publisher_client, subscriber_client, pubsub_project, worker.url, **options
        )
        created.append(topic)
        return topic

    yield make
    for topic in created:
        # Stop the session's emulator pushing to a server that is about to close.
        subscriber_client.delete_subscription(subscription=topic.subscription)
