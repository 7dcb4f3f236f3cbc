"""The API wired to the emulators: the real Firestore client, real OIDC tokens, a real port.

`api_rig` builds the app with `create_app` (which builds the FirestoreJobStore itself) on a
FakeClock, and serves it on 127.0.0.1 with a threaded server, so requests go over HTTP with
`requests` and concurrency is real. It is the service alone (direct mode), tokens addressed to
a fixed audience. `fronted_api_rig` is the production path: the same app behind the local Cloud
Run front end (emulators/cloudrun) deployed as infra deploys the api (its name, timeout,
concurrency; run.invoker for CALLER only), configured as behind Cloud Run IAM, tokens
addressed to the front end's URL; `container_url` reaches the app as only Cloud Run could.
"""

from __future__ import annotations

import threading
from collections.abc import Iterator, Mapping
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
from services.jobs.http_targets import HttpTarget
from services.local.cloud_run import API_CONCURRENCY, API_SERVICE, API_TIMEOUT_S
from tests.fixtures.cloudrun import front_end

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
    audience: str = AUDIENCE
    container_url: str = ""  # behind a front end: the app's own port

    def token(self, email: str = CALLER, audience: str | None = None, **kwargs: Any) -> str:
        token: str = self.oidc.issuer.mint(audience or self.audience, email, **kwargs)
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
    yield from _rig(firestore_client, firestore_project, oidc_server, cloud_run=False)


@pytest.fixture
def fronted_api_rig(
    firestore_client: firestore.Client, firestore_project: str, oidc_server: Any
) -> Iterator[ApiRig]:
    yield from _rig(firestore_client, firestore_project, oidc_server, cloud_run=True)


def _rig(
    firestore_client: firestore.Client,
    project: str,
    oidc_server: Any,
    *,
    cloud_run: bool,
    callers: tuple[str, ...] = (CALLER,),
    trusted: tuple[str, ...] = (),
    http_targets: Mapping[str, HttpTarget] | None = None,
) -> Iterator[ApiRig]:
    """The API (behind a front end when `cloud_run`) for `callers`, `trusted` among them,
    scheduling `http.request` jobs to `http_targets` (its JOBS_HTTP_TARGETS)."""
    # Served first (a front end needs its upstream), the app plugged in once built.
    apps: list[Any] = []
    server = make_server("127.0.0.1", 0, lambda env, start: apps[0](env, start), threaded=True)
    thread = threading.Thread(target=server.serve_forever, name="api-http", daemon=True)
    thread.start()
    container_url = f"http://127.0.0.1:{server.server_port}"
    front = None
    if cloud_run:
        front = front_end(
            container_url,
            oidc_server.certs_url,
            invokers=list(callers),
            service=API_SERVICE,
            timeout_s=API_TIMEOUT_S,
            concurrency=API_CONCURRENCY,
        )
    audience = front.url if front is not None else AUDIENCE
    settings = ApiSettings(
        project=project,
        audience=audience,
        allowed_callers=frozenset(callers),
        certs_url=oidc_server.certs_url,
        behind_cloud_run_iam=cloud_run,
        trusted_callers=frozenset(trusted),
        http_targets=dict(http_targets or {}),
    )
    clock = FakeClock(T0)
    apps.append(create_app(settings, clock=clock, firestore_client=firestore_client))
    session = requests.Session()
    url = front.url if front is not None else container_url
    try:
        yield ApiRig(url, firestore_client, clock, oidc_server, session, audience, container_url)
    finally:
        session.close()
        if front is not None:
            front.stop()
        server.shutdown()
        server.server_close()
        thread.join(timeout=5)


def fields_of(response: requests.Response) -> list[str]:
    error = response.json()["error"]
    assert error["code"] == response.status_code
    return [v["field"] for d in error.get("details", []) for v in d["fieldViolations"]]
