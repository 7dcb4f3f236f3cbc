"""With Firestore unreachable the API answers 503 UNAVAILABLE with Retry-After, in the error
format, never a 500 or a hang (the store's call timeout bounds the wait)."""

from __future__ import annotations

import socket
from typing import Any

import pytest
from google.cloud import firestore

from services.api.app import create_app
from services.api.settings import ApiSettings
from services.jobs.clock import FakeClock
from tests.integration.api.conftest import AUDIENCE, CALLER, T0
from tests.unit.api.contract import schedule_body


def test_an_unreachable_firestore_is_503_with_retry_after(
    oidc_server: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    monkeypatch.setenv("FIRESTORE_EMULATOR_HOST", f"127.0.0.1:{port}")  # nothing listens
    client = firestore.Client(project="unreachable")
    settings = ApiSettings(
        project="unreachable",
        audience=AUDIENCE,
        allowed_callers=frozenset({CALLER}),
        certs_url=oidc_server.certs_url,
        firestore_timeout_s=0.2,
    )
    app = create_app(settings, clock=FakeClock(T0), firestore_client=client)
    token = oidc_server.issuer.mint(AUDIENCE, CALLER)
    headers = {"Authorization": f"Bearer {token}"}
    try:
        for method, path, body in [
            ("POST", "/v1/jobs", schedule_body()),
            ("GET", "/v1/jobs/job-1", None),
            ("POST", "/v1/jobs/job-1:cancel", None),
        ]:
            response = app.test_client().open(path, method=method, json=body, headers=headers)
            assert response.status_code == 503, response.get_data(as_text=True)
            assert response.headers["Retry-After"]
            assert response.get_json()["error"]["status"] == "UNAVAILABLE"
    finally:
        client.close()
