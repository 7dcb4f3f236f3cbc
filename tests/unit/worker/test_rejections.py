"""Rejection records: bounded payload, text or base64, only safe headers."""

from __future__ import annotations

import base64
import datetime

from services.store.rejections import PAYLOAD_LIMIT, kept_headers, rejection_of

NOW = datetime.datetime(2026, 1, 1, tzinfo=datetime.UTC)


def test_text_payload_is_kept_as_text() -> None:
    rejection = rejection_of("bad_json", "x", b"{oops", {}, received_at=NOW)
    assert (rejection.payload, rejection.payload_encoding) == ("{oops", "utf-8")
    assert (rejection.payload_bytes, rejection.truncated) == (5, False)
    assert rejection.expire_at == NOW + datetime.timedelta(days=30)


def test_binary_payload_is_kept_as_base64() -> None:
    body = bytes(range(256))
    rejection = rejection_of("bad_job_id", "x", body, {}, received_at=NOW)
    assert rejection.payload_encoding == "base64"
    assert base64.b64decode(rejection.payload) == body
    assert rejection.payload_prefix() == body


def test_large_payload_is_truncated_and_its_full_size_recorded() -> None:
    body = b"a" * (PAYLOAD_LIMIT - 1) + "é".encode() + b"b" * 100
    rejection = rejection_of("body_too_large", "x", body, {}, received_at=NOW, body_bytes=10**6)
    assert rejection.payload_encoding == "utf-8"
    assert rejection.payload == "a" * (PAYLOAD_LIMIT - 1)
    assert (rejection.payload_bytes, rejection.truncated) == (10**6, True)


def test_credentials_are_never_kept_but_pubsub_metadata_is() -> None:
    headers = {
        "Authorization": "Bearer secret",
        "Cookie": "c",
        "Content-Type": "application/json",
        "X-Goog-PubSub-Message-Id": "m-1",
        "generation": "3",
    }
    assert kept_headers(headers) == {
        "content-type": "application/json",
        "x-goog-pubsub-message-id": "m-1",
        "generation": "3",
    }
