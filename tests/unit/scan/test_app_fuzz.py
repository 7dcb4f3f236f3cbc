"""Fuzzing the scan's request body with a valid token: the answer is never a 5xx, and every
body but the allowed shapes (empty, or a JSON object of known options) gets a 400. Also the
last-resort handler: an unexpected error is one structured ERROR line and a JSON 500."""

from __future__ import annotations

import json
import logging
from typing import Any

import flask
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from services.jobs.clock import FakeClock
from services.scan.app import EVENT_SCAN_CRASHED, create_app
from services.scan.trigger import MAX_BODY_BYTES
from services.telemetry.metrics import NullSink
from tests.unit.scan.fakes import T0, FakePublisher, FakeStore
from tests.unit.scan.test_app import GOOD, SETTINGS, FakeVerifier, JsonLines, Recorder


def _app(store: FakeStore | None = None) -> flask.Flask:
    return create_app(
        SETTINGS,
        clock=FakeClock(T0),
        store=store or FakeStore(due=["a", "b"]),
        publisher=FakePublisher(),
        metrics=NullSink(),
        verifier=FakeVerifier(),
        runs=Recorder(),
    )


_APP = _app()


def _allowed(body: bytes) -> bool:
    """The oracle, written independently of parse_trigger."""
    if not body.strip():
        return True
    try:
        value = json.loads(body.decode("utf-8"))
    except (ValueError, RecursionError):
        return False
    return (
        isinstance(value, dict)
        and set(value) <= {"dry_run"}
        and all(type(v) is bool for v in value.values())
    )


_JSON = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False) | st.text(max_size=10),
    lambda inner: (
        st.lists(inner, max_size=3)
        | st.dictionaries(
            st.sampled_from(["dry_run", "x", ""]) | st.text(max_size=5), inner, max_size=3
        )
    ),
    max_leaves=12,
)
_BODY = (
    st.binary(max_size=MAX_BODY_BYTES + 8)
    | _JSON.map(lambda value: json.dumps(value).encode())
    | st.integers(min_value=1, max_value=MAX_BODY_BYTES).map(lambda n: b"[" * n)
    | st.integers(min_value=1, max_value=MAX_BODY_BYTES // 6).map(lambda n: b'{"a":' * n)
    | st.sampled_from([b"", b" ", b"{}", b'{"dry_run": true}', b'{"dry_run": false}'])
)


def test_a_body_of_1024_open_brackets_is_a_400_not_a_500() -> None:
    response = _APP.test_client().post(
        "/", data=b"[" * MAX_BODY_BYTES, headers={"Authorization": GOOD}
    )
    assert response.status_code == 400
    assert "not valid JSON" in response.get_json()["detail"]


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(_BODY)
def test_any_body_with_a_valid_token_is_200_when_allowed_and_400_otherwise(body: bytes) -> None:
    response = _APP.test_client().post("/", data=body, headers={"Authorization": GOOD})
    assert response.status_code < 500
    expected = 200 if len(body) <= MAX_BODY_BYTES and _allowed(body) else 400
    assert response.status_code == expected, response.get_data(as_text=True)
    assert response.is_json


class _BrokenStore(FakeStore):
    def get_control(self) -> Any:
        raise RuntimeError("a bug nobody anticipated")


def test_an_unexpected_error_is_one_structured_error_line_and_a_json_500() -> None:
    app = _app(_BrokenStore())
    lines = JsonLines()
    root = logging.getLogger()
    root.addHandler(lines)
    try:
        response = app.test_client().post("/", headers={"Authorization": GOOD})
    finally:
        root.removeHandler(lines)
    assert response.status_code == 500
    body = response.get_json()
    assert body["error"] == "internal error"
    crashed = [line for line in lines.lines if line.get("event") == EVENT_SCAN_CRASHED]
    assert len(crashed) == 1
    assert crashed[0]["severity"] == "ERROR"
    assert crashed[0]["run_id"] == body["run_id"]
    assert "RuntimeError" in crashed[0]["error_type"]


@pytest.mark.parametrize("body", [b"[" * 100, b"[" * MAX_BODY_BYTES, b'{"a":' * 200])
def test_deep_nesting_is_refused_as_invalid_json(body: bytes) -> None:
    response = _APP.test_client().post("/", data=body, headers={"Authorization": GOOD})
    assert response.status_code == 400
