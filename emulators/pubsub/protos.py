"""The raw protobuf classes of google.pubsub.v1, taken from the client library (no codegen)."""

from __future__ import annotations

from typing import Any

from google.protobuf import empty_pb2, timestamp_pb2
from google.pubsub_v1 import types

# `.pb()` gives the plain protobuf class behind each proto-plus wrapper; the emulator works on
# those directly because they are several times faster to build and serialize.
Topic: Any = types.Topic.pb()
Subscription: Any = types.Subscription.pb()
PubsubMessage: Any = types.PubsubMessage.pb()
ReceivedMessage: Any = types.ReceivedMessage.pb()
PushConfig: Any = types.PushConfig.pb()

PublishRequest: Any = types.PublishRequest.pb()
PublishResponse: Any = types.PublishResponse.pb()
GetTopicRequest: Any = types.GetTopicRequest.pb()
ListTopicsRequest: Any = types.ListTopicsRequest.pb()
ListTopicsResponse: Any = types.ListTopicsResponse.pb()
ListTopicSubscriptionsRequest: Any = types.ListTopicSubscriptionsRequest.pb()
ListTopicSubscriptionsResponse: Any = types.ListTopicSubscriptionsResponse.pb()
DeleteTopicRequest: Any = types.DeleteTopicRequest.pb()

GetSubscriptionRequest: Any = types.GetSubscriptionRequest.pb()
UpdateSubscriptionRequest: Any = types.UpdateSubscriptionRequest.pb()
ListSubscriptionsRequest: Any = types.ListSubscriptionsRequest.pb()
ListSubscriptionsResponse: Any = types.ListSubscriptionsResponse.pb()
DeleteSubscriptionRequest: Any = types.DeleteSubscriptionRequest.pb()
ModifyPushConfigRequest: Any = types.ModifyPushConfigRequest.pb()
PullRequest: Any = types.PullRequest.pb()
PullResponse: Any = types.PullResponse.pb()
AcknowledgeRequest: Any = types.AcknowledgeRequest.pb()
ModifyAckDeadlineRequest: Any = types.ModifyAckDeadlineRequest.pb()
StreamingPullRequest: Any = types.StreamingPullRequest.pb()
StreamingPullResponse: Any = types.StreamingPullResponse.pb()

Empty: Any = empty_pb2.Empty
Timestamp: Any = timestamp_pb2.Timestamp

SUBSCRIPTION_ACTIVE = 1
DELETED_TOPIC = "_deleted-topic_"
