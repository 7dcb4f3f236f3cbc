"""Pull and streaming-pull delivery through the real google-cloud-pubsub client."""

from __future__ import annotations

import queue
import threading
from collections import Counter
from collections.abc import Iterator

import pytest
from google.api_core import exceptions
from google.cloud import pubsub_v1
from google.protobuf import duration_pb2

from tests.integration.pubsub.polling import pull_some, wait_until


def _subscribe(
    subscriber: pubsub_v1.SubscriberClient, project: str, topic: str, sub_id: str, **config: object
) -> str:
    name = f"projects/{project}/subscriptions/{sub_id}"
    subscriber.create_subscription(request={"name": name, "topic": topic, **config})
    return name


def test_500_published_messages_are_all_pulled_once_acked(
    publisher_client: pubsub_v1.PublisherClient,
    subscriber_client: pubsub_v1.SubscriberClient,
    pubsub_project: str,
    topic: str,
) -> None:
    sub = _subscribe(subscriber_client, pubsub_project, topic, "bulk")
    futures = [publisher_client.publish(topic, f"job-{i}".encode()) for i in range(500)]
    message_ids = {f.result(timeout=30) for f in futures}

    received = pull_some(subscriber_client, sub, 500)

    assert len(message_ids) == 500
    assert {m.message.message_id for m in received} == message_ids
    assert sorted(m.message.data for m in received) == sorted(
        f"job-{i}".encode() for i in range(500)
    )
    assert all(m.message.publish_time.timestamp() > 0 for m in received)
    empty = subscriber_client.pull(subscription=sub, max_messages=10, return_immediately=True)
    assert list(empty.received_messages) == []


def test_subscribe_receives_all_50_of_50_messages(
    publisher_client: pubsub_v1.PublisherClient,
    subscriber_client: pubsub_v1.SubscriberClient,
    pubsub_project: str,
    topic: str,
) -> None:
    sub = _subscribe(subscriber_client, pubsub_project, topic, "streaming")
    for i in range(50):
        publisher_client.publish(topic, f"job-{i}".encode(), kind="test").result(timeout=30)
    seen: Counter[bytes] = Counter()
    lock = threading.Lock()

    def on_message(message: pubsub_v1.subscriber.message.Message) -> None:
        assert message.attributes["kind"] == "test"
        with lock:
            seen[message.data] += 1
        message.ack()

    future = subscriber_client.subscribe(sub, on_message)
    try:
        wait_until(lambda: len(seen) == 50, what="50 distinct messages")
    finally:
        future.cancel()
        future.result(timeout=10)

    assert set(seen) == {f"job-{i}".encode() for i in range(50)}


def test_message_whose_ack_deadline_expires_is_redelivered(
    publisher_client: pubsub_v1.PublisherClient,
    subscriber_client: pubsub_v1.SubscriberClient,
    pubsub_project: str,
    topic: str,
) -> None:
    sub = _subscribe(subscriber_client, pubsub_project, topic, "expiring")
    message_id = publisher_client.publish(topic, b"slow-worker").result(timeout=30)
    (first,) = pull_some(subscriber_client, sub, 1, ack=False)
    # A 1 s deadline (ModifyAckDeadline allows 0-600 s) so the lease lapses quickly.
    subscriber_client.modify_ack_deadline(
        subscription=sub, ack_ids=[first.ack_id], ack_deadline_seconds=1
    )

    (second,) = pull_some(subscriber_client, sub, 1)

    assert second.message.message_id == message_id == first.message.message_id
    assert second.ack_id != first.ack_id


def test_acked_message_is_not_redelivered_after_its_deadline(
    publisher_client: pubsub_v1.PublisherClient,
    subscriber_client: pubsub_v1.SubscriberClient,
    pubsub_project: str,
    topic: str,
) -> None:
    sub = _subscribe(subscriber_client, pubsub_project, topic, "acked")
    publisher_client.publish(topic, b"done").result(timeout=30)
    (first,) = pull_some(subscriber_client, sub, 1, ack=False)
    subscriber_client.modify_ack_deadline(
        subscription=sub, ack_ids=[first.ack_id], ack_deadline_seconds=1
    )
    subscriber_client.acknowledge(subscription=sub, ack_ids=[first.ack_id])

    # The server-side wait of Pull (1 s per call) outlasts the 1 s deadline.
    later = [subscriber_client.pull(subscription=sub, max_messages=5) for _ in range(2)]

    assert [list(r.received_messages) for r in later] == [[], []]


def test_nacked_message_is_redelivered(
    publisher_client: pubsub_v1.PublisherClient,
    subscriber_client: pubsub_v1.SubscriberClient,
    pubsub_project: str,
    topic: str,
) -> None:
    sub = _subscribe(subscriber_client, pubsub_project, topic, "nacked")
    message_id = publisher_client.publish(topic, b"retry-me").result(timeout=30)
    (first,) = pull_some(subscriber_client, sub, 1, ack=False)
    subscriber_client.modify_ack_deadline(
        subscription=sub, ack_ids=[first.ack_id], ack_deadline_seconds=0
    )

    (second,) = pull_some(subscriber_client, sub, 1)

    assert second.message.message_id == message_id


def test_nack_through_subscribe_redelivers_to_the_callback(
    publisher_client: pubsub_v1.PublisherClient,
    subscriber_client: pubsub_v1.SubscriberClient,
    pubsub_project: str,
    topic: str,
) -> None:
    sub = _subscribe(subscriber_client, pubsub_project, topic, "stream-nack")
    publisher_client.publish(topic, b"flaky").result(timeout=30)
    deliveries: list[str] = []

    def on_message(message: pubsub_v1.subscriber.message.Message) -> None:
        deliveries.append(message.message_id)
        if len(deliveries) < 3:
            message.nack()
        else:
            message.ack()

    future = subscriber_client.subscribe(sub, on_message)
    try:
        wait_until(lambda: len(deliveries) >= 3, what="three deliveries")
    finally:
        future.cancel()
        future.result(timeout=10)

    assert len(set(deliveries)) == 1


@pytest.mark.production_strict("dead-letter topics")
def test_message_failing_max_attempts_lands_in_dead_letter_subscription_with_count(
    publisher_client: pubsub_v1.PublisherClient,
    subscriber_client: pubsub_v1.SubscriberClient,
    pubsub_project: str,
    topic: str,
) -> None:
    """Production forwards a message to the dead-letter topic after max_delivery_attempts and
    counts attempts (https://cloud.google.com/pubsub/docs/handling-failures); Google's
    emulator does neither.
    """
    dead_topic = f"projects/{pubsub_project}/topics/jobs-dead"
    publisher_client.create_topic(name=dead_topic)
    dead_sub = _subscribe(subscriber_client, pubsub_project, dead_topic, "dead-letters")
    sub = _subscribe(
        subscriber_client,
        pubsub_project,
        topic,
        "poison",
        dead_letter_policy={"dead_letter_topic": dead_topic, "max_delivery_attempts": 5},
        retry_policy={
            "minimum_backoff": duration_pb2.Duration(nanos=10_000_000),
            "maximum_backoff": duration_pb2.Duration(nanos=50_000_000),
        },
    )
    message_id = publisher_client.publish(topic, b"poison", job="j-1").result(timeout=30)

    attempts = []
    for _ in range(5):
        (received,) = pull_some(subscriber_client, sub, 1, ack=False)
        attempts.append(received.delivery_attempt)
        subscriber_client.modify_ack_deadline(
            subscription=sub, ack_ids=[received.ack_id], ack_deadline_seconds=0
        )
    (dead,) = pull_some(subscriber_client, dead_sub, 1)

    assert attempts == [1, 2, 3, 4, 5]
    assert dead.message.data == b"poison"
    attributes = dict(dead.message.attributes)
    assert attributes["job"] == "j-1"
    assert attributes["CloudPubSubDeadLetterSourceDeliveryCount"] == "5"
    assert attributes["CloudPubSubDeadLetterSourceSubscription"] == "poison"
    assert attributes["CloudPubSubDeadLetterSourceSubscriptionProject"] == pubsub_project
    assert "CloudPubSubDeadLetterSourceTopicPublishTime" in attributes
    assert dead.message.message_id != message_id
    source = subscriber_client.pull(subscription=sub, max_messages=5, return_immediately=True)
    assert list(source.received_messages) == []


def test_projects_are_separated_by_resource_name(
    publisher_client: pubsub_v1.PublisherClient,
    subscriber_client: pubsub_v1.SubscriberClient,
    pubsub_project: str,
    topic: str,
) -> None:
    other_project = f"{pubsub_project}-b"
    other_topic = f"projects/{other_project}/topics/jobs-ready"
    publisher_client.create_topic(name=other_topic)
    sub = _subscribe(subscriber_client, pubsub_project, topic, "mine")
    other_sub = _subscribe(subscriber_client, other_project, other_topic, "theirs")
    publisher_client.publish(topic, b"for-a").result(timeout=30)

    (received,) = pull_some(subscriber_client, sub, 1)
    listed = [t.name for t in publisher_client.list_topics(project=f"projects/{pubsub_project}")]
    other = subscriber_client.pull(subscription=other_sub, max_messages=5, return_immediately=True)

    assert received.message.data == b"for-a"
    assert listed == [topic]
    assert list(other.received_messages) == []
    assert list(publisher_client.list_topic_subscriptions(topic=topic)) == [sub]


def test_subscribe_with_small_flow_control_still_receives_everything(
    publisher_client: pubsub_v1.PublisherClient,
    subscriber_client: pubsub_v1.SubscriberClient,
    pubsub_project: str,
    topic: str,
) -> None:
    sub = _subscribe(subscriber_client, pubsub_project, topic, "throttled")
    for i in range(30):
        publisher_client.publish(topic, f"m{i}".encode())
    publisher_client.publish(topic, b"last").result(timeout=30)
    seen: set[bytes] = set()
    lock = threading.Lock()

    def on_message(message: pubsub_v1.subscriber.message.Message) -> None:
        with lock:
            seen.add(message.data)
        message.ack()

    future = subscriber_client.subscribe(
        sub, on_message, flow_control=pubsub_v1.types.FlowControl(max_messages=2)
    )
    try:
        wait_until(lambda: len(seen) == 31, what="31 distinct messages")
    finally:
        future.cancel()
        future.result(timeout=10)

    assert b"last" in seen


@pytest.mark.production_strict("messages up to 10 MB delivered whole")
def test_large_messages_are_delivered_whole(
    publisher_client: pubsub_v1.PublisherClient,
    subscriber_client: pubsub_v1.SubscriberClient,
    pubsub_project: str,
    topic: str,
) -> None:
    """Production delivers messages up to 10 MB (https://cloud.google.com/pubsub/quotas);
    Google's emulator packs several into one pull answer larger than the client's 4 MiB
    emulator channel accepts.
    """
    sub = _subscribe(subscriber_client, pubsub_project, topic, "large")
    payloads = [bytes([i]) * 4_000_000 for i in range(3)]
    for payload in payloads:
        publisher_client.publish(topic, payload).result(timeout=30)

    received = pull_some(subscriber_client, sub, 3)

    assert sorted(m.message.data for m in received) == payloads


@pytest.mark.production_strict("streaming-pull flow control")
def test_streaming_pull_holds_back_beyond_the_streams_outstanding_limit(
    publisher_client: pubsub_v1.PublisherClient,
    subscriber_client: pubsub_v1.SubscriberClient,
    pubsub_project: str,
    topic: str,
) -> None:
    """Production sends a stream no more than its max_outstanding_messages unacknowledged
    (https://cloud.google.com/pubsub/docs/reference/rpc/google.pubsub.v1#streamingpullrequest);
    Google's emulator ignores the limit.
    """
    sub = _subscribe(subscriber_client, pubsub_project, topic, "raw-stream")
    for i in range(5):
        publisher_client.publish(topic, f"m{i}".encode()).result(timeout=30)
    outgoing: queue.Queue[pubsub_v1.types.StreamingPullRequest | None] = queue.Queue()
    outgoing.put(
        pubsub_v1.types.StreamingPullRequest(
            subscription=sub, stream_ack_deadline_seconds=60, max_outstanding_messages=2
        )
    )

    def requests() -> Iterator[pubsub_v1.types.StreamingPullRequest]:
        while (request := outgoing.get()) is not None:
            yield request

    # The generated method: one raw bidi stream, no client-side flow control or leasing.
    responses = subscriber_client.api.streaming_pull(requests=requests())
    try:
        first = list(next(responses).received_messages)
        outgoing.put(pubsub_v1.types.StreamingPullRequest(ack_ids=[m.ack_id for m in first]))
        second = list(next(responses).received_messages)
    finally:
        outgoing.put(None)
        responses.cancel()

    assert len(first) == 2
    assert len(second) == 2
    assert not {m.message.message_id for m in first} & {m.message.message_id for m in second}


def test_ack_id_of_one_subscription_does_not_ack_another(
    publisher_client: pubsub_v1.PublisherClient,
    subscriber_client: pubsub_v1.SubscriberClient,
    pubsub_project: str,
    topic: str,
) -> None:
    """Another subscription's ack ID is malformed for this one: INVALID_ARGUMENT ("Some
    acknowledgement ids in the request were invalid", as production answers), as Google's
    emulator answers too, and the message stays unacknowledged there."""
    first = _subscribe(subscriber_client, pubsub_project, topic, "first")
    second = _subscribe(subscriber_client, pubsub_project, topic, "second")
    message_id = publisher_client.publish(topic, b"fan-out").result(timeout=30)
    (from_first,) = pull_some(subscriber_client, first, 1, ack=False)

    with pytest.raises(exceptions.InvalidArgument):
        subscriber_client.acknowledge(subscription=second, ack_ids=[from_first.ack_id])
    subscriber_client.acknowledge(subscription=first, ack_ids=[from_first.ack_id])
    (from_second,) = pull_some(subscriber_client, second, 1)

    assert from_second.message.message_id == message_id


def test_concurrent_publishers_and_two_subscribers_lose_no_message(
    publisher_client: pubsub_v1.PublisherClient,
    subscriber_client: pubsub_v1.SubscriberClient,
    pubsub_project: str,
    topic: str,
) -> None:
    sub = _subscribe(subscriber_client, pubsub_project, topic, "shared-work")
    published: list[str] = []
    received: set[str] = set()
    lock = threading.Lock()

    def publish_many(worker: int) -> None:
        futures = [publisher_client.publish(topic, f"{worker}-{i}".encode()) for i in range(1000)]
        ids = [f.result(timeout=60) for f in futures]
        with lock:
            published.extend(ids)

    def on_message(message: pubsub_v1.subscriber.message.Message) -> None:
        with lock:
            received.add(message.message_id)
        message.ack()

    second_client = pubsub_v1.SubscriberClient()
    streams = [
        subscriber_client.subscribe(sub, on_message),
        second_client.subscribe(sub, on_message),
    ]
    publishers = [threading.Thread(target=publish_many, args=(w,)) for w in range(4)]
    try:
        for thread in publishers:
            thread.start()
        for thread in publishers:
            thread.join(timeout=60)
        wait_until(lambda: len(received) >= 4000, timeout_s=60, what="4000 distinct messages")
    finally:
        for stream in streams:
            stream.cancel()
            stream.result(timeout=10)
        second_client.close()

    assert len(published) == 4000
    assert received == set(published)
