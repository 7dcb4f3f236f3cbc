"""Production limits and defaults of Pub/Sub, and the checks that enforce them."""

from __future__ import annotations

from typing import Any
from urllib.parse import urlparse

from emulators.pubsub.exceptions import InvalidArgument, OutOfRange

MAX_PUBLISH_MESSAGES = 1000
MAX_PUBLISH_BYTES = 10_000_000
MAX_MESSAGE_BYTES = 10_000_000
MAX_ATTRIBUTES = 100
MAX_ATTRIBUTE_KEY_BYTES = 256
MAX_ATTRIBUTE_VALUE_BYTES = 1024
MAX_ORDERING_KEY_BYTES = 1024
# With PUBSUB_EMULATOR_HOST the client library opens a plain channel with gRPC's default 4 MiB
# receive limit, so a response carries at most this much (but always at least one message).
MAX_RESPONSE_BYTES = 3_500_000

MIN_ACK_DEADLINE_S = 10
MAX_ACK_DEADLINE_S = 600
DEFAULT_ACK_DEADLINE_S = 10
MAX_MODIFY_DEADLINE_S = 600

MAX_BACKOFF_S = 600.0
DEFAULT_MIN_BACKOFF_S = 10.0
DEFAULT_MAX_BACKOFF_S = 600.0

MIN_DELIVERY_ATTEMPTS = 5
MAX_DELIVERY_ATTEMPTS = 100
DEFAULT_DELIVERY_ATTEMPTS = 5

MIN_RETENTION_S = 600
MAX_RETENTION_S = 31 * 24 * 3600
DEFAULT_RETENTION_S = 7 * 24 * 3600
DEFAULT_EXPIRATION_TTL_S = 31 * 24 * 3600

# Without a retry policy, push failures still back off: production's "push backoff".
PUSH_BACKOFF_MIN_S = 0.1
PUSH_BACKOFF_MAX_S = 60.0

# Push endpoints answering with one of these acknowledge the message; anything else is a nack.
# Push requests in flight per subscription unless the emulator is told otherwise (production
# has no fixed cap: it adapts to the endpoint's successes, https://cloud.google.com/pubsub/docs/push).
DEFAULT_PUSH_CONCURRENCY = 16
PUSH_SUCCESS_STATUSES = frozenset({102, 200, 201, 202, 204})


def seconds(duration: Any) -> float:
    """A google.protobuf.Duration as float seconds."""
    return float(duration.seconds) + duration.nanos / 1e9


def check_ack_deadline(value: int) -> None:
    if not MIN_ACK_DEADLINE_S <= value <= MAX_ACK_DEADLINE_S:
        raise InvalidArgument(
            f"Invalid ack deadline given: {value}. "
            f"It must be between {MIN_ACK_DEADLINE_S} and {MAX_ACK_DEADLINE_S} seconds."
        )


def check_modify_deadline(value: int) -> None:
    if not 0 <= value <= MAX_MODIFY_DEADLINE_S:
        raise InvalidArgument(
            f"Invalid ack deadline given: {value}. It must be between 0 and 600 seconds."
        )


def check_backoff(minimum_s: float, maximum_s: float) -> None:
    for label, value in (("minimum_backoff", minimum_s), ("maximum_backoff", maximum_s)):
        if not 0 <= value <= MAX_BACKOFF_S:
            raise InvalidArgument(f"Invalid {label}: {value}s; it must be between 0 and 600s.")
    if minimum_s > maximum_s:
        raise InvalidArgument("minimum_backoff must not be greater than maximum_backoff.")


def check_delivery_attempts(value: int) -> None:
    # OUT_OF_RANGE, in the wording of Google's Pub/Sub emulator (production documents the
    # range, 5-100, not the status: tests/integration/pubsub/test_errors.py runs on both).
    if value < MIN_DELIVERY_ATTEMPTS:
        raise OutOfRange(
            f"The value for max_delivery_attempts is too small. You passed {value} in the "
            f"request, but the minimum value is {MIN_DELIVERY_ATTEMPTS}."
        )
    if value > MAX_DELIVERY_ATTEMPTS:
        raise OutOfRange(
            f"The value for max_delivery_attempts is too large. You passed {value} in the "
            f"request, but the maximum value is {MAX_DELIVERY_ATTEMPTS}."
        )


def check_retention(value_s: float) -> None:
    if not MIN_RETENTION_S <= value_s <= MAX_RETENTION_S:
        raise InvalidArgument(
            f"Invalid message_retention_duration: {value_s}s; "
            "it must be between 10 minutes and 31 days."
        )


def check_push_endpoint(url: str) -> None:
    parsed = urlparse(url)
    if parsed.scheme not in ("http", "https") or not parsed.netloc:
        raise InvalidArgument(f"Invalid push endpoint given (endpoint={url}).")


def check_publish(messages: Any) -> None:
    """Check a PublishRequest's messages against the per-request and per-message limits."""
    if not messages:
        raise InvalidArgument("The publish request must contain at least one message.")
    if len(messages) > MAX_PUBLISH_MESSAGES:
        raise InvalidArgument(
            f"The value for message_count is too large. You passed {len(messages)} in the "
            f"request, but the maximum value is {MAX_PUBLISH_MESSAGES}."
        )
    total = 0
    for message in messages:
        size = message.ByteSize()
        total += size
        if size > MAX_MESSAGE_BYTES:
            raise InvalidArgument(f"Message too large: {size} bytes exceeds {MAX_MESSAGE_BYTES}.")
        _check_message(message)
    if total > MAX_PUBLISH_BYTES:
        raise InvalidArgument(
            f"The value for request_size is too large. You passed {total} in the request, "
            f"but the maximum value is {MAX_PUBLISH_BYTES}."
        )


def _check_message(message: Any) -> None:
    if not message.data and not message.attributes:
        raise InvalidArgument("Some messages are empty: a message needs data or attributes.")
    if len(message.attributes) > MAX_ATTRIBUTES:
        raise InvalidArgument(
            f"The value for num_attributes is too large. You passed {len(message.attributes)} "
            f"in the request, but the maximum value is {MAX_ATTRIBUTES}."
        )
    for key, value in message.attributes.items():
        if not key or len(key.encode()) > MAX_ATTRIBUTE_KEY_BYTES:
            raise InvalidArgument(f"Invalid attribute key: {key[:64]!r}.")
        if key.lower().startswith("goog"):
            raise InvalidArgument(f"Attribute keys may not start with 'goog': {key!r}.")
        if len(value.encode()) > MAX_ATTRIBUTE_VALUE_BYTES:
            raise InvalidArgument(f"The value of attribute {key!r} is too large.")
    if len(message.ordering_key.encode()) > MAX_ORDERING_KEY_BYTES:
        raise InvalidArgument("The ordering key is too large.")


def backoff_s(attempt: int, minimum_s: float, maximum_s: float) -> float:
    """The wait before redelivering after failed delivery number `attempt` (1-based)."""
    if attempt < 1:
        attempt = 1
    # The cap comes first so a large attempt count cannot overflow the float.
    exponent = min(attempt - 1, 30)
    return min(minimum_s * (2**exponent), maximum_s)
