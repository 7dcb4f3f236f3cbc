"""Bad input is acknowledged and kept in `rejected`, never bounced into a redelivery loop."""

from __future__ import annotations

import base64
import json
from collections.abc import Callable
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from services.jobs.state import State
from tests.integration.worker.harness import PushTopic, WorkerHarness, envelope, wait_until

PushFactory = Callable[..., PushTopic]

json_values = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False) | st.text(max_size=20),
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=8), inner),
    max_leaves=12,
)
b64_of_bytes = st.binary(max_size=64).map(lambda raw: base64.b64encode(raw).decode())
envelopes = st.fixed_dictionaries(
    {
        "message": st.one_of(
            json_values,
            st.fixed_dictionaries(
                {
                    "data": st.one_of(json_values, b64_of_bytes),
                    "attributes": st.one_of(
                        json_values, st.dictionaries(st.text(max_size=12), st.text(max_size=12))
                    ),
                    "messageId": st.one_of(json_values, st.text(max_size=20)),
                }
            ),
        ),
        "deliveryAttempt": json_values,
    }
).map(lambda body: json.dumps(body).encode())
bodies = st.one_of(
    st.binary(max_size=2048),
    st.text(max_size=200).map(str.encode),
    json_values.map(lambda value: json.dumps(value).encode()),
    envelopes,
    st.integers(min_value=64 * 1024 + 1, max_value=256 * 1024).map(lambda n: b"{" * n),
)


def test_fuzzed_bodies_are_never_a_5xx_and_always_recorded(worker: WorkerHarness) -> None:
    client = worker.flask_app.test_client()
    authorization = {"Authorization": f"Bearer {worker.token()}"}

    @settings(
        max_examples=150,
        deadline=None,
        database=None,
        suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
    )
    @given(
        body=bodies,
        attributes_as_headers=st.dictionaries(
            st.sampled_from(
                [
                    "generation",
                    "run_id",
                    "x-goog-pubsub-delivery-attempt",
                    "x-goog-pubsub-message-id",
                ]
            ),
            st.text(alphabet=st.characters(min_codepoint=33, max_codepoint=126), max_size=12),
        ),
    )
    def check(body: bytes, attributes_as_headers: dict[str, str]) -> None:
        response = client.post("/", data=body, headers={**authorization, **attributes_as_headers})
        assert response.status_code == 200, (body[:200], response.status_code)
        answer: dict[str, Any] = response.get_json()
        assert answer["outcome"] == "rejected"
        stored = worker.rejections.get(answer["rejection_id"])
        assert stored is not None and stored.reason == answer["reason"]

    check()


def test_oversize_body_is_recorded_with_its_size_and_first_bytes(worker: WorkerHarness) -> None:
    body = b'{"message": ' + b" " * (70 * 1024) + b"}"
    response = worker.post(body)
    assert response.status_code == 200
    stored = worker.rejections.get(response.json()["rejection_id"])
    assert stored is not None
    assert (stored.reason, stored.payload_bytes, stored.truncated) == (
        "body_too_large",
        len(body),
        True,
    )
    assert stored.payload.startswith('{"message": ')


def test_unknown_job_is_acknowledged_and_recorded_with_its_id(worker: WorkerHarness) -> None:
    response = worker.post(envelope("never-scheduled", 1, message_id="m-77"))
    assert response.status_code == 200
    stored = worker.rejections.get(response.json()["rejection_id"])
    assert stored is not None
    assert (stored.reason, stored.job_id, stored.message_id) == (
        "unknown_job",
        "never-scheduled",
        "m-77",
    )
    assert "authorization" not in stored.headers


@pytest.mark.production_strict("OIDC token on push")
def test_malformed_push_through_pubsub_is_acknowledged_once_not_dead_lettered(
    worker: WorkerHarness, push: PushFactory
) -> None:
    """Production push with `oidc_token` sends a Google-signed ID token in `Authorization`
    (https://cloud.google.com/pubsub/docs/authenticate-push-subscriptions); Google's
    emulator sends none, so the worker behind its Cloud Run front end answers 403.
    """
    topic = push()
    # No generation attribute: the worker can never process this message.
    topic.publisher.publish(topic.topic, b"job-without-generation").result(timeout=30)
    wait_until(lambda: len(worker.rejected_documents()) == 1, what="the rejection record")
    # A valid job behind it still goes through.
    worker.schedule("job-1", worker.upload("src/a.mp4"))
    claimed = worker.claim_one("job-1")
    worker.enqueue(claimed, topic.publish(claimed))
    wait_until(lambda: worker.job("job-1").state is State.COMPLETED, what="job-1 completed")

    [record] = worker.rejected_documents()
    assert record["reason"] == "missing_generation"
    # The stored payload is the request as it arrived: the envelope around the data.
    assert base64.b64encode(b"job-without-generation").decode() in record["payload"]
    assert worker.counter.statuses[200] == 1
    assert worker.counter.statuses[503] == 0 and worker.counter.statuses[500] == 0
