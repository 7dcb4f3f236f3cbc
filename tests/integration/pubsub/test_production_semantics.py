"""Production behaviours the project relies on that the other Pub/Sub tests do not pin down
(docs/pubsub-emulator.md maps every behaviour to its test)."""

from __future__ import annotations

import time

import pytest
from google.api_core import exceptions
from google.cloud import pubsub_v1
from google.protobuf import duration_pb2

from emulators.pubsub.server import start
from tests.integration.pubsub.polling import pull_some


def _subscription(
    subscriber: pubsub_v1.SubscriberClient, project: str, topic: str, sub_id: str, **config: object
) -> str:
    name = f"projects/{project}/subscriptions/{sub_id}"
    subscriber.create_subscription(request={"name": name, "topic": topic, **config})
    return name


def _nothing_ready(subscriber: pubsub_v1.SubscriberClient, subscription: str) -> bool:
    response = subscriber.pull(subscription=subscription, max_messages=10, return_immediately=True)
    return list(response.received_messages) == []


def test_a_message_reaches_only_subscriptions_attached_when_it_was_published(
    publisher_client: pubsub_v1.PublisherClient,
    subscriber_client: pubsub_v1.SubscriberClient,
    pubsub_project: str,
    topic: str,
) -> None:
    early = _subscription(subscriber_client, pubsub_project, topic, "early")
    publisher_client.publish(topic, b"before").result(timeout=30)
    late = _subscription(subscriber_client, pubsub_project, topic, "late")
    publisher_client.publish(topic, b"after").result(timeout=30)
    assert sorted(m.message.data for m in pull_some(subscriber_client, early, 2)) == [
        b"after",
        b"before",
    ]
    assert [m.message.data for m in pull_some(subscriber_client, late, 1)] == [b"after"]
    assert _nothing_ready(subscriber_client, late)


def test_delivery_attempt_is_zero_without_a_dead_letter_policy(
    publisher_client: pubsub_v1.PublisherClient,
    subscriber_client: pubsub_v1.SubscriberClient,
    pubsub_project: str,
    topic: str,
) -> None:
    sub = _subscription(subscriber_client, pubsub_project, topic, "plain")
    publisher_client.publish(topic, b"m").result(timeout=30)
    (first,) = pull_some(subscriber_client, sub, 1, ack=False)
    subscriber_client.modify_ack_deadline(
        subscription=sub, ack_ids=[first.ack_id], ack_deadline_seconds=0
    )
    (again,) = pull_some(subscriber_client, sub, 1)
    assert (first.delivery_attempt, again.delivery_attempt) == (0, 0)


def test_an_expired_lease_counts_as_a_delivery_attempt(
    publisher_client: pubsub_v1.PublisherClient,
    subscriber_client: pubsub_v1.SubscriberClient,
    pubsub_project: str,
    topic: str,
) -> None:
    dead_topic = f"projects/{pubsub_project}/topics/dead-letters"
    publisher_client.create_topic(name=dead_topic)
    sub = _subscription(
        subscriber_client,
        pubsub_project,
        topic,
        "leased",
        dead_letter_policy={"dead_letter_topic": dead_topic, "max_delivery_attempts": 5},
    )
    publisher_client.publish(topic, b"m").result(timeout=30)
    (first,) = pull_some(subscriber_client, sub, 1, ack=False)
    # Let the lease run out instead of nacking: 1 s is the shortest deadline ModifyAckDeadline
    # accepts above 0.
    subscriber_client.modify_ack_deadline(
        subscription=sub, ack_ids=[first.ack_id], ack_deadline_seconds=1
    )
    (again,) = pull_some(subscriber_client, sub, 1)
    assert (first.delivery_attempt, again.delivery_attempt) == (1, 2)


@pytest.mark.production_strict("retry policy backoff")
def test_a_nacked_message_waits_out_the_minimum_backoff_before_redelivery(
    publisher_client: pubsub_v1.PublisherClient,
    subscriber_client: pubsub_v1.SubscriberClient,
    pubsub_project: str,
    topic: str,
) -> None:
    """Production waits out the retry policy's minimum_backoff before redelivering a nacked
    message (https://cloud.google.com/pubsub/docs/handling-failures); Google's emulator
    redelivers at once.
    """
    sub = _subscription(
        subscriber_client,
        pubsub_project,
        topic,
        "backoff",
        retry_policy={
            "minimum_backoff": duration_pb2.Duration(seconds=3),
            "maximum_backoff": duration_pb2.Duration(seconds=10),
        },
    )
    publisher_client.publish(topic, b"m").result(timeout=30)
    (first,) = pull_some(subscriber_client, sub, 1, ack=False)
    nacked_at = time.monotonic()
    subscriber_client.modify_ack_deadline(
        subscription=sub, ack_ids=[first.ack_id], ack_deadline_seconds=0
    )
    assert _nothing_ready(subscriber_client, sub) or time.monotonic() - nacked_at >= 3
    (again,) = pull_some(subscriber_client, sub, 1)
    assert time.monotonic() - nacked_at >= 3 - 0.05  # never before the backoff
    assert again.message.message_id == first.message.message_id


def test_dead_letters_to_a_topic_without_a_subscription_are_lost(
    publisher_client: pubsub_v1.PublisherClient,
    subscriber_client: pubsub_v1.SubscriberClient,
    pubsub_project: str,
    topic: str,
) -> None:
    """Why infra/ always attaches a subscription to the dead-letter topic."""
    dead_topic = f"projects/{pubsub_project}/topics/dead-letters"
    publisher_client.create_topic(name=dead_topic)
    sub = _subscription(
        subscriber_client,
        pubsub_project,
        topic,
        "poison",
        dead_letter_policy={"dead_letter_topic": dead_topic, "max_delivery_attempts": 5},
        retry_policy={"minimum_backoff": duration_pb2.Duration(), "maximum_backoff": {}},
    )
    publisher_client.publish(topic, b"poison").result(timeout=30)
    for _ in range(5):
        (received,) = pull_some(subscriber_client, sub, 1, ack=False)
        subscriber_client.modify_ack_deadline(
            subscription=sub, ack_ids=[received.ack_id], ack_deadline_seconds=0
        )
    time.sleep(0.2)  # give an (incorrect) sixth delivery the chance to appear
    assert _nothing_ready(subscriber_client, sub)
    attached_later = _subscription(subscriber_client, pubsub_project, dead_topic, "too-late")
    assert _nothing_ready(subscriber_client, attached_later)


def test_an_injected_acknowledge_failure_leaves_the_message_to_come_back(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    with start() as emulator:
        monkeypatch.setenv("PUBSUB_EMULATOR_HOST", emulator.address)
        publisher, subscriber = pubsub_v1.PublisherClient(), pubsub_v1.SubscriberClient()
        topic, sub = "projects/faults/topics/jobs", "projects/faults/subscriptions/jobs"
        publisher.create_topic(name=topic)
        subscriber.create_subscription(name=sub, topic=topic)
        publisher.publish(topic, b"m").result(timeout=30)
        (first,) = pull_some(subscriber, sub, 1, ack=False)
        emulator.inject_fault(method="Acknowledge", status="UNAVAILABLE", count=1)
        with pytest.raises(exceptions.ServiceUnavailable):
            subscriber.acknowledge(subscription=sub, ack_ids=[first.ack_id], retry=None)
        subscriber.modify_ack_deadline(
            subscription=sub, ack_ids=[first.ack_id], ack_deadline_seconds=1
        )
        (again,) = pull_some(subscriber, sub, 1)  # the ack never arrived: it comes back
        assert again.message.message_id == first.message.message_id
