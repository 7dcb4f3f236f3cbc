"""End-to-end worker throughput through real push, and billed Firestore operations per job.

Starts the Firestore, Pub/Sub (push with OIDC), OIDC and Cloud Storage emulators and the
worker (werkzeug, threaded) on 127.0.0.1: first all in this one process, then with the
emulators in a process of their own (`python -m emulators`), as a deployment would have them.
Schedules, claims and enqueues N jobs (one source object each), then publishes their IDs and
times from the first publish to the last 204. Firestore's counters are reset just before
publishing, so the reads and writes printed per job are the worker's alone (start, complete).
Then the same number of messages is pushed to an endpoint that only answers 204 (raw push
throughput, with the same OIDC push and concurrency) and the ratio is printed.
Run: `.venv/bin/python -m tests.benchmarks worker` (JOBS_BENCH_WORKER_JOBS=N to change N).
"""

from __future__ import annotations

import contextlib
import logging
import os
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any

import requests
from werkzeug.serving import make_server

from tests.benchmarks.rig import Done

PUSHER = "pusher@deferred-jobs.iam.gserviceaccount.com"
DEFAULT_JOBS = 400


@dataclass
class Emulators:
    """Where the emulators are, and Firestore's billing counters for one project."""

    certs_url: str
    stats: Callable[[str], dict[str, Any]]
    reset_stats: Callable[[str], None]


@contextlib.contextmanager
def _in_process() -> Iterator[Emulators]:
    """Every emulator in this process, sharing its interpreter lock with the worker."""
    from emulators.firestore.server import start as start_firestore
    from emulators.oidc.server import start as start_oidc
    from emulators.pubsub.server import start as start_pubsub
    from emulators.storage.server import ENV_VAR
    from emulators.storage.server import start as start_storage

    with start_oidc() as oidc, start_storage() as storage_emulator:
        firestore_emulator = start_firestore(host="127.0.0.1", port=0, admin_port=0)
        pubsub_emulator = start_pubsub(issuer=oidc.issuer, max_push_concurrency=_push_concurrency())
        os.environ["FIRESTORE_EMULATOR_HOST"] = firestore_emulator.address
        os.environ["PUBSUB_EMULATOR_HOST"] = pubsub_emulator.address
        os.environ[ENV_VAR] = storage_emulator.url
        try:
            yield Emulators(
                oidc.certs_url, firestore_emulator.stats, firestore_emulator.reset_stats
            )
        finally:
            pubsub_emulator.stop()
            firestore_emulator.stop()


@contextlib.contextmanager
def _separate_process() -> Iterator[Emulators]:
    """The emulators in their own process (`python -m emulators`), the worker in this one."""
    command = [sys.executable, "-m", "emulators"]
    for flag in ("firestore", "firestore-admin", "pubsub", "pubsub-admin", "oidc", "storage"):
        command += [f"--{flag}-port", "0"]
    process = subprocess.Popen(command, stdout=subprocess.PIPE, text=True)
    try:
        exports, admin = _read_exports(process)
        os.environ.update(exports)
        stats_url = admin["firestore admin"] + "/stats"
        yield Emulators(
            exports["JOBS_OIDC_CERTS_URL"],
            lambda project: dict(requests.get(stats_url, params={"project": project}).json()),
            lambda project: requests.delete(stats_url, params={"project": project}).close(),
        )
    finally:
        process.terminate()
        process.wait(timeout=30)


def _read_exports(process: subprocess.Popen[str]) -> tuple[dict[str, str], dict[str, str]]:
    exports: dict[str, str] = {}
    admin: dict[str, str] = {}
    assert process.stdout is not None
    for line in process.stdout:
        line = line.strip()
        if line.startswith("export "):
            key, _, value = line.removeprefix("export ").partition("=")
            exports[key] = value
        elif line.startswith("# ") and ": http" in line:
            name, _, url = line.removeprefix("# ").partition(": ")
            admin[name] = url
        elif line == "# emulators ready":
            return exports, admin
    raise RuntimeError("the emulator launcher exited before it was ready")


def main() -> None:
    jobs = int(os.environ.get("JOBS_BENCH_WORKER_JOBS", DEFAULT_JOBS))
    logging.getLogger("werkzeug").setLevel(logging.WARNING)
    print(f"-- emulators in this process (push concurrency {_push_concurrency()})", flush=True)
    with _in_process() as emulators:
        _run(jobs, emulators, "bench-worker-a")
    print("-- emulators in a separate process (python -m emulators; push concurrency 16)")
    with _separate_process() as emulators:
        _run(jobs, emulators, "bench-worker-b")


def _run(jobs: int, emulators: Emulators, project: str) -> None:
    import google.cloud.storage as storage
    from google.auth.credentials import AnonymousCredentials
    from google.cloud import firestore, pubsub_v1

    from services.jobs.clock import SystemClock
    from services.jobs.log import configure_logging
    from services.jobs.model import NewJob
    from services.jobs.rejections import RejectionStore
    from services.jobs.store import FirestoreJobStore
    from services.worker import media
    from services.worker.actions import ActionRegistry
    from services.worker.app import create_app
    from services.worker.settings import WorkerSettings

    # The worker logs as in production (one JSON line per outcome), into the void.
    devnull = open(os.devnull, "w")  # noqa: SIM115 - closed below
    configure_logging("INFO", stream=devnull)
    clock = SystemClock()
    client = firestore.Client(project=project)
    store = FirestoreJobStore(client, clock)
    storage_client = storage.Client(project=project, credentials=AnonymousCredentials())
    bucket = storage_client.create_bucket("bench-media")

    holder: dict[str, Any] = {}
    done = Done(lambda environ, start: holder["app"](environ, start))
    server = make_server("127.0.0.1", 0, done, threaded=True)
    url = f"http://127.0.0.1:{server.server_port}/"
    settings = WorkerSettings(
        project=project,
        audience=url,
        allowed_invokers=frozenset({PUSHER}),
        certs_url=emulators.certs_url,
    )
    actions = ActionRegistry([media.delete_source_action(storage_client, settings.retry_policy)])
    holder["app"] = create_app(
        settings, clock=clock, store=store, actions=actions, rejections=RejectionStore(client)
    )
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()

    publisher = pubsub_v1.PublisherClient()
    subscriber = pubsub_v1.SubscriberClient()
    topic = publisher.create_topic(name=f"projects/{project}/topics/jobs").name
    subscriber.create_subscription(
        request={
            "name": f"projects/{project}/subscriptions/jobs-push",
            "topic": topic,
            "push_config": {
                "push_endpoint": url,
                "oidc_token": {"service_account_email": PUSHER, "audience": url},
            },
            "ack_deadline_seconds": 60,
        }
    )

    print(f"preparing {jobs} jobs (upload, schedule, claim, enqueue) ...", flush=True)
    for n in range(jobs):
        bucket.blob(f"src/{n}.mp4").upload_from_string(b"x")
        store.schedule(
            NewJob(
                job_id=f"job-{n:06d}",
                action=media.ACTION_NAME,
                subject=f"media-{n}",
                due_at=clock.now(),
                params={"bucket": bucket.name, "object": f"src/{n}.mp4"},
            )
        )
    claimed = store.claim_due(clock.now(), "bench-run", jobs)
    for job in claimed:
        store.mark_enqueued(job.job_id, job.generation, f"pre-{job.job_id}")

    emulators.reset_stats(project)
    started = time.perf_counter()
    futures = [
        publisher.publish(
            topic, c.job_id.encode(), generation=str(c.generation), run_id="bench-run"
        )
        for c in claimed
    ]
    for future in futures:
        future.result(timeout=60)
    deadline = time.monotonic() + 600
    while done.completed < len(claimed) and time.monotonic() < deadline:
        time.sleep(0.01)
    elapsed = time.perf_counter() - started
    stats = emulators.stats(project)

    remaining = sum(1 for _ in storage_client.list_blobs(bucket.name))
    completed = done.completed
    print(f"jobs completed through push: {completed} of {len(claimed)} in {elapsed:.2f} s")
    print(f"end-to-end throughput: {completed / elapsed:.1f} jobs/s")
    print(f"other answers: {done.other or 'none'}; source objects left: {remaining}")
    per_job = max(completed, 1)
    reads = stats["document_reads"] / per_job
    writes = stats["document_writes"] / per_job
    print(
        f"Firestore billed ops per job (worker only): reads {reads:.2f}, writes {writes:.2f}, "
        f"total {reads + writes:.2f}"
    )
    print(f"Firestore RPCs during the run: {stats['calls']}")

    subscriber.delete_subscription(subscription=f"projects/{project}/subscriptions/jobs-push")
    server.shutdown()
    thread.join(timeout=5)
    raw_rate = _raw_push(publisher, subscriber, project, len(claimed))
    print(
        f"raw push (an endpoint that only answers 204): {raw_rate:,.0f} deliveries/s; "
        f"worker / raw: {completed / elapsed / raw_rate:.1%}"
    )
    publisher.stop()
    subscriber.close()
    client.close()
    logging.getLogger().handlers.clear()
    devnull.close()


def _raw_push(publisher: Any, subscriber: Any, project: str, count: int) -> float:
    """Deliveries per second to an endpoint that does nothing but answer 204."""
    done = Done(_no_content)
    server = make_server("127.0.0.1", 0, done, threaded=True)
    url = f"http://127.0.0.1:{server.server_port}/"
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    topic = publisher.create_topic(name=f"projects/{project}/topics/raw").name
    subscription = f"projects/{project}/subscriptions/raw-push"
    subscriber.create_subscription(
        request={
            "name": subscription,
            "topic": topic,
            "push_config": {
                "push_endpoint": url,
                "oidc_token": {"service_account_email": PUSHER, "audience": url},
            },
            "ack_deadline_seconds": 60,
        }
    )
    started = time.perf_counter()
    for future in [publisher.publish(topic, f"raw-{n}".encode()) for n in range(count)]:
        future.result(timeout=60)
    done.wait_for(count, timeout_s=600)
    elapsed = time.perf_counter() - started
    subscriber.delete_subscription(subscription=subscription)
    server.shutdown()
    thread.join(timeout=5)
    return done.completed / elapsed


def _no_content(environ: dict[str, Any], start_response: Any) -> list[bytes]:
    environ["wsgi.input"].read(int(environ.get("CONTENT_LENGTH") or 0))
    start_response("204 No Content", [])
    return []


def _push_concurrency() -> int:
    """Requests the emulator keeps in flight to the worker (JOBS_BENCH_PUSH_CONCURRENCY)."""
    return int(os.environ.get("JOBS_BENCH_PUSH_CONCURRENCY", 16))
