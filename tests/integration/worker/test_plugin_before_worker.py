"""A producer schedules a plug-in's action through the API before the worker has it (issue 32,
Measure): the API (with the plug-in installed) checks its params and accepts the jobs; the scan
publishes them and Pub/Sub pushes them to the worker, which lacks the action: every job is
deferred (`unknown_action`), none failed, no attempt spent. A worker revision with the plug-in
then completes each of them exactly once. Counts, not times (a FakeClock shared by the scan
and the worker)."""

from __future__ import annotations

import importlib
import threading
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
import requests
from google.cloud import firestore, pubsub_v1
from werkzeug.serving import make_server

from services.api.app import create_app as create_api
from services.api.settings import ApiSettings
from services.edge.publisher import Publisher
from services.jobs.actions import Action
from services.jobs.budget import ScanLimits
from services.jobs.catalogue import load_catalogue
from services.jobs.state import State
from services.scan.scanner import Scanner
from services.worker.actions import ActionRegistry
from services.worker.media import ACTION_NAME
from services.worker.processor import UNKNOWN_ACTION, UNKNOWN_ACTION_FIRST_DELAY
from tests.integration.worker.harness import PushTopic, WorkerHarness, wait_until

PLUGIN_ACTION = "trials.expire"
CALLER = "producer@test-project.iam.gserviceaccount.com"
AUDIENCE = "https://api-test.a.run.app"
JOBS = 10


@pytest.fixture
def api_url(
    trials_plugin: Path,
    firestore_client: firestore.Client,
    firestore_project: str,
    oidc_server: Any,
) -> Iterator[str]:
    """The API with the plug-in installed beside it (its catalogue is loaded at start)."""
    settings = ApiSettings(
        project=firestore_project,
        audience=AUDIENCE,
        allowed_callers=frozenset({CALLER}),
        certs_url=oidc_server.certs_url,
    )
    app = create_api(settings, firestore_client=firestore_client)
    server = make_server("127.0.0.1", 0, app, threaded=True)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_port}"
    finally:
        server.shutdown()
        server.server_close()
        thread.join(timeout=5)


@pytest.mark.production_strict("OIDC token on push")
def test_jobs_scheduled_through_the_api_before_the_worker_has_the_plugin_wait_then_complete(
    api_url: str,
    worker: WorkerHarness,
    push: Callable[..., PushTopic],
    publisher_client: pubsub_v1.PublisherClient,
    oidc_server: Any,
) -> None:
    """Production push with `oidc_token` sends a Google-signed ID token
    (https://cloud.google.com/pubsub/docs/authenticate-push-subscriptions); Google's emulator
    sends none, so the worker behind its Cloud Run front end answers 403."""
    token = oidc_server.issuer.mint(AUDIENCE, CALLER)
    session = requests.Session()
    session.headers["Authorization"] = f"Bearer {token}"
    due = worker.clock.now().isoformat().replace("+00:00", "Z")
    ids = [f"trial-{n}" for n in range(JOBS)]
    for n, job_id in enumerate(ids):
        body: dict[str, Any] = {
            "job_id": job_id,
            "action": PLUGIN_ACTION,
            "subject": job_id,
            "params": {"trial_id": f"t-{n}"},
            "due_at": due,
        }
        created = session.post(f"{api_url}/v1/jobs", json=body, timeout=30)
        assert created.status_code == 201, created.text
    typo = {**body, "job_id": "typo", "params": {"trail_id": "t"}}
    refused = session.post(f"{api_url}/v1/jobs", json=typo, timeout=30)
    session.close()
    assert refused.status_code == 400 and "params.trial_id" in refused.text

    topic = push(max_delivery_attempts=5)
    scanner = Scanner(
        worker.store, Publisher(publisher_client, topic.topic), worker.clock, ScanLimits()
    )
    # The worker as deployed before the plug-in: it knows the media actions only.
    first = scanner.run()
    assert first.published == JOBS

    def waiting(job_id: str) -> bool:
        job = worker.job(job_id)
        error = job.last_error
        return job.state is State.DEFERRED and error is not None and error.code == UNKNOWN_ACTION

    wait_until(lambda: all(waiting(i) for i in ids), what="every job deferred as unknown_action")
    for job_id in ids:
        job = worker.job(job_id)
        assert job.attempt == 1 and job.due_at == worker.clock.now() + UNKNOWN_ACTION_FIRST_DELAY
    assert sum(1 for i in ids if worker.job(i).state is State.FAILED) == 0

    # A new worker revision with the plug-in, behind the same front end and subscription.
    plugin = load_catalogue().get(PLUGIN_ACTION)
    assert plugin is not None
    registry = ActionRegistry([Action(ACTION_NAME, worker.deleter), plugin])
    worker.redeploy(registry, "worker-with-plugin")
    worker.clock.advance(UNKNOWN_ACTION_FIRST_DELAY)
    second = scanner.run()
    assert second.published == JOBS
    wait_until(
        lambda: all(worker.job(i).state is State.COMPLETED for i in ids), what="all completed"
    )
    for n, job_id in enumerate(ids):
        job = worker.job(job_id)
        assert job.attempt == 1 and worker.completions(job_id) == 1
        assert job.result is not None and job.result.details == {"trial": f"t-{n}"}
    # The plug-in's own record: each job ran once.
    runs = importlib.import_module("my_trials.actions").RUNS
    assert sorted(job_id for job_id, _ in runs) == sorted(ids)
    assert scanner.run().published == 0
