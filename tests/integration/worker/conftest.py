"""Fixtures for the worker's integration tests: a served worker, and a push topic aimed at it."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Any

import google.cloud.storage as storage
import pytest
from google.cloud import firestore, pubsub_v1

from tests.integration.worker.harness import PushTopic, WorkerHarness, push_topic


@pytest.fixture
def worker(
    firestore_project: str,
    firestore_client: firestore.Client,
    storage_client: storage.Client,
    storage_bucket: storage.Bucket,
    oidc_server: Any,
) -> Iterator[WorkerHarness]:
    harness = WorkerHarness(
        project=firestore_project,
        firestore_client=firestore_client,
        storage_client=storage_client,
        bucket=storage_bucket,
        oidc_server=oidc_server,
    )
    try:
        yield harness
    finally:
        harness.close()


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
