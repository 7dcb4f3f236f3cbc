"""An API app on the fakes: `api.post(path, json=...)`, `api.store`, `api.clock`."""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

import flask
import pytest

from services.api.app import create_app
from services.api.settings import ApiSettings
from services.jobs.clock import FakeClock
from tests.unit.api.fakes import GOOD, T0, FakeStore, FakeVerifier


@dataclass
class Api:
    app: flask.Flask
    store: FakeStore
    clock: FakeClock

    def request(
        self,
        method: str,
        path: str,
        body: Any = None,
        *,
        raw: bytes | None = None,
        auth: str | None = GOOD,
        content_type: str = "application/json",
        headers: dict[str, str] | None = None,
    ) -> Any:
        sent = dict(headers or {})
        if auth is not None:
            sent["Authorization"] = auth
        data = raw if raw is not None else (b"" if body is None else json.dumps(body).encode())
        return self.app.test_client().open(
            path, method=method, data=data, headers=sent, content_type=content_type
        )

    def post(self, path: str, body: Any = None, **kwargs: Any) -> Any:
        return self.request("POST", path, body, **kwargs)

    def get(self, path: str, **kwargs: Any) -> Any:
        return self.request("GET", path, **kwargs)


SETTINGS = ApiSettings(
    project="test-project",
    audience="https://api.example.run.app",
    allowed_callers=frozenset({"producer@test-project.iam.gserviceaccount.com"}),
)


@pytest.fixture
def api() -> Api:
    clock = FakeClock(T0)
    store = FakeStore(clock)
    app = create_app(SETTINGS, clock=clock, store=store, verifier=FakeVerifier())
    return Api(app, store, clock)
