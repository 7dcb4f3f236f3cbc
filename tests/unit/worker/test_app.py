"""The HTTP layer: push semantics, auth mapping, and bad input acknowledged and recorded."""

from __future__ import annotations

import base64
import json
import logging
from datetime import UTC, datetime
from typing import Any

import flask
import pytest
from flask.testing import FlaskClient

from services.edge.auth_errors import CertsUnavailable, Forbidden, Unauthenticated
from services.jobs.actions import Action, ActionRequest, ActionResult
from services.jobs.clock import FakeClock
from services.jobs.errors import StoreUnavailable, TransientError
from services.jobs.state import State
from services.store.rejections import Rejection
from services.telemetry import metrics
from services.worker.actions import ActionRegistry
from services.worker.app import create_app
from services.worker.settings import WorkerSettings
from tests.unit.worker.fakes import MemoryStore

SETTINGS = WorkerSettings(
    project="demo",
    audience="https://worker.example",
    allowed_invokers=frozenset({"push@demo.iam.gserviceaccount.com"}),
    max_body_bytes=2048,
)


class Verifier:
    def __init__(self, error: Exception | None = None) -> None:
        self.error = error

    def verify_request(self, headers: object) -> None:
        if self.error is not None:
            raise self.error


class Recorder:
    def __init__(self, error: Exception | None = None) -> None:
        self.rejections: list[Rejection] = []
        self.error = error

    def record(self, rejection: Rejection) -> str:
        if self.error is not None:
            raise self.error
        self.rejections.append(rejection)
        return f"r-{len(self.rejections)}"


class Env:
    def __init__(self, verifier_error: Exception | None = None) -> None:
        self.clock = FakeClock(datetime(2026, 1, 1, tzinfo=UTC))
        self.store = MemoryStore(self.clock)
        self.recorder = Recorder()
        self.failures: list[Exception] = []
        self.app = create_app(
            SETTINGS,
            clock=self.clock,
            store=self.store,
            actions=ActionRegistry([Action("media.delete_source", self._run)]),
            verifier=Verifier(verifier_error),
            rejections=self.recorder,
            worker_id="w-1",
        )
        self.client: FlaskClient = self.app.test_client()

    def _run(self, request: ActionRequest) -> ActionResult:
        if self.failures:
            raise self.failures.pop(0)
        return ActionResult("deleted")

    def post(self, body: bytes, headers: dict[str, str] | None = None) -> Any:
        return self.client.post(
            "/", data=body, headers={"Authorization": "Bearer t", **(headers or {})}
        )


def envelope(job_id: str = "job-1", generation: str = "1", attempt: int = 1) -> bytes:
    return json.dumps(
        {
            "message": {
                "data": base64.b64encode(job_id.encode()).decode(),
                "attributes": {"generation": generation, "run_id": "run-1"},
                "messageId": "m-1",
            },
            "subscription": "projects/demo/subscriptions/jobs",
            "deliveryAttempt": attempt,
        }
    ).encode()


def test_completed_job_answers_204() -> None:
    env = Env()
    env.store.add("job-1")
    response = env.post(envelope())
    assert response.status_code == 204
    assert env.store.jobs["job-1"].state is State.COMPLETED


def test_duplicate_answers_200_with_the_outcome() -> None:
    env = Env()
    env.store.add("job-1")
    env.post(envelope())
    response = env.post(envelope())
    assert response.status_code == 200
    assert response.get_json() == {"outcome": "duplicate", "job_id": "job-1"}


def test_unwrapped_push_is_processed_too() -> None:
    env = Env()
    env.store.add("job-1")
    response = env.post(b"job-1", {"generation": "1", "x-goog-pubsub-message-id": "m-1"})
    assert response.status_code == 204


def test_transient_failure_answers_503_and_a_live_lease_429() -> None:
    env = Env()
    env.store.add("job-1")
    env.failures.append(TransientError("storage 503"))
    assert env.post(envelope()).status_code == 503
    env.store.start("job-1", 1, SETTINGS.lease, "other")
    response = env.post(envelope())
    assert response.status_code == 429 and "Retry-After" in response.headers


@pytest.mark.parametrize(
    ("error", "status"),
    [
        (Unauthenticated("no token"), 401),
        (Forbidden("wrong caller"), 403),
        (CertsUnavailable(), 503),
    ],
)
def test_auth_failures_map_to_401_403_503_and_nothing_is_processed(
    error: Exception, status: int
) -> None:
    env = Env(verifier_error=error)
    env.store.add("job-1")
    assert env.post(envelope()).status_code == status
    assert env.store.calls == []
    assert env.recorder.rejections == []


def test_malformed_envelope_is_acknowledged_recorded_and_logged(
    caplog: pytest.LogCaptureFixture,
) -> None:
    env = Env()
    with caplog.at_level(logging.INFO):
        response = env.post(b'{"message": {"data": "%%%"}}')
    assert response.status_code == 200
    assert response.get_json()["reason"] == "bad_base64"
    [rejection] = env.recorder.rejections
    assert rejection.payload == '{"message": {"data": "%%%"}}'
    assert "authorization" not in rejection.headers
    events = [getattr(r, "fields", {}).get(metrics.LOG_EVENT) for r in caplog.records]
    assert events.count(metrics.EVENT_REJECTED) == 1
    assert events.count(metrics.EVENT_WORKER_OUTCOME) == 1


def test_unknown_job_is_acknowledged_and_recorded_with_its_id(
    caplog: pytest.LogCaptureFixture,
) -> None:
    env = Env()
    with caplog.at_level(logging.INFO):
        response = env.post(envelope("ghost"))
    events = [getattr(r, "fields", {}).get(metrics.LOG_EVENT) for r in caplog.records]
    assert events.count(metrics.EVENT_REJECTED) == 1
    assert events.count(metrics.EVENT_WORKER_OUTCOME) == 1
    assert response.status_code == 200
    [rejection] = env.recorder.rejections
    assert (rejection.reason, rejection.job_id, rejection.message_id) == (
        "unknown_job",
        "ghost",
        "m-1",
    )


def test_oversize_body_is_refused_without_reading_it_all() -> None:
    env = Env()
    body = b"x" * 100_000
    response = env.post(body)
    assert response.status_code == 200
    [rejection] = env.recorder.rejections
    assert rejection.reason == "body_too_large"
    assert (rejection.payload_bytes, rejection.truncated) == (100_000, True)
    assert len(rejection.payload) == 4096


def test_rejection_is_still_acknowledged_when_firestore_is_down() -> None:
    env = Env()
    env.recorder.error = StoreUnavailable()
    assert env.post(b"\xff\xfe").status_code == 200


def test_only_post_is_accepted() -> None:
    env = Env()
    assert env.client.get("/").status_code == 405


def test_app_is_a_flask_app_with_the_handler_registered() -> None:
    assert isinstance(Env().app, flask.Flask)


def test_any_path_reaches_the_handler_as_under_functions_framework() -> None:
    env = Env()
    env.store.add("job-1")
    assert (
        env.client.post(
            "/push/jobs", data=envelope(), headers={"Authorization": "Bearer t"}
        ).status_code
        == 204
    )


def _outcome_lines(caplog: pytest.LogCaptureFixture) -> list[tuple[int, dict[str, Any]]]:
    return [
        (r.levelno, getattr(r, "fields", {}))
        for r in caplog.records
        if getattr(r, "fields", {}).get(metrics.LOG_EVENT) == metrics.EVENT_WORKER_OUTCOME
    ]


def test_an_unexpected_error_answers_500_after_one_error_line_naming_the_job(
    caplog: pytest.LogCaptureFixture, monkeypatch: pytest.MonkeyPatch
) -> None:
    env = Env()
    env.store.add("job-1")

    def broken(*args: Any, **kwargs: Any) -> Any:
        raise RuntimeError("a bug in the store")

    monkeypatch.setattr(env.store, "start", broken)
    caplog.set_level(logging.INFO)

    response = env.post(envelope())

    assert response.status_code == 500
    ((level, fields),) = _outcome_lines(caplog)
    assert level == logging.ERROR
    assert (fields[metrics.LOG_OUTCOME], fields["job_id"], fields["generation"]) == (
        "internal_error",
        "job-1",
        1,
    )
    assert fields["error_type"] == "RuntimeError"
    assert env.store.jobs["job-1"].state is State.ENQUEUED


def test_an_unexpected_error_before_parsing_is_logged_without_a_job_id(
    caplog: pytest.LogCaptureFixture,
) -> None:
    env = Env(verifier_error=RuntimeError("a bug in the verifier"))
    caplog.set_level(logging.INFO)

    response = env.post(envelope())

    assert response.status_code == 500
    ((level, fields),) = _outcome_lines(caplog)
    assert (level, fields[metrics.LOG_OUTCOME], fields["job_id"]) == (
        logging.ERROR,
        "internal_error",
        None,
    )


def test_a_session_stops_reading_an_environment_without_its_settings(
    tmp_path: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    import requests

    from services.worker.app import read_environment_once

    monkeypatch.setenv("HOME", str(tmp_path))  # no netrc file there
    home = {"HOME": str(tmp_path), "PATH": "/usr/bin"}
    session = requests.Session()
    assert read_environment_once(session, home) is True
    assert session.trust_env is False
    # A CA bundle is what every request would have verified against: the session keeps it.
    session = requests.Session()
    both = {**home, "CURL_CA_BUNDLE": "/etc/curl.pem", "REQUESTS_CA_BUNDLE": "/etc/ca.pem"}
    assert read_environment_once(session, both) is True
    assert (session.trust_env, session.verify) == (False, "/etc/ca.pem")
    for name, value in [
        ("HTTPS_PROXY", "http://proxy:3128"),
        ("no_proxy", "localhost"),
        ("NETRC", "/secrets/netrc"),
    ]:
        session = requests.Session()
        assert read_environment_once(session, {**home, name: value}) is False
        assert session.trust_env is True, name


def test_a_netrc_file_keeps_the_session_reading_it(
    tmp_path: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    import requests

    from services.worker.app import read_environment_once

    (tmp_path / ".netrc").write_text("machine storage.googleapis.com login a password b\n")
    monkeypatch.setenv("HOME", str(tmp_path))
    session = requests.Session()
    assert read_environment_once(session, {"HOME": str(tmp_path)}) is False
    assert session.trust_env is True
