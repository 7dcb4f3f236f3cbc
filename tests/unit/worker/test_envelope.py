"""Parsing push requests: both shapes accepted, every malformed input named by a reason code."""

from __future__ import annotations

import base64
import json
from typing import Any

import pytest

from services.worker.envelope import Delivery, parse
from services.worker.errors import MalformedDelivery


def wrapped(
    data: Any = None,
    attributes: Any = None,
    *,
    delivery_attempt: Any = None,
    job_id: str = "job-1",
    **message_fields: Any,
) -> bytes:
    message: dict[str, Any] = {
        "data": base64.b64encode(job_id.encode()).decode() if data is None else data,
        "attributes": {"generation": "3", "run_id": "run-9"} if attributes is None else attributes,
        "messageId": "m-1",
        **message_fields,
    }
    envelope: dict[str, Any] = {"message": message, "subscription": "projects/p/subscriptions/s"}
    if delivery_attempt is not None:
        envelope["deliveryAttempt"] = delivery_attempt
    return json.dumps(envelope).encode()


def test_wrapped_envelope_yields_job_id_generation_run_and_attempt() -> None:
    delivery = parse(wrapped(delivery_attempt=2), {})
    assert delivery == Delivery(
        job_id="job-1",
        generation=3,
        run_id="run-9",
        delivery_attempt=2,
        message_id="m-1",
        subscription="projects/p/subscriptions/s",
        wrapped=True,
    )


def test_wrapped_envelope_without_dead_letter_policy_has_no_delivery_attempt() -> None:
    assert parse(wrapped(), {}).delivery_attempt is None


def test_unwrapped_body_takes_attributes_and_metadata_from_headers() -> None:
    headers = {
        "Generation": "7",
        "run_id": "r",
        "X-Goog-PubSub-Message-Id": "m-2",
        "x-goog-pubsub-subscription-name": "projects/p/subscriptions/s",
        "x-goog-pubsub-delivery-attempt": "4",
    }
    delivery = parse(b"media:42:decision-7", headers)
    assert delivery.job_id == "media:42:decision-7"
    assert (delivery.generation, delivery.run_id, delivery.delivery_attempt) == (7, "r", 4)
    assert (delivery.message_id, delivery.wrapped) == ("m-2", False)


@pytest.mark.parametrize(
    ("body", "headers", "reason"),
    [
        (b"", {}, "empty_body"),
        (b"{not json", {}, "bad_json"),
        (b"[" * 5000 + b"]" * 5000, {"generation": "1"}, "bad_job_id"),
        (b"{" + b'"a":' * 3000 + b"1}", {}, "bad_json"),
        (b'{"message": "x"}', {}, "missing_message"),
        (b'{"nomessage": {}}', {}, "missing_message"),
        (wrapped(data=""), {}, "missing_data"),
        (wrapped(data=12), {}, "missing_data"),
        (wrapped(data="!!!not-base64!!!"), {}, "bad_base64"),
        (wrapped(data=base64.b64encode(b"\xff\xfe").decode()), {}, "bad_job_id"),
        (wrapped(job_id="a/b"), {}, "bad_job_id"),
        (wrapped(job_id="__reserved__"), {}, "bad_job_id"),
        (wrapped(job_id=".."), {}, "bad_job_id"),
        (wrapped(job_id="x" * 1501), {}, "bad_job_id"),
        (wrapped(job_id="tab\there"), {}, "bad_job_id"),
        (wrapped(attributes=["generation"]), {}, "bad_attributes"),
        (wrapped(attributes={"generation": 3}), {}, "bad_attributes"),
        (wrapped(attributes={}), {}, "missing_generation"),
        (wrapped(attributes={"generation": "-1"}), {}, "bad_generation"),
        (wrapped(attributes={"generation": "1e3"}), {}, "bad_generation"),
        (wrapped(attributes={"generation": "9" * 19}), {}, "bad_generation"),
        (wrapped(delivery_attempt="2"), {}, "bad_delivery_attempt"),
        (wrapped(delivery_attempt=True), {}, "bad_delivery_attempt"),
        (wrapped(delivery_attempt=0), {}, "bad_delivery_attempt"),
        (wrapped(messageId=5), {}, "bad_message_messageid"),
        (b"job-1", {}, "missing_generation"),
        (b"job-1", {"generation": "x"}, "bad_generation"),
        (
            b"job-1",
            {"generation": "1", "x-goog-pubsub-delivery-attempt": "two"},
            "bad_delivery_attempt",
        ),
    ],
)
def test_malformed_requests_are_refused_with_a_reason(
    body: bytes, headers: dict[str, str], reason: str
) -> None:
    with pytest.raises(MalformedDelivery) as caught:
        parse(body, headers)
    assert caught.value.reason == reason


def test_null_attributes_count_as_missing_generation() -> None:
    with pytest.raises(MalformedDelivery) as caught:
        parse(
            wrapped(attributes=None).replace(
                b'"attributes": {"generation": "3", "run_id": "run-9"}', b'"attributes": null'
            ),
            {},
        )
    assert caught.value.reason == "missing_generation"


def test_an_unwrapped_job_id_that_looks_like_json_is_read_as_a_job_id() -> None:
    headers = {"generation": "2", "x-goog-pubsub-message-id": "m-1"}
    delivery = parse(b"{not-an-envelope}", headers)
    assert (delivery.job_id, delivery.generation, delivery.wrapped) == (
        "{not-an-envelope}",
        2,
        False,
    )


def test_the_envelope_uses_the_models_job_id_rule_and_the_publishers_attribute_names() -> None:
    from services.edge import publisher
    from services.jobs import model
    from services.worker import envelope

    assert envelope.job_id_problems is model.job_id_problems
    assert (envelope.ATTR_GENERATION, envelope.ATTR_RUN_ID) == (
        publisher.ATTR_GENERATION,
        publisher.ATTR_RUN_ID,
    )
    assert not hasattr(envelope, "_CONTROL") and not hasattr(envelope, "_RESERVED_ID")
