"""The Pub/Sub topology and identities of the local stack, shaped the way `infra/` shapes them.

Names are the ones `infra/` gives too (services/edge/resource_names.py, the default prefix), and
the push subscription carries the same things as `infra/messaging.py`: an OIDC token minted for
the push invoker with audience = the worker URL, an ack deadline, a retry policy and a
dead-letter policy whose topic has a pull subscription (without one, dead letters would be
lost). Only the timings are local: short backoffs so a failing demo shows its retries in
seconds, not minutes.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from typing import Any

from google.api_core import exceptions as gexc
from google.protobuf import duration_pb2

from services.edge.resource_names import Names

logger = logging.getLogger(__name__)

# Pub/Sub keeps unacknowledged messages at most 7 days (infra's MAX_RETENTION).
MAX_RETENTION_S = 7 * 86400


@dataclass(frozen=True)
class PushPolicy:
    """Delivery settings of the push subscription (infra: pushAckDeadlineS, minBackoffS,
    maxBackoffS, deadLetterAttempts)."""

    ack_deadline_s: int = 120
    min_backoff_s: int = 1
    max_backoff_s: int = 10
    dead_letter_attempts: int = 10


@dataclass(frozen=True)
class Topology:
    """The full resource paths of one project's local topology."""

    project: str
    names: Names

    @property
    def topic(self) -> str:
        return f"projects/{self.project}/topics/{self.names.topic}"

    @property
    def push_subscription(self) -> str:
        return f"projects/{self.project}/subscriptions/{self.names.push_subscription}"

    @property
    def dead_letter_topic(self) -> str:
        return f"projects/{self.project}/topics/{self.names.dead_letter_topic}"

    @property
    def dead_letter_subscription(self) -> str:
        return f"projects/{self.project}/subscriptions/{self.names.dead_letter_subscription}"

    @property
    def scheduler_email(self) -> str:
        return self.names.email(self.names.scheduler_account, self.project)

    @property
    def pusher_email(self) -> str:
        return self.names.email(self.names.pusher_account, self.project)


def create_topology(
    topology: Topology,
    worker_url: str,
    publisher: Any,
    subscriber: Any,
    policy: PushPolicy | None = None,
    *,
    lenient: bool = False,
) -> None:
    """Create both topics, the dead-letter pull subscription and the push subscription.

    Already existing resources are kept (a re-run against long-lived emulators is fine).
    `lenient` (Google's emulator) drops the retry and dead-letter policies if refused.
    """
    policy = policy or PushPolicy()
    _ignore_exists(publisher.create_topic, name=topology.topic)
    _ignore_exists(publisher.create_topic, name=topology.dead_letter_topic)
    _ignore_exists(
        subscriber.create_subscription,
        request={
            "name": topology.dead_letter_subscription,
            "topic": topology.dead_letter_topic,
            "ack_deadline_seconds": 60,
            "message_retention_duration": _duration(MAX_RETENTION_S),
        },
    )
    push = {
        "name": topology.push_subscription,
        "topic": topology.topic,
        # For push, the ack deadline is also the HTTP timeout of each delivery.
        "ack_deadline_seconds": policy.ack_deadline_s,
        "message_retention_duration": _duration(MAX_RETENTION_S),
        "push_config": {
            "push_endpoint": worker_url,
            "oidc_token": {
                "service_account_email": topology.pusher_email,
                "audience": worker_url,
            },
        },
        "retry_policy": {
            "minimum_backoff": _duration(policy.min_backoff_s),
            "maximum_backoff": _duration(policy.max_backoff_s),
        },
        "dead_letter_policy": {
            "dead_letter_topic": topology.dead_letter_topic,
            "max_delivery_attempts": policy.dead_letter_attempts,
        },
    }
    try:
        _ignore_exists(subscriber.create_subscription, request=push)
        # A subscription kept from an earlier run (make run keeps emulator data) still
        # pushes to that run's worker: point it at this one.
        subscriber.modify_push_config(
            subscription=topology.push_subscription, push_config=push["push_config"]
        )
    except (gexc.InvalidArgument, gexc.MethodNotImplemented):
        if not lenient:
            raise
        # Google's emulator does not document retry and dead-letter policies; run without them
        # rather than not at all, and say so.
        logger.warning("the emulator refused the retry/dead-letter policies; push without them")
        _ignore_exists(
            subscriber.create_subscription,
            request={k: v for k, v in push.items() if not k.endswith("_policy")},
        )


def _duration(seconds: int) -> duration_pb2.Duration:
    return duration_pb2.Duration(seconds=seconds)


def _ignore_exists(call: Any, **kwargs: Any) -> None:
    try:
        call(**kwargs)
    except gexc.AlreadyExists:
        logger.info("already exists: %s", kwargs.get("name") or kwargs["request"]["name"])
