"""The stores the worker builds from its settings use them: terminal records expire after
JOBS_TERMINAL_RETENTION_S, not the library default."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

from google.cloud import firestore

from services.jobs.actions import Action, ActionRequest, ActionResult
from services.jobs.clock import FakeClock
from services.store.job_store import FirestoreJobStore
from services.worker.actions import ActionRegistry
from services.worker.app import create_app
from services.worker.media import ACTION_NAME
from services.worker.settings import WorkerSettings
from tests.fixtures.store import mark_enqueued
from tests.integration.jobs.conftest import new_job
from tests.integration.worker.harness import PUSHER, envelope

AUDIENCE = "http://worker.test/"


def _done(request: ActionRequest) -> ActionResult:
    return ActionResult("deleted")


def test_a_job_completed_by_the_worker_expires_after_the_configured_retention(
    firestore_client: firestore.Client, firestore_project: str, oidc_server: Any
) -> None:
    # Firestore's time: the store the worker builds checks its clock against it
    # (JOBS_MAX_CLOCK_SKEW_S).
    now = datetime.now(UTC)
    clock = FakeClock(now)
    store = FirestoreJobStore(firestore_client, clock)
    store.schedule(new_job("j", now))
    (claim,) = store.claim_due(clock.now(), "run-1", 1)
    mark_enqueued(store, "j", claim.generation, "m-1")
    settings = WorkerSettings(
        project=firestore_project,
        audience=AUDIENCE,
        allowed_invokers=frozenset({PUSHER}),
        certs_url=oidc_server.certs_url,
        terminal_retention_s=2 * 86400,
    )
    app = create_app(
        settings, clock=clock, actions=ActionRegistry([Action(ACTION_NAME, _done)]), worker_id="w"
    )
    token = oidc_server.issuer.mint(AUDIENCE, PUSHER)

    response = app.test_client().post(
        "/", data=envelope("j", claim.generation), headers={"Authorization": f"Bearer {token}"}
    )

    assert response.status_code == 204
    job = store.get("j")
    assert job is not None and job.expire_at == clock.now() + timedelta(days=2)
