"""Bad requests get production's status codes, and the emulator keeps serving afterwards."""

from __future__ import annotations

from typing import Any

import grpc
import pytest
from google.api_core import exceptions
from google.cloud import pubsub_v1
from google.protobuf import duration_pb2
from google.pubsub_v1 import types

NO_RETRY: Any = None


def _publish_raw(raw_publisher: Any, topic: str, messages: list[types.PubsubMessage]) -> Any:
    return raw_publisher.publish(topic=topic, messages=messages, retry=NO_RETRY, timeout=30)


def _create_sub(subscriber: pubsub_v1.SubscriberClient, request: dict[str, Any]) -> Any:
    return subscriber.create_subscription(request=request, retry=NO_RETRY)


def test_duplicate_topic_and_subscription_are_already_exists(
    publisher_client: pubsub_v1.PublisherClient,
    subscriber_client: pubsub_v1.SubscriberClient,
    pubsub_project: str,
    topic: str,
) -> None:
    sub = f"projects/{pubsub_project}/subscriptions/twice"
    _create_sub(subscriber_client, {"name": sub, "topic": topic})

    with pytest.raises(exceptions.AlreadyExists):
        publisher_client.create_topic(name=topic)
    with pytest.raises(exceptions.AlreadyExists):
        _create_sub(subscriber_client, {"name": sub, "topic": topic})


def test_unknown_resources_are_not_found(
    publisher_client: pubsub_v1.PublisherClient,
    subscriber_client: pubsub_v1.SubscriberClient,
    raw_publisher: Any,
    pubsub_project: str,
    topic: str,
) -> None:
    missing_topic = f"projects/{pubsub_project}/topics/nowhere"
    missing_sub = f"projects/{pubsub_project}/subscriptions/nobody"

    with pytest.raises(exceptions.NotFound):
        publisher_client.get_topic(topic=missing_topic)
    with pytest.raises(exceptions.NotFound):
        publisher_client.delete_topic(topic=missing_topic)
    with pytest.raises(exceptions.NotFound):
        _publish_raw(raw_publisher, missing_topic, [types.PubsubMessage(data=b"x")])
    with pytest.raises(exceptions.NotFound):
        subscriber_client.get_subscription(subscription=missing_sub)
    with pytest.raises(exceptions.NotFound):
        subscriber_client.pull(subscription=missing_sub, max_messages=1, retry=NO_RETRY)
    with pytest.raises(exceptions.NotFound):
        _create_sub(subscriber_client, {"name": missing_sub, "topic": missing_topic})


@pytest.mark.parametrize(
    "name",
    [
        "topics/jobs",
        pytest.param(
            "projects//topics/jobs",
            marks=pytest.mark.production_strict(
                "an empty project is refused: "
                "https://cloud.google.com/pubsub/docs/pubsub-basics#resource_names"
            ),
        ),
        "projects/p/topics/ab",
        "projects/p/topics/goog-x",
    ],
)
def test_malformed_topic_names_are_invalid_argument(
    publisher_client: pubsub_v1.PublisherClient, name: str
) -> None:
    with pytest.raises(exceptions.InvalidArgument):
        publisher_client.create_topic(name=name)


# Each emulator words it its own way; both name the setting.
ACK_DEADLINE = "ack deadline|ack_deadline"


@pytest.mark.parametrize(
    ("config", "fragment"),
    [
        pytest.param(
            {"ack_deadline_seconds": 9},
            ACK_DEADLINE,
            marks=pytest.mark.production_strict(
                "ack_deadline_seconds 10-600: "
                "https://cloud.google.com/pubsub/docs/reference/rpc/google.pubsub.v1#subscription"
            ),
        ),
        ({"ack_deadline_seconds": 601}, ACK_DEADLINE),
        (
            {"retry_policy": {"minimum_backoff": duration_pb2.Duration(seconds=601)}},
            "minimum_backoff",
        ),
        (
            {
                "retry_policy": {
                    "minimum_backoff": duration_pb2.Duration(seconds=20),
                    "maximum_backoff": duration_pb2.Duration(seconds=10),
                }
            },
            "minimum_backoff|maximum_backoff",
        ),
        ({"dead_letter_policy": {"max_delivery_attempts": 4}}, "max_delivery_attempts"),
        ({"dead_letter_policy": {"max_delivery_attempts": 101}}, "max_delivery_attempts"),
        ({"dead_letter_policy": {"max_delivery_attempts": 5}}, "not found|does not exist"),
        ({"push_config": {"push_endpoint": "ftp://example"}}, "push endpoint|push_endpoint"),
    ],
)
def test_out_of_range_subscription_settings_are_invalid_argument(
    subscriber_client: pubsub_v1.SubscriberClient,
    pubsub_project: str,
    topic: str,
    config: dict[str, Any],
    fragment: str,
) -> None:
    request = {"name": f"projects/{pubsub_project}/subscriptions/bad-sub", "topic": topic, **config}
    if "dead_letter_policy" in config:
        request["dead_letter_policy"] = {
            **config["dead_letter_policy"],
            "dead_letter_topic": f"projects/{pubsub_project}/topics/missing-dead",
        }
        if config["dead_letter_policy"]["max_delivery_attempts"] != 5:
            # Range errors are checked against an existing dead-letter topic.
            request["dead_letter_policy"]["dead_letter_topic"] = topic

    # Out-of-range dead-letter attempts are OUT_OF_RANGE and a missing dead-letter topic
    # NOT_FOUND, as Google's emulator answers (production documents the rules, not the codes).
    expected: type[Exception] = exceptions.InvalidArgument
    if "dead_letter_policy" in config:
        attempts = config["dead_letter_policy"]["max_delivery_attempts"]
        expected = exceptions.NotFound if attempts == 5 else exceptions.OutOfRange
    with pytest.raises(expected, match=fragment):
        _create_sub(subscriber_client, request)


@pytest.mark.production_strict("publish limits")
def test_publish_beyond_production_limits_is_invalid_argument_and_server_keeps_serving(
    raw_publisher: Any, topic: str
) -> None:
    """Production refuses a publish over 1,000 messages, 10 MB or 100 attributes
    (https://cloud.google.com/pubsub/quotas#resource_limits); Google's emulator takes it.
    """
    too_many = [types.PubsubMessage(data=b"x") for _ in range(1001)]
    too_big = [types.PubsubMessage(data=b"x" * 10_000_001)]
    too_many_attributes = [
        types.PubsubMessage(data=b"x", attributes={f"k{i}": "v" for i in range(101)})
    ]
    bad_requests = [[], too_many, too_big, too_many_attributes, [types.PubsubMessage()]]

    for messages in bad_requests:
        with pytest.raises(exceptions.InvalidArgument):
            _publish_raw(raw_publisher, topic, messages)
    response = _publish_raw(raw_publisher, topic, [types.PubsubMessage(data=b"fine")])

    assert len(response.message_ids) == 1


def test_bad_ack_requests_are_invalid_argument(
    subscriber_client: pubsub_v1.SubscriberClient, pubsub_project: str, topic: str
) -> None:
    sub = f"projects/{pubsub_project}/subscriptions/acks"
    _create_sub(subscriber_client, {"name": sub, "topic": topic})

    with pytest.raises(exceptions.InvalidArgument):
        subscriber_client.acknowledge(subscription=sub, ack_ids=["not-an-ack-id"], retry=NO_RETRY)
    with pytest.raises(exceptions.InvalidArgument):
        subscriber_client.modify_ack_deadline(
            subscription=sub, ack_ids=["1-1-1"], ack_deadline_seconds=601, retry=NO_RETRY
        )
    with pytest.raises(exceptions.InvalidArgument):
        subscriber_client.pull(subscription=sub, max_messages=0, retry=NO_RETRY)


@pytest.mark.production_strict("ack_deadline_seconds 10-600")
def test_update_subscription_applies_masked_fields_only(
    subscriber_client: pubsub_v1.SubscriberClient, pubsub_project: str, topic: str
) -> None:
    """Production takes ack_deadline_seconds 10-600 only
    (https://cloud.google.com/pubsub/docs/reference/rpc/google.pubsub.v1#subscription);
    Google's emulator takes 5.
    """
    sub = f"projects/{pubsub_project}/subscriptions/updatable"
    _create_sub(subscriber_client, {"name": sub, "topic": topic, "labels": {"team": "a"}})

    updated = subscriber_client.update_subscription(
        request={
            "subscription": {"name": sub, "ack_deadline_seconds": 42, "labels": {"team": "b"}},
            "update_mask": {"paths": ["ack_deadline_seconds"]},
        }
    )
    with pytest.raises(exceptions.InvalidArgument):
        subscriber_client.update_subscription(
            request={
                "subscription": {"name": sub, "ack_deadline_seconds": 5},
                "update_mask": {"paths": ["ack_deadline_seconds"]},
            },
            retry=NO_RETRY,
        )

    assert updated.ack_deadline_seconds == 42
    assert dict(updated.labels) == {"team": "a"}
    assert subscriber_client.get_subscription(subscription=sub).ack_deadline_seconds == 42


def test_deleting_a_topic_detaches_its_subscriptions(
    publisher_client: pubsub_v1.PublisherClient,
    subscriber_client: pubsub_v1.SubscriberClient,
    pubsub_project: str,
    topic: str,
) -> None:
    sub = f"projects/{pubsub_project}/subscriptions/orphan"
    _create_sub(subscriber_client, {"name": sub, "topic": topic})

    publisher_client.delete_topic(topic=topic)

    assert subscriber_client.get_subscription(subscription=sub).topic == "_deleted-topic_"
    with pytest.raises(exceptions.NotFound):
        publisher_client.get_topic(topic=topic)


def test_streaming_pull_on_a_missing_subscription_ends_with_not_found(
    subscriber_client: pubsub_v1.SubscriberClient, pubsub_project: str
) -> None:
    missing = f"projects/{pubsub_project}/subscriptions/never-created"

    future = subscriber_client.subscribe(missing, lambda message: message.ack())

    with pytest.raises(exceptions.NotFound):
        future.result(timeout=30)


def test_list_calls_page_through_every_resource(
    publisher_client: pubsub_v1.PublisherClient, pubsub_project: str
) -> None:
    created = [f"projects/{pubsub_project}/topics/topic-{i:02d}" for i in range(7)]
    for name in created:
        publisher_client.create_topic(name=name)

    pager = publisher_client.list_topics(
        request={"project": f"projects/{pubsub_project}", "page_size": 3}
    )

    assert [t.name for t in pager] == created


@pytest.mark.production_strict("an undecodable request is INVALID_ARGUMENT")
def test_undecodable_request_bytes_are_invalid_argument_and_server_keeps_serving(
    pubsub_emulator: Any, raw_publisher: Any, topic: str
) -> None:
    """Production answers a request body that is not the method's protobuf INVALID_ARGUMENT
    (https://cloud.google.com/apis/design/errors#handling_errors: a malformed request is
    INVALID_ARGUMENT); Google's emulator answers UNKNOWN.
    """
    with grpc.insecure_channel(pubsub_emulator.address) as channel:
        publish = channel.unary_unary(
            "/google.pubsub.v1.Publisher/Publish",
            request_serializer=lambda raw: raw,
            response_deserializer=lambda raw: raw,
        )
        with pytest.raises(grpc.RpcError) as caught:
            publish(b"\xff\xff\xff\xff garbage", timeout=10)

    assert caught.value.code() is grpc.StatusCode.INVALID_ARGUMENT
    response = _publish_raw(raw_publisher, topic, [types.PubsubMessage(data=b"still here")])
    assert len(response.message_ids) == 1


@pytest.mark.production_strict("a new subscription's state is ACTIVE")
def test_new_subscription_reports_production_defaults(
    subscriber_client: pubsub_v1.SubscriberClient, pubsub_project: str, topic: str
) -> None:
    """Production reports a new subscription's state as ACTIVE
    (https://cloud.google.com/pubsub/docs/reference/rpc/google.pubsub.v1#subscription);
    Google's emulator leaves it unset.
    """
    sub = f"projects/{pubsub_project}/subscriptions/defaults"
    created = _create_sub(subscriber_client, {"name": sub, "topic": topic})

    listed = list(subscriber_client.list_subscriptions(project=f"projects/{pubsub_project}"))

    assert created.ack_deadline_seconds == 10
    assert created.message_retention_duration.total_seconds() == 7 * 24 * 3600
    assert created.state == pubsub_v1.types.Subscription.State.ACTIVE
    assert [s.name for s in listed] == [sub]
