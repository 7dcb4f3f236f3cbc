"""The local Pub/Sub topology has infra's names and infra's push, retry and dead-letter shape."""

from __future__ import annotations

from typing import Any

import pytest
from google.api_core.exceptions import InvalidArgument

from services.edge.resource_names import Names
from services.local.topology import PushPolicy, Topology, create_topology


def test_push_subscription_carries_oidc_for_the_worker_and_dead_letters_to_a_pulled_topic(
    pubsub_project: str, publisher_client: Any, subscriber_client: Any
) -> None:
    topology = Topology(pubsub_project, Names.for_prefix())
    worker_url = "http://127.0.0.1:9/"
    policy = PushPolicy(
        ack_deadline_s=30, min_backoff_s=2, max_backoff_s=20, dead_letter_attempts=7
    )
    create_topology(topology, worker_url, publisher_client, subscriber_client, policy)
    create_topology(topology, worker_url, publisher_client, subscriber_client, policy)  # idempotent

    push = subscriber_client.get_subscription(subscription=topology.push_subscription)
    assert push.topic == topology.topic
    assert push.push_config.push_endpoint == worker_url
    assert push.push_config.oidc_token.audience == worker_url
    assert push.push_config.oidc_token.service_account_email == (
        f"deferred-jobs-pusher@{pubsub_project}.iam.gserviceaccount.com"
    )
    assert push.ack_deadline_seconds == 30
    assert push.retry_policy.minimum_backoff.total_seconds() == 2
    assert push.retry_policy.maximum_backoff.total_seconds() == 20
    assert push.dead_letter_policy.dead_letter_topic == topology.dead_letter_topic
    assert push.dead_letter_policy.max_delivery_attempts == 7

    pulled = subscriber_client.get_subscription(subscription=topology.dead_letter_subscription)
    assert pulled.topic == topology.dead_letter_topic
    assert not pulled.push_config.push_endpoint


def _refuse_the_push_subscription(pubsub_emulator: Any) -> None:
    # CreateSubscription runs twice: the dead-letter pull subscription passes (a tiny delay),
    # the push subscription with its policies is refused, as Google's emulator might.
    pubsub_emulator.inject_fault("CreateSubscription", delay_s=0.001)
    pubsub_emulator.inject_fault("CreateSubscription", status="INVALID_ARGUMENT")


@pytest.mark.builtin_emulator("fault injection")
def test_lenient_mode_drops_refused_policies_but_keeps_oidc_push(
    pubsub_emulator: Any, pubsub_project: str, publisher_client: Any, subscriber_client: Any
) -> None:
    topology = Topology(pubsub_project, Names.for_prefix())
    _refuse_the_push_subscription(pubsub_emulator)
    try:
        create_topology(
            topology, "http://127.0.0.1:9/", publisher_client, subscriber_client, lenient=True
        )
    finally:
        pubsub_emulator.clear_faults()
    push = subscriber_client.get_subscription(subscription=topology.push_subscription)
    assert push.push_config.oidc_token.audience == "http://127.0.0.1:9/"
    assert not push.dead_letter_policy.dead_letter_topic


@pytest.mark.builtin_emulator("fault injection")
def test_strict_mode_reports_a_refused_push_subscription(
    pubsub_emulator: Any, pubsub_project: str, publisher_client: Any, subscriber_client: Any
) -> None:
    topology = Topology(pubsub_project, Names.for_prefix())
    _refuse_the_push_subscription(pubsub_emulator)
    try:
        with pytest.raises(InvalidArgument):
            create_topology(topology, "http://127.0.0.1:9/", publisher_client, subscriber_client)
    finally:
        pubsub_emulator.clear_faults()
