"""With Firestore unreachable the worker answers 503 (Pub/Sub redelivers) within its
Firestore timeout, for the stores it builds itself from its settings: nothing listens, or a
listener never answers. Its one outcome line says `store_unavailable`."""

from __future__ import annotations

import logging
import socket
from collections.abc import Iterator
from typing import Any

import pytest

from services.jobs.actions import Action, ActionRequest, ActionResult
from services.jobs.clock import FakeClock
from services.telemetry import metrics
from services.worker.actions import ActionRegistry
from services.worker.app import create_app
from services.worker.media import ACTION_NAME
from services.worker.settings import WorkerSettings
from tests.integration.worker.harness import PUSHER, START, envelope

AUDIENCE = "http://worker.test/"


def _never(request: ActionRequest) -> ActionResult:
    raise AssertionError("the action must not run without a lease")


@pytest.fixture(params=["refused", "silent"])
def unreachable(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        address = f"127.0.0.1:{sock.getsockname()[1]}"
        if request.param == "silent":
            sock.listen(16)  # the kernel completes handshakes; nobody ever answers
        else:
            sock.close()  # nothing listens on this port
        monkeypatch.setenv("FIRESTORE_EMULATOR_HOST", address)
        yield


def test_the_worker_answers_503_when_firestore_is_unreachable(
    unreachable: None, oidc_server: Any, caplog: pytest.LogCaptureFixture
) -> None:
    settings = WorkerSettings(
        project="unreachable",
        audience=AUDIENCE,
        allowed_invokers=frozenset({PUSHER}),
        certs_url=oidc_server.certs_url,
        firestore_timeout_s=0.1,
    )
    app = create_app(
        settings,
        clock=FakeClock(START),
        actions=ActionRegistry([Action(ACTION_NAME, _never)]),
        worker_id="worker-1",
    )
    token = oidc_server.issuer.mint(AUDIENCE, PUSHER)
    caplog.set_level(logging.INFO)

    response = app.test_client().post(
        "/", data=envelope("job-1", 1), headers={"Authorization": f"Bearer {token}"}
    )

    assert response.status_code == 503
    outcomes = [
        getattr(r, "fields", {})
        for r in caplog.records
        if getattr(r, "fields", {}).get(metrics.LOG_EVENT) == metrics.EVENT_WORKER_OUTCOME
    ]
    assert [o[metrics.LOG_OUTCOME] for o in outcomes] == ["store_unavailable"]
