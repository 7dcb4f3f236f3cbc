"""The google.pubsub.v1.Subscriber service: subscriptions, Pull, StreamingPull, acks."""

from __future__ import annotations

import logging
import threading
from collections.abc import Iterator
from typing import Any

import grpc

from emulators.pubsub import limits, names, pages, protos
from emulators.pubsub.broker import Broker
from emulators.pubsub.exceptions import InvalidArgument, PubsubEmulatorError
from emulators.pubsub.rpc import Method, bidi, unary

logger = logging.getLogger(__name__)

# How long a stream with nothing to send waits before re-checking that its client is still there.
STREAM_IDLE_S = 1.0


class _Stream:
    """One StreamingPull: its ack deadline, flow control, and whether it is over."""

    def __init__(self, deadline_s: int, max_outstanding: int, max_bytes: int) -> None:
        self.deadline_s = deadline_s
        self.max_outstanding = max_outstanding
        self.max_bytes = max_bytes
        self.error: PubsubEmulatorError | None = None
        self._done = threading.Event()

    def close(self) -> None:
        self._done.set()

    def is_done(self) -> bool:
        return self._done.is_set()


class SubscriberService:
    """Translates Subscriber RPCs into broker calls."""

    service_name = "google.pubsub.v1.Subscriber"

    def __init__(self, broker: Broker, pull_wait_s: float = 1.0) -> None:
        self._broker = broker
        self._pull_wait_s = pull_wait_s

    def methods(self) -> list[Method]:
        return [
            unary(
                "CreateSubscription",
                self.create_subscription,
                protos.Subscription,
                protos.Subscription,
            ),
            unary(
                "GetSubscription",
                self.get_subscription,
                protos.GetSubscriptionRequest,
                protos.Subscription,
            ),
            unary(
                "UpdateSubscription",
                self.update_subscription,
                protos.UpdateSubscriptionRequest,
                protos.Subscription,
            ),
            unary(
                "ListSubscriptions",
                self.list_subscriptions,
                protos.ListSubscriptionsRequest,
                protos.ListSubscriptionsResponse,
            ),
            unary(
                "DeleteSubscription",
                self.delete_subscription,
                protos.DeleteSubscriptionRequest,
                protos.Empty,
            ),
            unary(
                "ModifyPushConfig",
                self.modify_push_config,
                protos.ModifyPushConfigRequest,
                protos.Empty,
            ),
            unary("Pull", self.pull, protos.PullRequest, protos.PullResponse),
            unary("Acknowledge", self.acknowledge, protos.AcknowledgeRequest, protos.Empty),
            unary(
                "ModifyAckDeadline",
                self.modify_ack_deadline,
                protos.ModifyAckDeadlineRequest,
                protos.Empty,
            ),
            bidi(
                "StreamingPull",
                self.streaming_pull,
                protos.StreamingPullRequest,
                protos.StreamingPullResponse,
            ),
        ]

    def create_subscription(self, request: Any, context: Any) -> Any:
        return self._broker.create_subscription(request)

    def get_subscription(self, request: Any, context: Any) -> Any:
        return self._broker.get_subscription(request.subscription)

    def update_subscription(self, request: Any, context: Any) -> Any:
        return self._broker.update_subscription(
            request.subscription, list(request.update_mask.paths)
        )

    def list_subscriptions(self, request: Any, context: Any) -> Any:
        project = names.project(request.project)
        subs, token = pages.page(
            self._broker.list_subscriptions(project), request.page_size, request.page_token
        )
        return protos.ListSubscriptionsResponse(subscriptions=subs, next_page_token=token)

    def delete_subscription(self, request: Any, context: Any) -> Any:
        self._broker.delete_subscription(request.subscription)
        return protos.Empty()

    def modify_push_config(self, request: Any, context: Any) -> Any:
        self._broker.modify_push_config(request.subscription, request.push_config)
        return protos.Empty()

    def pull(self, request: Any, context: Any) -> Any:
        wait = 0.0 if request.return_immediately else self._pull_wait_s
        received = self._broker.pull(request.subscription, request.max_messages, wait)
        return protos.PullResponse(received_messages=received)

    def acknowledge(self, request: Any, context: Any) -> Any:
        if not request.ack_ids:
            raise InvalidArgument("No ack ids specified.")
        self._broker.acknowledge(request.subscription, request.ack_ids)
        return protos.Empty()

    def modify_ack_deadline(self, request: Any, context: Any) -> Any:
        if not request.ack_ids:
            raise InvalidArgument("No ack ids specified.")
        self._broker.modify_ack_deadline(
            request.subscription, request.ack_ids, request.ack_deadline_seconds
        )
        return protos.Empty()

    def streaming_pull(
        self, requests: Iterator[Any], context: grpc.ServicerContext
    ) -> Iterator[Any]:
        first = next(requests, None)
        if first is None:
            return
        name = first.subscription
        names.subscription(name)
        limits.check_ack_deadline(first.stream_ack_deadline_seconds)
        self._broker.get_subscription(name)
        stream = _Stream(
            first.stream_ack_deadline_seconds,
            first.max_outstanding_messages,
            first.max_outstanding_bytes,
        )
        self._apply(name, first, stream)

        def on_done() -> None:
            stream.close()
            self._broker.wake()

        context.add_callback(on_done)
        reader = threading.Thread(
            target=self._read,
            args=(name, requests, stream),
            name="pubsub-stream-reader",
            daemon=True,
        )
        reader.start()
        try:
            while True:
                received = self._broker.lease_for_stream(
                    name,
                    stream,
                    stream.deadline_s,
                    stream.max_outstanding,
                    STREAM_IDLE_S,
                    stream.is_done,
                    stream.max_bytes,
                )
                if stream.error is not None:
                    raise stream.error
                if received is None:
                    return
                if received:
                    response = protos.StreamingPullResponse(received_messages=received)
                    ordered = self._broker.get_subscription(name).enable_message_ordering
                    response.subscription_properties.message_ordering_enabled = ordered
                    yield response
        finally:
            stream.close()
            self._broker.release_owner(stream)

    def _read(self, name: str, requests: Iterator[Any], stream: _Stream) -> None:
        """Apply the client's later requests (acks, modacks, heartbeats) until it half-closes."""
        try:
            for request in requests:
                if stream.is_done():
                    return
                self._apply(name, request, stream)
        except PubsubEmulatorError as exc:
            stream.error = exc
        except Exception:
            # The RPC was cancelled or the connection dropped: grpc raises from the iterator.
            logger.debug("stream reader for %s ended", name, exc_info=True)
        finally:
            stream.close()
            self._broker.wake()

    def _apply(self, name: str, request: Any, stream: _Stream) -> None:
        if request.subscription and request.subscription != name:
            raise InvalidArgument("subscription must only be set on the initial request.")
        if request.stream_ack_deadline_seconds:
            limits.check_ack_deadline(request.stream_ack_deadline_seconds)
            stream.deadline_s = request.stream_ack_deadline_seconds
        if request.ack_ids:
            self._broker.acknowledge(name, request.ack_ids)
        ids, seconds = request.modify_deadline_ack_ids, request.modify_deadline_seconds
        if len(ids) != len(seconds):
            raise InvalidArgument(
                "modify_deadline_ack_ids and modify_deadline_seconds must have the same length."
            )
        by_deadline: dict[int, list[str]] = {}
        for ack_id, deadline in zip(ids, seconds, strict=True):
            by_deadline.setdefault(deadline, []).append(ack_id)
        for deadline, group in by_deadline.items():
            self._broker.modify_ack_deadline(name, group, deadline)
