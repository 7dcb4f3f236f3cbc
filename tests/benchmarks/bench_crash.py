"""The crash drill: the emulators are SIGKILLed in the middle of a drain with --data-dir, then
started again on the same directory; nothing acknowledged may be missing, and no object may be
deleted for a job whose record does not say so.

`python -m emulators --data-dir D` runs in its own process on fixed free ports (so the clients
here reconnect after the restart). N jobs are scheduled through the store (each acknowledged
`schedule` recorded) with one source object each (each acknowledged upload recorded); the real
worker serves a push subscription; this process claims, publishes and marks enqueued in
batches (each acknowledged `mark_enqueued` recorded), and the worker's 2xx answers (each one
means its completion was acknowledged by Firestore) are recorded by job. When about a third of
the jobs are done the emulator process gets SIGKILL, mid-drain. After the restart it counts:

- acknowledged writes missing: a scheduled job whose record is gone, an enqueued job back in
  `deferred`/`claimed` with an older generation, a job whose completion the worker
  acknowledged no longer `completed`, an uploaded object gone whose job never ran (expect 0);
- objects deleted for jobs that no longer exist, or whose record does not show the job ran
  (`running` or `completed`): a side effect that stayed while its record rolled back
  (expect 0).

Before the write-ahead log both numbers were in the hundreds (issue 24, finding 7). Size:
JOBS_BENCH_CRASH_JOBS (default 300). Run: `.venv/bin/python -m tests.benchmarks crash`.
"""

from __future__ import annotations

import base64
import io
import json
import os
import signal
import subprocess
import sys
import tempfile
import threading
import time
from datetime import UTC, datetime
from pathlib import Path
from types import SimpleNamespace
from typing import Any

from tests.benchmarks import rig
from tests.fixtures.store import mark_enqueued

PROJECT = "crash-drill"
BUCKET = "crash-media"


def _ports() -> list[str]:
    from emulators.launcher import free_port

    flags = []
    for flag in ("firestore", "firestore-admin", "pubsub", "pubsub-admin", "oidc", "storage"):
        flags += [f"--{flag}-port", str(free_port("127.0.0.1"))]
    return flags


def _launch(data: Path, ports: list[str]) -> tuple[subprocess.Popen[str], rig.LauncherProcess]:
    command = [sys.executable, "-m", "emulators", "--data-dir", str(data), *ports]
    command += ["--project", PROJECT]
    process = subprocess.Popen(command, stdout=subprocess.PIPE, text=True)
    launched = rig._launched(process)
    os.environ.update(launched.exports)
    return process, launched


def main() -> None:
    count = int(os.environ.get("JOBS_BENCH_CRASH_JOBS", 300))
    with tempfile.TemporaryDirectory() as folder:
        print(drill(count, Path(folder) / "data"))


def drill(count: int, data: Path) -> str:
    import google.cloud.storage as storage
    from google.auth.credentials import AnonymousCredentials
    from google.cloud import firestore

    from services.jobs.clock import SystemClock
    from services.jobs.model import NewJob
    from services.store.job_store import FirestoreJobStore

    ports = _ports()
    process, launched = _launch(data, ports)
    client = firestore.Client(project=PROJECT)
    store = FirestoreJobStore(client, SystemClock())
    gcs = storage.Client(project=PROJECT, credentials=AnonymousCredentials())
    bucket = gcs.create_bucket(BUCKET)
    scheduled: set[str] = set()
    uploaded: set[str] = set()
    now = datetime.now(UTC)
    for n in range(count):
        job_id = f"job-{n:05d}"
        bucket.blob(f"src/{job_id}").upload_from_string(b"source")
        uploaded.add(job_id)
        new = NewJob(
            job_id, rig.ACTION, f"media-{n}", now, {"bucket": BUCKET, "objects": [f"src/{job_id}"]}
        )
        store.schedule(new)
        scheduled.add(job_id)

    emulators: Any = SimpleNamespace(
        oidc=SimpleNamespace(certs_url=launched.exports["JOBS_OIDC_CERTS_URL"])
    )
    worker = rig.serve_worker(PROJECT, emulators, client)
    completed: dict[str, int] = {}
    lock = threading.Lock()
    inner = worker.done.app

    def recording(environ: dict[str, Any], start_response: Any) -> Any:
        body = environ["wsgi.input"].read(int(environ.get("CONTENT_LENGTH") or 0))
        environ["wsgi.input"] = io.BytesIO(body)
        try:
            job_id = base64.b64decode(json.loads(body)["message"]["data"]).decode()
        except (ValueError, KeyError):
            job_id = ""

        def status(line: str, headers: Any, exc_info: Any = None) -> Any:
            if line.startswith("204"):
                with lock:
                    completed[job_id] = completed.get(job_id, 0) + 1
            return start_response(line, headers, exc_info)

        return inner(environ, status)

    worker.done.app = recording
    topic = rig.topic(PROJECT, push_url=worker.url)
    enqueued: dict[str, int] = {}
    killed_at = count // 3
    run = 0
    try:
        while True:
            with lock:
                done = len(completed)
            if done >= killed_at:
                break
            run += 1
            claimed = store.claim_due(datetime.now(UTC), f"run-{run}", 20)
            for job in claimed:
                message_id = topic.publisher_client.publish(
                    topic.topic,
                    job.job_id.encode(),
                    generation=str(job.generation),
                    run_id=f"run-{run}",
                ).result(timeout=30)
                mark_enqueued(store, job.job_id, job.generation, message_id)
                enqueued[job.job_id] = job.generation
            if not claimed:
                time.sleep(0.05)
        process.send_signal(signal.SIGKILL)  # mid-drain: claims, pushes and deletes in flight
        process.wait(timeout=30)
    finally:
        if process.poll() is None:
            process.kill()
    worker.close()
    with lock:
        acknowledged = dict(completed)

    again, _ = _launch(data, ports)
    try:
        from services.jobs.state import State

        records = {job.job_id: job for job in (store.get(j) for j in sorted(scheduled)) if job}
        objects = {b.name.removeprefix("src/") for b in gcs.list_blobs(BUCKET)}
        missing = [j for j in scheduled if j not in records]
        missing += [
            j
            for j, generation in enqueued.items()
            if j in records
            and records[j].state in (State.DEFERRED, State.CLAIMED)
            and records[j].generation < generation
        ]
        missing += [
            j for j in acknowledged if j in records and records[j].state is not State.COMPLETED
        ]
        ran = {State.RUNNING, State.COMPLETED}
        gone = uploaded - objects
        missing += [j for j in gone if j not in enqueued]
        orphaned = [j for j in gone if j not in records or records[j].state not in ran]
        histogram: dict[str, int] = {}
        for record in records.values():
            histogram[record.state.value] = histogram.get(record.state.value, 0) + 1
    finally:
        again.terminate()
        again.wait(timeout=60)
        client.close()
    return (
        f"crash drill, {count} jobs, SIGKILL after {len(acknowledged)} acknowledged completions "
        f"({len(enqueued)} enqueued, {len(gone)} objects deleted): acknowledged writes missing "
        f"{len(missing)} (expect 0), objects deleted for jobs that no longer exist or never ran "
        f"{len(orphaned)} (expect 0); states after the restart {histogram}"
    )
