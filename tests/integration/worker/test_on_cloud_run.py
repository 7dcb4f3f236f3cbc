"""The deployed worker as Cloud Run runs it: functions-framework as the container of a local
Cloud Run front end, configured only through JOBS_* variables with
JOBS_AUTH_BEHIND_CLOUD_RUN_IAM=true, its real clients on the emulators."""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import google.cloud.storage as storage
import pytest
import requests
from google.cloud import firestore

from emulators.cloudrun.__main__ import READY_LINE
from emulators.launcher import free_port
from services.edge import settings as common
from services.jobs.clock import SystemClock
from services.jobs.model import NewJob
from services.jobs.state import State
from services.store.job_store import FirestoreJobStore
from services.worker import settings as keys
from tests.fixtures.store import mark_enqueued
from tests.integration.worker.harness import PUSHER, envelope

ROOT = Path(__file__).resolve().parents[3]
SERVICE = "deferred-jobs-worker"


@pytest.fixture
def service_url(firestore_project: str, oidc_server: Any) -> Iterator[str]:
    port = free_port("127.0.0.1")
    url = f"http://127.0.0.1:{port}"
    env = {k: v for k, v in os.environ.items() if not k.startswith(("JOBS_", "K_"))}
    env.update(
        {
            common.PROJECT: firestore_project,
            keys.WORKER_AUDIENCE: url,
            keys.WORKER_ALLOWED_INVOKERS: PUSHER,
            common.OIDC_CERTS_URL: oidc_server.certs_url,
            common.BEHIND_CLOUD_RUN_IAM: "true",
            "PYTHONUNBUFFERED": "1",
        }
    )
    proc = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "emulators.cloudrun",
            f"--service={SERVICE}",
            f"--port={port}",
            f"--certs-url={oidc_server.certs_url}",
            f"--invoker={PUSHER}",
            "--",
            sys.executable,
            "-m",
            "services.edge.server",
            "--target=worker",
            "--source=services/worker/main.py",
            "--host=127.0.0.1",
        ],
        cwd=ROOT,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )
    assert proc.stdout is not None
    line = proc.stdout.readline()
    try:
        assert line.startswith(READY_LINE), line
        yield url
    finally:
        proc.terminate()
        proc.communicate(timeout=30)


def test_a_push_through_cloud_run_completes_the_job_under_the_revisions_name(
    service_url: str,
    firestore_client: firestore.Client,
    storage_client: storage.Client,
    storage_bucket: storage.Bucket,
    oidc_server: Any,
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
    token = oidc_server.issuer.mint(service_url, PUSHER)

    response = requests.post(
        service_url,
        data=envelope("job-1", claimed.generation),
        headers={"Authorization": f"Bearer {token}"},
        timeout=60,
    )

    assert response.status_code == 204, response.text
    job = store.get("job-1")
    assert job is not None and job.state is State.COMPLETED
    # The lease holder is the Cloud Run revision the front end named (K_REVISION).
    holders = [entry.by for entry in job.history if entry.by.startswith("worker:")]
    assert holders and all(h.startswith(f"worker:{SERVICE}-00001-") for h in holders), holders
    assert not storage_bucket.blob("src/a.mp4").exists()
