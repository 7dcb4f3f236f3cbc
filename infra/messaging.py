"""The jobs topic, its push subscription to the worker, and the dead-letter topic.

Pub/Sub pushes with an OIDC token minted for the push invoker, audience = the worker's URL.
Messages the worker keeps refusing go to the dead-letter topic after `deadLetterAttempts`
deliveries; a pull subscription on it keeps them 31 days for an operator to inspect and replay
(replaying republishes to the jobs topic, so it needs roles/pubsub.publisher there: see
docs/runbook.md).
"""

from __future__ import annotations

from dataclasses import dataclass

import pulumi
from pulumi_gcp import projects, pubsub

from infra.config import StackConfig
from infra.identity import Accounts, member
from infra.scope import Scope
from services.edge.resource_names import Names

# How long a subscription keeps unacknowledged messages: 7 days is the default, 31 days the
# maximum (https://cloud.google.com/pubsub/docs/subscription-properties, "Message retention
# duration"). Jobs messages are redelivered or dead-lettered long before 7 days; dead letters
# get the maximum, so an incident that lasts a week loses none. Retention beyond 24 h is
# billed as storage, and a healthy system has no dead letters to store.
JOBS_RETENTION = "604800s"
DEAD_LETTER_RETENTION_DAYS = 31
DEAD_LETTER_RETENTION = f"{DEAD_LETTER_RETENTION_DAYS * 86400}s"


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
    agent: projects.ServiceIdentity,
    scope: Scope,
    opts: pulumi.ResourceOptions,
) -> Messaging:
    """`agent` is the Pub/Sub service agent; its grants use its `member`, so they wait for it."""
    topic = pubsub.Topic(
        scope.name("jobs-topic"), project=config.project, name=names.topic, opts=opts
    )
    dead_letter_topic = pubsub.Topic(
        scope.name("dead-letter-topic"),
        project=config.project,
        name=names.dead_letter_topic,
        opts=opts,
    )
    dead_letter_subscription = pubsub.Subscription(
        scope.name("dead-letter-subscription"),
        project=config.project,
        name=names.dead_letter_subscription,
        topic=dead_letter_topic.id,
        ack_deadline_seconds=60,
        message_retention_duration=DEAD_LETTER_RETENTION,
        # An empty TTL: never delete the subscription for inactivity (the default is 31 days,
        # and a healthy system leaves this subscription idle).
        expiration_policy=pubsub.SubscriptionExpirationPolicyArgs(ttl=""),
        opts=opts,
    )
    grants: list[pulumi.Resource] = [
        pubsub.TopicIAMMember(
            scope.name("scan-publishes-jobs"),
            project=config.project,
            topic=topic.name,
            role="roles/pubsub.publisher",
            member=member(accounts.scan),
            opts=opts,
        ),
        pubsub.TopicIAMMember(
            scope.name("pubsub-agent-publishes-dead-letters"),
            project=config.project,
            topic=dead_letter_topic.name,
            role="roles/pubsub.publisher",
            member=agent.member,
            opts=opts,
        ),
    ]
    subscription = pubsub.Subscription(
        scope.name("jobs-push-subscription"),
        project=config.project,
        name=names.push_subscription,
        topic=topic.id,
        # For push, the ack deadline is also the HTTP timeout of each delivery.
        ack_deadline_seconds=config.push_ack_deadline_s,
        message_retention_duration=JOBS_RETENTION,
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
            scope.name("pubsub-agent-subscribes-jobs"),
            project=config.project,
            subscription=subscription.name,
            role="roles/pubsub.subscriber",
            member=agent.member,
            opts=opts,
        )
    )
    return Messaging(topic, subscription, dead_letter_topic, dead_letter_subscription, grants)
