"""The HTTP mapping of the scan (Flask test client, fakes); the auth matrix with real tokens is
in tests/integration/scan."""

from __future__ import annotations

import json
import logging
from typing import Any

import flask
import pytest

from services.edge.auth import Caller, RequestHeaders, invoker_authorization
from services.edge.auth_errors import CertsUnavailable, Forbidden, Unauthenticated
from services.jobs.clock import FakeClock
from services.scan.app import EVENT_SCAN_RUN_UNRECORDED, create_app
from services.scan.settings import ScanSettings
from services.scan.summary import SUMMARY_KEYS
from services.store.runs import MAX_FAILURE_MESSAGE, RunLogError, ScanRun
from services.telemetry.log import JsonFormatter
from services.telemetry.metrics import InMemorySink
from tests.unit.scan.fakes import T0, FakePublisher, FakeStore

SETTINGS = ScanSettings(
    project="p1",
    topic="jobs",
    audience="https://scan.example",
    allowed_invokers=frozenset({"scheduler@p1.iam.gserviceaccount.com"}),
    max_per_run=50,
    page_size=10,
    metrics="none",
)
GOOD = "Bearer good.token.sig"


class FakeVerifier:
    def verify_request(self, headers: RequestHeaders) -> Caller:
        authorization = invoker_authorization(headers)
        if authorization == GOOD:
            return Caller("scheduler@p1.iam.gserviceaccount.com", "1", 0, 0)
        if authorization == "Bearer other.token.sig":
            raise Forbidden("caller 'x' is not allowed")
        if authorization == "Bearer certs.down.now":
            raise CertsUnavailable()
        raise Unauthenticated("missing Authorization header")


class Recorder:
    def __init__(self) -> None:
        self.runs: list[ScanRun] = []

    def record(self, run: ScanRun) -> None:
        self.runs.append(run)


def build(
    store: FakeStore | None = None, publisher: FakePublisher | None = None
) -> tuple[flask.Flask, FakeStore, InMemorySink, Recorder]:
    store = store or FakeStore(due=[f"j{i}" for i in range(30)])
    sink, recorder = InMemorySink(), Recorder()
    app = create_app(
        SETTINGS,
        clock=FakeClock(T0),
        store=store,
        publisher=publisher or FakePublisher(),
        metrics=sink,
        verifier=FakeVerifier(),
        runs=recorder,
    )
    return app, store, sink, recorder


def post(app: flask.Flask, body: Any = b"", auth: str | None = GOOD, **kw: Any) -> Any:
    headers = {"Authorization": auth} if auth else {}
    headers.update(kw.pop("headers", {}))
    return app.test_client().post("/", data=body, headers=headers, **kw)


def test_an_authenticated_empty_post_runs_a_scan_and_returns_the_summary() -> None:
    app, store, sink, recorder = build()
    response = post(app)
    assert response.status_code == 200
    body = response.get_json()
    assert tuple(body) == SUMMARY_KEYS
    assert (body["claimed"], body["published"], body["stopped_because"]) == (30, 30, "drained")
    assert len(store.enqueued) == 30
    assert [r.run_id for r in sink.reports] == [r.run_id for r in recorder.runs] == [body["run_id"]]


def test_dry_run_body_measures_without_claiming() -> None:
    app, store, _, _ = build()
    body = post(app, b'{"dry_run": true}', content_type="application/json").get_json()
    assert (body["dry_run"], body["claimed"], body["due_count"]) == (True, 0, 30)
    assert store.claim_calls == []


@pytest.mark.parametrize(
    ("auth", "status", "error"),
    [
        (None, 401, "unauthenticated"),
        ("Bearer garbage", 401, "unauthenticated"),
        ("Bearer other.token.sig", 403, "forbidden"),
        ("Bearer certs.down.now", 503, "token certs unavailable"),
    ],
)
def test_refused_callers_never_start_a_run(auth: str | None, status: int, error: str) -> None:
    app, store, sink, _ = build()
    response = post(app, auth=auth)
    assert response.status_code == status
    assert response.get_json()["error"] == error
    assert store.claim_calls == [] and sink.reports == []
    if status == 401:
        assert response.headers["WWW-Authenticate"] == "Bearer"


@pytest.mark.parametrize(
    "body", [b"{", b"[1]", b'{"dry_run": "yes"}', b'{"force": true}', b"x" * 5000]
)
def test_bad_bodies_are_refused_with_400_and_a_reason(body: bytes) -> None:
    app, store, _, _ = build()
    response = post(app, body)
    assert response.status_code == 400
    payload = response.get_json()
    assert payload["error"] == "bad request" and payload["detail"]
    assert store.claim_calls == []


def test_methods_other_than_post_are_refused() -> None:
    app, _, _, _ = build()
    response = app.test_client().get("/", headers={"Authorization": GOOD})
    assert response.status_code == 405


def test_an_unreachable_store_answers_503_with_a_clear_error() -> None:
    app, _, _, _ = build(store=FakeStore(unavailable={"get_control"}))
    response = post(app)
    assert response.status_code == 503
    assert response.get_json()["error"] == "firestore unavailable"


def test_an_unreachable_queue_answers_503_with_the_run_summary() -> None:
    app, store, _, _ = build(publisher=FakePublisher(fail=lambda _id: True))
    response = post(app)
    body = response.get_json()
    assert response.status_code == 503
    assert body["error"] == "pubsub unavailable"
    assert (body["published"], body["publish_failed"]) == (0, 10)
    assert len(store.failed) == 10


class JsonLines(logging.Handler):
    """Formats at emit time, as the real handler does, so bound context fields are kept."""

    def __init__(self) -> None:
        super().__init__(logging.DEBUG)
        self.setFormatter(JsonFormatter())
        self.lines: list[dict[str, Any]] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.lines.append(json.loads(self.format(record)))


def test_every_log_line_of_a_request_carries_trace_and_run_id_and_never_the_token() -> None:
    # A failed publish makes the mark threads log too: their lines need the context as well.
    publisher = FakePublisher(fail=lambda job_id: job_id == "b")
    app, _, _, _ = build(store=FakeStore(due=["a", "b"]), publisher=publisher)
    trace = "0123456789abcdef0123456789abcdef"
    handler = JsonLines()
    root = logging.getLogger()
    root.addHandler(handler)
    level = root.level
    root.setLevel(logging.DEBUG)
    try:
        response = post(app, headers={"X-Cloud-Trace-Context": f"{trace}/1;o=1"})
    finally:
        root.removeHandler(handler)
        root.setLevel(level)
    run_id = response.get_json()["run_id"]
    ours = [line for line in handler.lines if line["logger"].startswith("services.")]
    assert {line["logger"] for line in ours} >= {"services.scan.stager", "services.scan.app"}
    for line in ours:
        assert line["logging.googleapis.com/trace"] == f"projects/p1/traces/{trace}"
        assert line["run_id"] == run_id
    assert all("good.token.sig" not in json.dumps(line) for line in handler.lines)
    scan_lines = [line for line in ours if line.get("event") == "scan_run"]
    assert len(scan_lines) == 1
    assert (scan_lines[0]["published"], scan_lines[0]["publish_failed"]) == (1, 1)


def test_the_built_store_gets_the_terminal_retention_and_firestore_timeout() -> None:
    from dataclasses import replace
    from datetime import timedelta

    from services.scan.app import handler_of
    from services.store.job_store import FirestoreJobStore

    settings = replace(SETTINGS, terminal_retention_s=3 * 86400.0, firestore_timeout_s=2.5)
    app = create_app(
        settings,
        clock=FakeClock(T0),
        publisher=FakePublisher(),
        metrics=InMemorySink(),
        verifier=FakeVerifier(),
        runs=Recorder(),
        firestore_client=object(),  # the store only keeps it; nothing is called here
    )
    store = handler_of(app).scanner._store
    assert isinstance(store, FirestoreJobStore)
    assert store._docs.rules.retention == timedelta(days=3)
    assert store._docs.bounds.timeout_s == 2.5


# --- failed runs are recorded (issue 15, point 7) ---------------------------------------------


class DownRecorder:
    """A run log whose writes fail, as they do when Firestore is what failed the run."""

    def record(self, run: ScanRun) -> None:
        raise RunLogError(f"could not record scan run {run.run_id}: 503 unavailable")


def test_a_run_that_answers_503_before_it_counts_anything_is_recorded_as_failed() -> None:
    app, _, _, recorder = build(store=FakeStore(unavailable={"get_control"}))
    response = post(app)
    assert response.status_code == 503
    (run,) = recorder.runs
    assert run.run_id == response.get_json()["run_id"]
    assert run.failure is not None
    assert (run.failure.status, run.failure.kind) == (503, "firestore_unavailable")
    assert "get_control: firestore down" in run.failure.message
    assert (run.stopped_because, run.claimed, run.published) == ("unavailable", 0, 0)


def test_a_run_whose_firestore_went_away_mid_run_keeps_its_counts_in_the_failed_record() -> None:
    app, _, _, recorder = build(store=FakeStore(due=["a", "b"], unavailable={"backlog"}))
    response = post(app)
    assert response.status_code == 503
    (run,) = recorder.runs
    assert (run.claimed, run.published) == (2, 2)
    assert run.failure is not None and run.failure.kind == "firestore_unavailable"


def test_a_run_whose_every_publish_failed_is_recorded_again_with_its_failure() -> None:
    app, _, _, recorder = build(publisher=FakePublisher(fail=lambda _id: True))
    assert post(app).status_code == 503
    finished, failed = recorder.runs  # the scanner's record, then the failure's, same run
    assert finished.run_id == failed.run_id and finished.failure is None
    assert failed.failure is not None
    assert (failed.failure.status, failed.failure.kind) == (503, "pubsub_unavailable")
    assert (failed.publish_failed, failed.published) == (finished.publish_failed, 0)


def test_a_crashed_run_is_recorded_with_status_500_and_its_message_bounded() -> None:
    def crash() -> None:
        raise RuntimeError("x" * (MAX_FAILURE_MESSAGE * 3))

    app, _, _, recorder = build(store=FakeStore(due=["a"], on_claim=crash))
    response = post(app)
    assert response.status_code == 500
    assert response.get_json()["error"] == "internal error"
    (run,) = recorder.runs
    assert run.failure is not None
    assert (run.failure.status, run.failure.kind) == (500, "crashed")
    assert len(run.failure.message) == MAX_FAILURE_MESSAGE


def test_a_failed_run_that_cannot_be_recorded_still_answers_and_says_so_in_the_log(
    caplog: pytest.LogCaptureFixture,
) -> None:
    app = create_app(
        SETTINGS,
        clock=FakeClock(T0),
        store=FakeStore(unavailable={"get_control"}),
        publisher=FakePublisher(),
        metrics=InMemorySink(),
        verifier=FakeVerifier(),
        runs=DownRecorder(),
    )
    caplog.set_level(logging.WARNING)
    response = post(app)
    assert response.status_code == 503
    assert response.get_json()["error"] == "firestore unavailable"
    (line,) = [
        r
        for r in caplog.records
        if getattr(r, "fields", {}).get("event") == (EVENT_SCAN_RUN_UNRECORDED)
    ]
    assert line.fields["status"] == 503  # type: ignore[attr-defined]
    assert line.fields["error_kind"] == "firestore_unavailable"  # type: ignore[attr-defined]


@pytest.mark.parametrize("auth", [None, "Bearer other.token.sig", "Bearer certs.down.now"])
def test_a_request_never_authenticated_leaves_no_run_record(auth: str | None) -> None:
    # A refused caller started no run; recording one would let anyone write documents.
    app, _, _, recorder = build()
    assert post(app, auth=auth).status_code in (401, 403, 503)
    assert recorder.runs == []
