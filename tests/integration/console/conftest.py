"""The console wired to the emulator: the real Firestore client, IAP assertions from a local
ES256 signer whose keys the console fetches over HTTP (tests/fixtures/iap.py), Flask's test
client for the requests."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any

import flask
import pytest
from google.cloud import firestore

from services.console.app import CSRF_COOKIE, create_app
from services.console.identity import IAP_HEADER
from services.console.settings import ConsoleSettings
from services.jobs.clock import FakeClock
from services.jobs.model import NewJob
from services.store.job_store import FirestoreJobStore
from tests.fixtures.iap import IapIssuer, iap_issuer  # noqa: F401 (the fixture)

T0 = datetime(2026, 6, 1, 12, 30, tzinfo=UTC)
AUDIENCE = "/projects/123456/locations/europe-west1/services/jobs-console"
OPERATOR = "ops@example.com"
VIEWER = "viewer@example.com"


@dataclass
class Console:
    app: flask.Flask
    client: Any  # flask's test client
    store: FirestoreJobStore
    clock: FakeClock
    iap: IapIssuer | None

    def headers(self, email: str = OPERATOR, **mint: Any) -> dict[str, str]:
        if self.iap is None:
            return {}
        return {IAP_HEADER: self.iap.mint(email, AUDIENCE, **mint)}

    def get(self, path: str, email: str = OPERATOR, **kw: Any) -> Any:
        return self.client.get(path, headers=self.headers(email), **kw)

    def csrf(self, email: str = OPERATOR) -> str:
        """The CSRF token the browser holds after a first page (its cookie)."""
        self.get("/", email)
        cookie = self.client.get_cookie(CSRF_COOKIE)
        assert cookie is not None
        return str(cookie.value)

    def post(self, path: str, data: dict[str, Any], email: str = OPERATOR, **kw: Any) -> Any:
        return self.client.post(path, data=data, headers=self.headers(email), **kw)


def _console(client: firestore.Client, settings: ConsoleSettings, iap: IapIssuer | None) -> Console:
    clock = FakeClock(T0)
    app = create_app(settings, clock=clock, firestore_client=client)
    return Console(app, app.test_client(), FirestoreJobStore(client, clock), clock, iap)


@pytest.fixture
def console(
    firestore_client: firestore.Client,
    firestore_project: str,
    iap_issuer: IapIssuer,  # noqa: F811
) -> Console:
    """Behind (a local stand-in for) IAP: one operator, one viewer."""
    settings = ConsoleSettings.from_env(
        {
            "JOBS_PROJECT": firestore_project,
            "JOBS_CONSOLE_IAP_AUDIENCE": AUDIENCE,
            "JOBS_CONSOLE_IAP_KEYS_URL": iap_issuer.keys_url,
            "JOBS_CONSOLE_OPERATORS": OPERATOR,
            "JOBS_CONSOLE_VIEWERS": VIEWER,
        }
    )
    return _console(firestore_client, settings, iap_issuer)


@pytest.fixture
def stand_in_console(firestore_client: firestore.Client, firestore_project: str) -> Console:
    """As `make run` serves it: a stand-in identity, no IAP."""
    settings = ConsoleSettings.from_env(
        {"JOBS_PROJECT": firestore_project, "JOBS_CONSOLE_STAND_IN_IDENTITY": OPERATOR}
    )
    return _console(firestore_client, settings, None)


@pytest.fixture
def plant(console: Console) -> Callable[..., list[str]]:
    """Schedule `count` jobs due `due` after T0 through the store (IDs `prefix-000`...)."""

    def schedule(
        count: int, due: timedelta = timedelta(hours=1), prefix: str = "job", subject: str = "media"
    ) -> list[str]:
        ids = [f"{prefix}-{n:03d}" for n in range(count)]
        jobs = [
            NewJob(
                job_id,
                "media.delete_source",
                f"{subject}-{job_id}",
                T0 + due,
                {"bucket": "media-src", "object": f"{job_id}/source.mp4"},
            )
            for job_id in ids
        ]
        for start in range(0, count, 500):
            console.store.schedule_many(jobs[start : start + 500], by="test")
        return ids

    return schedule
