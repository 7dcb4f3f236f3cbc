"""Push delivery: production envelope, verifiable OIDC tokens, backoff, dead letters, limits."""

from __future__ import annotations

import base64
import itertools
import json
from collections.abc import Callable, Iterator
from typing import Any

import grpc
import pytest
from google.auth.transport.requests import Request
from google.cloud import pubsub_v1
from google.oauth2 import id_token
from google.protobuf import duration_pb2
from google.pubsub_v1.services.publisher import PublisherClient as GapicPublisher
from google.pubsub_v1.services.publisher.transports import PublisherGrpcTransport
from google.pubsub_v1.services.subscriber import SubscriberClient as GapicSubscriber
from google.pubsub_v1.services.subscriber.transports import SubscriberGrpcTransport

from emulators.pubsub.server import PubsubEmulator, start
from tests.integration.pubsub.endpoint import RecordingEndpoint, always
from tests.integration.pubsub.polling import pull_some, wait_until

PUSHER = "pusher@deferred-jobs.iam.gserviceaccount.com"

SubscriptionFactory = Callable[..., str]


@pytest.fixture
def push_subscription(
    subscriber_client: pubsub_v1.SubscriberClient, pubsub_project: str, topic: str
) -> Iterator[SubscriptionFactory]:
    """Create push subscriptions on `topic`; they are deleted after the test so the session's
    emulator stops pushing to this test's endpoint."""
    created: list[str] = []

    def create(sub_id: str, **config: Any) -> str:
        name = f"projects/{pubsub_project}/subscriptions/{sub_id}"
        subscriber_client.create_subscription(request={"name": name, "topic": topic, **config})
        created.append(name)
        return name

    yield create
    for name in created:
        subscriber_client.delete_subscription(subscription=name)


def _ms(value: int) -> duration_pb2.Duration:
    seconds, millis = divmod(value, 1000)
    return duration_pb2.Duration(seconds=seconds, nanos=millis * 1_000_000)


@pytest.mark.production_strict("OIDC token on push")
def test_push_posts_production_envelope_with_oidc_token_for_the_audience(
    publisher_client: pubsub_v1.PublisherClient,
    push_subscription: SubscriptionFactory,
    topic: str,
    oidc_server: Any,
    pubsub_emulator: PubsubEmulator,
) -> None:
    """Production push with `oidc_token` sends a Google-signed ID token in `Authorization`
    (https://cloud.google.com/pubsub/docs/authenticate-push-subscriptions); Google's
    emulator sends none, so the worker behind its Cloud Run front end answers 403.
    """
    audience = "https://worker.deferred-jobs.example/push"
    with RecordingEndpoint() as endpoint:
        sub = push_subscription(
            "worker-push",
            push_config={
                "push_endpoint": endpoint.url,
                "oidc_token": {"service_account_email": PUSHER, "audience": audience},
            },
        )
        message_id = publisher_client.publish(topic, b"job-42", job_id="42").result(timeout=30)
        wait_until(lambda: endpoint.count() >= 1, what="a push request")

    (request,) = endpoint.requests
    body = json.loads(request.body)
    message = body["message"]
    assert body["subscription"] == sub
    assert "deliveryAttempt" not in body
    assert base64.b64decode(message["data"]) == b"job-42"
    assert message["attributes"] == {"job_id": "42"}
    assert message["messageId"] == message["message_id"] == message_id
    assert message["publishTime"] == message["publish_time"]
    assert request.headers["Content-Type"] == "application/json"
    scheme, token = request.headers["Authorization"].split(" ", 1)
    assert scheme == "Bearer"
    http = Request()
    for certs_url in (oidc_server.certs_url, pubsub_emulator.certs_url):
        claims = id_token.verify_token(token, http, audience=audience, certs_url=certs_url)
        assert claims["email"] == PUSHER
        assert claims["email_verified"] is True
        assert claims["iss"] == "https://accounts.google.com"
    with pytest.raises(ValueError):
        id_token.verify_token(
            token, http, audience="https://someone-else.example", certs_url=oidc_server.certs_url
        )


@pytest.mark.production_strict("OIDC token on push")
def test_push_token_audience_defaults_to_the_endpoint_url(
    publisher_client: pubsub_v1.PublisherClient,
    push_subscription: SubscriptionFactory,
    topic: str,
    oidc_server: Any,
) -> None:
    """Production push with `oidc_token` sends a Google-signed ID token in `Authorization`
    (https://cloud.google.com/pubsub/docs/authenticate-push-subscriptions); Google's
    emulator sends none, so the worker behind its Cloud Run front end answers 403.
    """
    with RecordingEndpoint() as endpoint:
        push_subscription(
            "default-audience",
            push_config={
                "push_endpoint": endpoint.url,
                "oidc_token": {"service_account_email": PUSHER},
            },
        )
        publisher_client.publish(topic, b"x").result(timeout=30)
        wait_until(lambda: endpoint.count() >= 1, what="a push request")

    token = endpoint.requests[0].headers["Authorization"].removeprefix("Bearer ")
    claims = id_token.verify_token(
        token, Request(), audience=endpoint.url, certs_url=oidc_server.certs_url
    )
    assert claims["aud"] == endpoint.url


@pytest.mark.production_strict("push body in proto3 JSON: no empty data")
def test_push_without_oidc_token_sends_no_authorization_header(
    publisher_client: pubsub_v1.PublisherClient, push_subscription: SubscriptionFactory, topic: str
) -> None:
    """Production's push body is the message in proto3 JSON, which leaves out an empty `data`
    (https://cloud.google.com/pubsub/docs/push#receive_push shows the body;
    https://protobuf.dev/programming-guides/proto3/#json omits default values); Google's
    emulator sends `"data": ""`.
    """
    with RecordingEndpoint() as endpoint:
        push_subscription("no-auth", push_config={"push_endpoint": endpoint.url})
        publisher_client.publish(topic, b"", only="attributes").result(timeout=30)
        wait_until(lambda: endpoint.count() >= 1, what="a push request")

    assert "Authorization" not in endpoint.requests[0].headers
    message = json.loads(endpoint.requests[0].body)["message"]
    assert "data" not in message
    assert message["attributes"] == {"only": "attributes"}


# How early the emulator's timer may fire a redelivery relative to its backoff.
_TIMER_TOLERANCE_S = 0.05


@pytest.mark.production_strict("dead-letter topics and delivery attempts")
def test_push_500s_are_retried_with_growing_gaps_then_dead_lettered(
    publisher_client: pubsub_v1.PublisherClient,
    subscriber_client: pubsub_v1.SubscriberClient,
    push_subscription: SubscriptionFactory,
    pubsub_project: str,
    topic: str,
) -> None:
    """Production forwards a message to the dead-letter topic after max_delivery_attempts and
    counts attempts (https://cloud.google.com/pubsub/docs/handling-failures); Google's
    emulator does neither.
    """
    dead_topic = f"projects/{pubsub_project}/topics/jobs-dead"
    dead_sub = f"projects/{pubsub_project}/subscriptions/dead-letters"
    publisher_client.create_topic(name=dead_topic)
    subscriber_client.create_subscription(name=dead_sub, topic=dead_topic)
    with RecordingEndpoint(always(500)) as endpoint:
        push_subscription(
            "failing-worker",
            push_config={"push_endpoint": endpoint.url},
            retry_policy={"minimum_backoff": _ms(200), "maximum_backoff": _ms(5000)},
            dead_letter_policy={"dead_letter_topic": dead_topic, "max_delivery_attempts": 5},
        )
        publisher_client.publish(topic, b"doomed").result(timeout=30)
        (dead,) = pull_some(subscriber_client, dead_sub, 1)
        attempts_seen = endpoint.count()

    arrivals = [r.at for r in endpoint.requests]
    gaps = [later - earlier for earlier, later in itertools.pairwise(arrivals)]
    bodies = [json.loads(r.body) for r in endpoint.requests]
    assert attempts_seen == 5
    assert [b["deliveryAttempt"] for b in bodies] == [1, 2, 3, 4, 5]
    # Backoff doubles from 200 ms: the gap after failed attempt n is at least 0.2 * 2**(n-1) s.
    # A loaded machine may stretch any gap (so strict pairwise growth could fail by chance),
    # but it can never shorten one below its backoff; the tolerance covers timer granularity.
    floors = [0.2 * 2**n for n in range(4)]  # 0.2, 0.4, 0.8, 1.6 s
    assert len(gaps) == len(floors)
    assert all(
        gap >= floor - _TIMER_TOLERANCE_S for gap, floor in zip(gaps, floors, strict=True)
    ), gaps
    # And the backoff grows: the last wait (at least 1.6 s) is longer than the first (0.2 s
    # plus whatever scheduling delay the machine adds).
    assert gaps[-1] > gaps[0], gaps
    assert dead.message.data == b"doomed"
    assert dead.message.attributes["CloudPubSubDeadLetterSourceDeliveryCount"] == "5"
    assert dead.message.attributes["CloudPubSubDeadLetterSourceSubscription"] == "failing-worker"


@pytest.mark.production_strict("push success statuses")
def test_push_acks_on_every_production_success_status(
    publisher_client: pubsub_v1.PublisherClient, push_subscription: SubscriptionFactory, topic: str
) -> None:
    """Production push acknowledges only on 102, 200, 201, 202 and 204
    (https://cloud.google.com/pubsub/docs/push#receive_push); Google's emulator sends a
    message again after one of them.
    """
    statuses = [200, 201, 202, 204, 429, 204]
    with RecordingEndpoint(lambda n: (statuses[n - 1] if n <= len(statuses) else 500, 0.0)) as ep:
        push_subscription(
            "statuses",
            push_config={"push_endpoint": ep.url},
            retry_policy={"minimum_backoff": _ms(0), "maximum_backoff": _ms(0)},
        )
        for i in range(5):
            publisher_client.publish(topic, f"m{i}".encode()).result(timeout=30)
        wait_until(lambda: ep.count() >= 6, what="six push requests")
        # A seventh request would mean a 2xx was not taken as an ack.
        with pytest.raises(AssertionError):
            wait_until(lambda: ep.count() >= 7, timeout_s=0.5, what="no extra request")

    assert ep.count() == 6


def test_no_wrapper_push_sends_raw_data_and_metadata_headers(
    publisher_client: pubsub_v1.PublisherClient, push_subscription: SubscriptionFactory, topic: str
) -> None:
    with RecordingEndpoint() as with_meta, RecordingEndpoint() as without_meta:
        sub = push_subscription(
            "raw-with-meta",
            push_config={"push_endpoint": with_meta.url, "no_wrapper": {"write_metadata": True}},
        )
        push_subscription(
            "raw-plain",
            push_config={
                "push_endpoint": without_meta.url,
                "no_wrapper": {"write_metadata": False},
            },
        )
        message_id = publisher_client.publish(topic, b'{"job": 7}', kind="jobs").result(timeout=30)
        wait_until(lambda: with_meta.count() >= 1 and without_meta.count() >= 1, what="pushes")

    meta = {k.lower(): v for k, v in with_meta.requests[0].headers.items()}
    plain = {k.lower(): v for k, v in without_meta.requests[0].headers.items()}
    assert with_meta.requests[0].body == b'{"job": 7}'
    assert without_meta.requests[0].body == b'{"job": 7}'
    assert meta["x-goog-pubsub-message-id"] == message_id
    assert meta["x-goog-pubsub-subscription-name"] == sub
    assert "x-goog-pubsub-publish-time" in meta
    assert meta["kind"] == "jobs"
    assert not any(k.startswith("x-goog-pubsub") for k in plain)
    assert "kind" not in plain


@pytest.fixture
def limited_emulator(oidc_server: Any) -> Iterator[PubsubEmulator]:
    with start(issuer=oidc_server.issuer, max_push_concurrency=3) as emulator:
        yield emulator


def _gapic_clients(
    emulator: PubsubEmulator,
) -> tuple[grpc.Channel, GapicPublisher, GapicSubscriber]:
    channel = grpc.insecure_channel(emulator.address)
    publisher = GapicPublisher(transport=PublisherGrpcTransport(channel=channel))
    subscriber = GapicSubscriber(transport=SubscriberGrpcTransport(channel=channel))
    return channel, publisher, subscriber


def test_push_concurrency_per_subscription_stays_within_the_limit(
    limited_emulator: PubsubEmulator,
) -> None:
    channel, publisher, subscriber = _gapic_clients(limited_emulator)
    topic = "projects/limits-p/topics/bursty"
    with channel, RecordingEndpoint(always(204, delay_s=0.2)) as endpoint:
        publisher.create_topic(name=topic)
        subscriber.create_subscription(
            name="projects/limits-p/subscriptions/slow-worker",
            topic=topic,
            push_config={"push_endpoint": endpoint.url},
        )
        publisher.publish(topic=topic, messages=[{"data": f"m{i}".encode()} for i in range(12)])
        wait_until(
            lambda: limited_emulator.stats()["acknowledged"] == 12, what="12 acknowledged pushes"
        )

    assert endpoint.count() == 12
    assert endpoint.max_concurrent == 3
    assert limited_emulator.stats()["push_attempts_by_status"] == {"204": 12}


def test_unreachable_push_endpoint_counts_connection_errors_and_keeps_the_message(
    limited_emulator: PubsubEmulator,
) -> None:
    channel, publisher, subscriber = _gapic_clients(limited_emulator)
    topic = "projects/limits-p/topics/unreachable"
    with RecordingEndpoint() as endpoint:
        dead_url = endpoint.url  # closed when the block ends: nothing listens there any more
    with channel:
        publisher.create_topic(name=topic)
        subscriber.create_subscription(
            name="projects/limits-p/subscriptions/gone",
            topic=topic,
            push_config={"push_endpoint": dead_url},
        )
        publisher.publish(topic=topic, messages=[{"data": b"lost?"}])
        wait_until(
            lambda: (
                limited_emulator.stats()["push_attempts_by_status"].get("connection_error", 0) >= 2
            ),
            what="two connection errors",
        )

    stats = limited_emulator.stats()
    assert stats["acknowledged"] == 0
    assert stats["redelivered"] >= 1


@pytest.mark.slow
def test_push_answered_after_the_ack_deadline_is_retried(
    publisher_client: pubsub_v1.PublisherClient, push_subscription: SubscriptionFactory, topic: str
) -> None:
    # The shortest ack deadline production allows is 10 s; the first answer comes after it.
    with RecordingEndpoint(lambda n: (204, 11.0 if n == 1 else 0.0)) as endpoint:
        push_subscription(
            "slow-first",
            ack_deadline_seconds=10,
            push_config={"push_endpoint": endpoint.url},
            retry_policy={"minimum_backoff": _ms(0), "maximum_backoff": _ms(0)},
        )
        message_id = publisher_client.publish(topic, b"slow").result(timeout=30)
        wait_until(lambda: endpoint.count() >= 2, timeout_s=40, what="a retried push")

    ids = [json.loads(r.body)["message"]["messageId"] for r in endpoint.requests]
    assert ids[:2] == [message_id, message_id]


def test_modify_push_config_switches_a_subscription_between_pull_and_push(
    publisher_client: pubsub_v1.PublisherClient,
    subscriber_client: pubsub_v1.SubscriberClient,
    pubsub_project: str,
    topic: str,
) -> None:
    sub = f"projects/{pubsub_project}/subscriptions/switching"
    subscriber_client.create_subscription(name=sub, topic=topic)
    first_id = publisher_client.publish(topic, b"first").result(timeout=30)
    with RecordingEndpoint() as endpoint:
        subscriber_client.modify_push_config(
            subscription=sub, push_config={"push_endpoint": endpoint.url}
        )
        wait_until(lambda: endpoint.count() >= 1, what="the waiting message pushed")
        subscriber_client.modify_push_config(subscription=sub, push_config={})
    publisher_client.publish(topic, b"second").result(timeout=30)

    (pulled,) = pull_some(subscriber_client, sub, 1)

    assert json.loads(endpoint.requests[0].body)["message"]["messageId"] == first_id
    assert pulled.message.data == b"second"
    assert subscriber_client.get_subscription(subscription=sub).push_config.push_endpoint == ""
