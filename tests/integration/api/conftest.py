"""The API wired to the emulators: the real Firestore client, real OIDC tokens, a real port.

`api_rig` builds the app with `create_app` (which builds the FirestoreJobStore itself) on a
FakeClock, and serves it on 127.0.0.1 with a threaded server, so requests go over HTTP with
`requests` and concurrency is real.
"""

from __future__ import annotations

import threading
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

import pytest
import requests
from google.cloud import firestore
from werkzeug.serving import make_server

from services.api.app import create_app
from services.api.settings import ApiSettings
from services.jobs import schema
from services.jobs.clock import FakeClock

T0 = datetime(2026, 6, 1, 12, 0, tzinfo=UTC)
CALLER = "producer@test-project.iam.gserviceaccount.com"
AUDIENCE = "https://api-test.a.run.app"


@dataclass
class ApiRig:
    url: str
    client: firestore.Client
    clock: FakeClock
    oidc: Any
    session: requests.Session

    def token(self, email: str = CALLER, audience: str = AUDIENCE, **kwargs: Any) -> str:
        token: str = self.oidc.issuer.mint(audience, email, **kwargs)
        return token

    def call(
        self,
        method: str,
        path: str,
        body: Any = None,
        *,
        raw: bytes | None = None,
        token: str | None = None,
        headers: dict[str, str] | None = None,
    ) -> requests.Response:
        sent = {"Authorization": f"Bearer {token or self.token()}", **(headers or {})}
        if raw is not None:
            sent.setdefault("Content-Type", "application/json")
            return self.session.request(method, self.url + path, data=raw, headers=sent, timeout=30)
        return self.session.request(method, self.url + path, json=body, headers=sent, timeout=30)

    def document(self, job_id: str) -> dict[str, Any] | None:
        """The raw stored document, or None."""
        snapshot = self.client.collection(schema.JOBS).document(job_id).get()
        return snapshot.to_dict() if snapshot.exists else None


@pytest.fixture
def api_rig(
    firestore_client: firestore.Client, firestore_project: str, oidc_server: Any
) -> Iterator[ApiRig]:
    settings = ApiSettings(
        project=firestore_project,
        audience=AUDIENCE,
        allowed_callers=frozenset({CALLER}),
        certs_url=oidc_server.certs_url,
    )
    clock = FakeClock(T0)
    app = create_app(settings, clock=clock, firestore_client=firestore_client)
    server = make_server("127.0.0.1", 0, app, threaded=True)
    thread = threading.Thread(target=server.serve_forever, name="api-http", daemon=True)
    thread.start()
    session = requests.Session()
    try:
        yield ApiRig(
            f"http://127.0.0.1:{server.server_port}", firestore_client, clock, oidc_server, session
        )
    finally:
        session.close()
        server.shutdown()
        server.server_close()
        thread.join(timeout=5)


def fields_of(response: requests.Response) -> list[str]:
    error = response.json()["error"]
    assert error["code"] == response.status_code
    return [v["field"] for d in error.get("details", []) for v in d["fieldViolations"]]
