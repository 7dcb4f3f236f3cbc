"""The google.pubsub.v1.Publisher service: topics and Publish."""

from __future__ import annotations

from typing import Any

from emulators.pubsub import names, pages, protos
from emulators.pubsub.broker import Broker
from emulators.pubsub.rpc import Method, unary


class PublisherService:
    """Translates Publisher RPCs into broker calls."""

    service_name = "google.pubsub.v1.Publisher"

    def __init__(self, broker: Broker) -> None:
        self._broker = broker

    def methods(self) -> list[Method]:
        return [
            unary("CreateTopic", self.create_topic, protos.Topic, protos.Topic),
            unary("GetTopic", self.get_topic, protos.GetTopicRequest, protos.Topic),
            unary("Publish", self.publish, protos.PublishRequest, protos.PublishResponse),
            unary(
                "ListTopics", self.list_topics, protos.ListTopicsRequest, protos.ListTopicsResponse
            ),
            unary(
                "ListTopicSubscriptions",
                self.list_topic_subscriptions,
                protos.ListTopicSubscriptionsRequest,
                protos.ListTopicSubscriptionsResponse,
            ),
            unary("DeleteTopic", self.delete_topic, protos.DeleteTopicRequest, protos.Empty),
        ]

    def create_topic(self, request: Any, context: Any) -> Any:
        return self._broker.create_topic(request)

    def get_topic(self, request: Any, context: Any) -> Any:
        return self._broker.get_topic(request.topic)

    def publish(self, request: Any, context: Any) -> Any:
        ids = self._broker.publish(request.topic, request.messages)
        return protos.PublishResponse(message_ids=ids)

    def list_topics(self, request: Any, context: Any) -> Any:
        project = names.project(request.project)
        topics, token = pages.page(
            self._broker.list_topics(project), request.page_size, request.page_token
        )
        return protos.ListTopicsResponse(topics=topics, next_page_token=token)

    def list_topic_subscriptions(self, request: Any, context: Any) -> Any:
        subs, token = pages.page(
            self._broker.list_topic_subscriptions(request.topic),
            request.page_size,
            request.page_token,
        )
        return protos.ListTopicSubscriptionsResponse(subscriptions=subs, next_page_token=token)

    def delete_topic(self, request: Any, context: Any) -> Any:
        self._broker.delete_topic(request.topic)
        return protos.Empty()
