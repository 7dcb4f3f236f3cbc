"""The deployed entry point: functions-framework's app for `--target=worker`, configured only
through JOBS_* variables, building its own real clients against the emulators."""

from __future__ import annotations

import logging
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import functions_framework
import google.cloud.storage as storage
import pytest
from google.cloud import firestore

from services.edge import settings as common
from services.edge import startup
from services.jobs.clock import SystemClock
from services.jobs.model import NewJob
from services.jobs.state import State
from services.store.job_store import FirestoreJobStore
from services.worker import main
from services.worker import settings as keys
from tests.fixtures.store import mark_enqueued
from tests.integration.worker.harness import PUSHER, envelope

AUDIENCE = "https://worker-abc123-uc.a.run.app/"


@pytest.fixture
def entry_point_env(
    monkeypatch: pytest.MonkeyPatch, firestore_project: str, oidc_server: Any
) -> Iterator[None]:
    for key, value in {
        common.PROJECT: firestore_project,
        keys.WORKER_AUDIENCE: AUDIENCE,
        keys.WORKER_ALLOWED_INVOKERS: PUSHER,
        common.OIDC_CERTS_URL: oidc_server.certs_url,
        common.LOG_LEVEL: "WARNING",
    }.items():
        monkeypatch.setenv(key, value)
    monkeypatch.setattr(main, "_shared_handler", startup.SharedHandler(main._build))
    root = logging.getLogger()
    handlers, level = list(root.handlers), root.level
    yield
    root.handlers[:] = handlers
    root.setLevel(level)


def test_functions_framework_target_processes_a_push_end_to_end(
    entry_point_env: None,
    firestore_client: firestore.Client,
    storage_client: storage.Client,
    storage_bucket: storage.Bucket,
    oidc_server: Any,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    storage_bucket.blob("src/a.mp4").upload_from_string(b"video")
    store = FirestoreJobStore(firestore_client, SystemClock())
    store.schedule(
        NewJob(
            "job-1",
            "media.delete_source",
            "media-1",
            SystemClock().now(),
            {"bucket": storage_bucket.name, "object": "src/a.mp4"},
        )
    )
    [claimed] = store.claim_due(SystemClock().now(), "run-1", 10)
    mark_enqueued(store, claimed.job_id, claimed.generation, "m-1")
    source = Path(main.__file__)
    # create_app points the module-level `functions_framework.errorhandler` at its app; left
    # so, another entry point first imported later in this process would register its error
    # handler on this app after it served requests, which Flask refuses. Restored after.
    monkeypatch.setattr(functions_framework, "errorhandler", functions_framework.errorhandler)
    app = functions_framework.create_app(target="worker", source=str(source))
    client = app.test_client()
    token = oidc_server.issuer.mint(AUDIENCE, PUSHER)

    refused = client.post("/", data=envelope("job-1", claimed.generation))
    response = client.post(
        "/",
        data=envelope("job-1", claimed.generation),
        headers={"Authorization": f"Bearer {token}"},
    )

    assert refused.status_code == 401
    assert response.status_code == 204
    job = store.get("job-1")
    assert job is not None and job.state is State.COMPLETED
    assert not storage_bucket.blob("src/a.mp4").exists()
