"""Resources shared by the Pub/Sub emulator tests: a topic per test, raw gapic clients."""

from __future__ import annotations

from collections.abc import Iterator

import grpc
import pytest
from google.cloud import pubsub_v1
from google.pubsub_v1.services.publisher import PublisherClient as GapicPublisher
from google.pubsub_v1.services.publisher.transports import PublisherGrpcTransport

from emulators.pubsub.server import PubsubEmulator


@pytest.fixture
def topic(pubsub_project: str, publisher_client: pubsub_v1.PublisherClient) -> str:
    name = f"projects/{pubsub_project}/topics/jobs-ready"
    publisher_client.create_topic(name=name)
    return name


@pytest.fixture
def raw_publisher(pubsub_emulator: PubsubEmulator) -> Iterator[GapicPublisher]:
    """The generated client: one PublishRequest per call, no client-side batching or checks."""
    channel = grpc.insecure_channel(
        pubsub_emulator.address, options=[("grpc.max_send_message_length", -1)]
    )
    client = GapicPublisher(transport=PublisherGrpcTransport(channel=channel))
    try:
        yield client
    finally:
        channel.close()
