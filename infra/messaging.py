"""The jobs topic, its push subscription to the worker, and the dead-letter topic.

Pub/Sub pushes with an OIDC token minted for the push invoker, audience = the worker's URL.
Messages the worker keeps refusing go to the dead-letter topic after `deadLetterAttempts`
deliveries; a pull subscription on it keeps them for an operator to inspect.
"""

from __future__ import annotations

from dataclasses import dataclass

import pulumi
from pulumi_gcp import pubsub

from infra.config import StackConfig
from infra.identity import Accounts, member, pubsub_service_agent
from infra.names import Names

# Pub/Sub keeps unacknowledged messages at most 7 days.
MAX_RETENTION = "604800s"


@dataclass(frozen=True)
class Messaging:
    topic: pubsub.Topic
    subscription: pubsub.Subscription
    dead_letter_topic: pubsub.Topic
    dead_letter_subscription: pubsub.Subscription
    grants: list[pulumi.Resource]


def create_messaging(
    config: StackConfig,
    names: Names,
    accounts: Accounts,
    worker_url: pulumi.Input[str],
    project_number: pulumi.Input[str],
    opts: pulumi.ResourceOptions,
) -> Messaging:
    topic = pubsub.Topic("jobs-topic", project=config.project, name=names.topic, opts=opts)
    dead_letter_topic = pubsub.Topic(
        "dead-letter-topic", project=config.project, name=names.dead_letter_topic, opts=opts
    )
    dead_letter_subscription = pubsub.Subscription(
        "dead-letter-subscription",
        project=config.project,
        name=names.dead_letter_subscription,
        topic=dead_letter_topic.id,
        ack_deadline_seconds=60,
        message_retention_duration=MAX_RETENTION,
        # An empty TTL: never delete the subscription for inactivity (the default is 31 days,
        # and a healthy system leaves this subscription idle).
        expiration_policy=pubsub.SubscriptionExpirationPolicyArgs(ttl=""),
        opts=opts,
    )
    agent = pubsub_service_agent(project_number)
    grants: list[pulumi.Resource] = [
        pubsub.TopicIAMMember(
            "scan-publishes-jobs",
            project=config.project,
            topic=topic.name,
            role="roles/pubsub.publisher",
            member=member(accounts.scan),
            opts=opts,
        ),
        pubsub.TopicIAMMember(
            "pubsub-agent-publishes-dead-letters",
            project=config.project,
            topic=dead_letter_topic.name,
            role="roles/pubsub.publisher",
            member=agent,
            opts=opts,
        ),
    ]
    subscription = pubsub.Subscription(
        "jobs-push-subscription",
        project=config.project,
        name=names.push_subscription,
        topic=topic.id,
        # For push, the ack deadline is also the HTTP timeout of each delivery.
        ack_deadline_seconds=config.push_ack_deadline_s,
        message_retention_duration=MAX_RETENTION,
        expiration_policy=pubsub.SubscriptionExpirationPolicyArgs(ttl=""),
        push_config=pubsub.SubscriptionPushConfigArgs(
            push_endpoint=worker_url,
            oidc_token=pubsub.SubscriptionPushConfigOidcTokenArgs(
                service_account_email=accounts.pusher.email,
                audience=worker_url,
            ),
        ),
        retry_policy=pubsub.SubscriptionRetryPolicyArgs(
            minimum_backoff=f"{config.min_backoff_s}s",
            maximum_backoff=f"{config.max_backoff_s}s",
        ),
        dead_letter_policy=pubsub.SubscriptionDeadLetterPolicyArgs(
            dead_letter_topic=dead_letter_topic.id,
            max_delivery_attempts=config.dead_letter_attempts,
        ),
        opts=opts,
    )
    grants.append(
        pubsub.SubscriptionIAMMember(
            "pubsub-agent-subscribes-jobs",
            project=config.project,
            subscription=subscription.name,
            role="roles/pubsub.subscriber",
            member=agent,
            opts=opts,
        )
    )
    return Messaging(topic, subscription, dead_letter_topic, dead_letter_subscription, grants)
