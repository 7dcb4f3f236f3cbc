"""The Pub/Sub push request, parsed into the one thing the worker needs: a `Delivery`.

Two shapes arrive. The default (wrapped) body is JSON::

    {"message": {"data": base64(job ID), "attributes": {"generation": "3", "run_id": "..."},
                 "messageId": "...", "publishTime": "..."},
     "subscription": "projects/p/subscriptions/s", "deliveryAttempt": 2}

With payload unwrapping (`no_wrapper`) the body is the raw job ID; with `write_metadata` the
attributes arrive as headers of the same name and the metadata as `x-goog-pubsub-*` headers.

Everything here is strict: a field of the wrong type, bad base64, a job ID Firestore could
not use as a document ID — each raises `MalformedDelivery` with a fixed reason code. The HTTP
layer acknowledges those and records them; they are never redelivered.
"""

from __future__ import annotations

import base64
import binascii
import json
import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from services.edge.publisher import ATTR_GENERATION, ATTR_RUN_ID
from services.jobs.ids import MAX_ID_BYTES, job_id_problems
from services.worker.errors import MalformedDelivery

HEADER_MESSAGE_ID = "x-goog-pubsub-message-id"
HEADER_SUBSCRIPTION = "x-goog-pubsub-subscription-name"
HEADER_PUBLISH_TIME = "x-goog-pubsub-publish-time"
HEADER_DELIVERY_ATTEMPT = "x-goog-pubsub-delivery-attempt"

MAX_GENERATION = 2**63 - 1
MAX_ATTRIBUTE_CHARS = 1024


@dataclass(frozen=True)
class Delivery:
    """One push of one job ID; `delivery_attempt` is None without a dead-letter policy."""

    job_id: str
    generation: int
    run_id: str | None = None
    delivery_attempt: int | None = None
    message_id: str | None = None
    subscription: str | None = None
    wrapped: bool = True


def parse(body: bytes, headers: Mapping[str, str]) -> Delivery:
    """The delivery in a push request body (already size-limited) and its headers."""
    if not body:
        raise MalformedDelivery("empty_body", "the request body is empty")
    lowered = {k.lower(): v for k, v in headers.items()}
    # With write_metadata the metadata headers say "unwrapped", so a job ID that starts
    # with "{" is not mistaken for an envelope.
    if HEADER_MESSAGE_ID not in lowered and body.lstrip()[:1] == b"{":
        return _parse_wrapped(body)
    return _parse_unwrapped(body, lowered)


def _parse_wrapped(body: bytes) -> Delivery:
    try:
        envelope = json.loads(body)
    except (ValueError, RecursionError) as exc:
        raise MalformedDelivery("bad_json", "the body starts like JSON but does not parse") from exc
    if not isinstance(envelope, dict):
        raise MalformedDelivery("bad_envelope", "the envelope is not a JSON object")
    message = envelope.get("message")
    if not isinstance(message, dict):
        raise MalformedDelivery("missing_message", "the envelope has no 'message' object")
    data = message.get("data")
    if not isinstance(data, str) or not data:
        raise MalformedDelivery("missing_data", "message.data is missing or not a string")
    try:
        raw = base64.b64decode(data, validate=True)
    except (binascii.Error, ValueError) as exc:
        raise MalformedDelivery("bad_base64", "message.data is not valid base64") from exc
    attributes = message.get("attributes", {})
    if attributes is None:
        attributes = {}
    if not isinstance(attributes, dict) or not all(
        isinstance(k, str) and isinstance(v, str) for k, v in attributes.items()
    ):
        raise MalformedDelivery("bad_attributes", "message.attributes is not a string map")
    return Delivery(
        job_id=job_id_from(raw),
        generation=_generation(attributes.get(ATTR_GENERATION)),
        run_id=_optional_text(attributes.get(ATTR_RUN_ID), ATTR_RUN_ID),
        delivery_attempt=_delivery_attempt(envelope.get("deliveryAttempt")),
        message_id=_optional_text(
            message.get("messageId", message.get("message_id")), "message.messageId"
        ),
        subscription=_optional_text(envelope.get("subscription"), "subscription"),
        wrapped=True,
    )


def _parse_unwrapped(body: bytes, headers: Mapping[str, str]) -> Delivery:
    attempt_header = headers.get(HEADER_DELIVERY_ATTEMPT)
    return Delivery(
        job_id=job_id_from(body),
        generation=_generation(headers.get(ATTR_GENERATION)),
        run_id=_optional_text(headers.get(ATTR_RUN_ID), ATTR_RUN_ID),
        delivery_attempt=_delivery_attempt(
            _header_int(attempt_header, HEADER_DELIVERY_ATTEMPT)
            if attempt_header is not None
            else None
        ),
        message_id=_optional_text(headers.get(HEADER_MESSAGE_ID), HEADER_MESSAGE_ID),
        subscription=_optional_text(headers.get(HEADER_SUBSCRIPTION), HEADER_SUBSCRIPTION),
        wrapped=False,
    )


def job_id_from(raw: bytes) -> str:
    """The job ID in a message's data: UTF-8 and valid by the model's one rule
    (`services.jobs.model.job_id_problems`)."""
    if not raw:
        raise MalformedDelivery("bad_job_id", "the job ID is empty")
    if len(raw) > MAX_ID_BYTES:
        raise MalformedDelivery("bad_job_id", f"the job ID is longer than {MAX_ID_BYTES} B")
    try:
        job_id = raw.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise MalformedDelivery("bad_job_id", "the job ID is not UTF-8") from exc
    if job_id_problems(job_id):
        raise MalformedDelivery("bad_job_id", "the job ID is not a valid job ID")
    return job_id


def _generation(value: Any) -> int:
    if value is None:
        raise MalformedDelivery("missing_generation", "the 'generation' attribute is missing")
    number = _header_int(value, ATTR_GENERATION)
    if number > MAX_GENERATION:
        raise MalformedDelivery("bad_generation", "the 'generation' attribute is out of range")
    return number


def _header_int(value: Any, name: str) -> int:
    # Attributes are strings on the wire; accept only plain decimal digits (no sign, no "1e3").
    if not isinstance(value, str) or not value.isascii() or not value.isdigit() or len(value) > 19:
        raise MalformedDelivery(f"bad_{_code(name)}", f"'{name}' is not a non-negative integer")
    return int(value)


def _delivery_attempt(value: Any) -> int | None:
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int) or not 1 <= value <= 10_000:
        raise MalformedDelivery("bad_delivery_attempt", "deliveryAttempt is not a small integer")
    return value


def _optional_text(value: Any, name: str) -> str | None:
    if value is None:
        return None
    if not isinstance(value, str) or len(value) > MAX_ATTRIBUTE_CHARS:
        raise MalformedDelivery(f"bad_{_code(name)}", f"'{name}' is not a short string")
    return value


def _code(name: str) -> str:
    return re.sub(r"[^a-z0-9]+", "_", name.lower().removeprefix("x-goog-pubsub-")).strip("_")
