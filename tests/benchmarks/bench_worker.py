"""End-to-end worker throughput through real push, and billed Firestore operations per job.

Each set-up goes through real OIDC-signed push into the worker:
1. everything in this one process: the Firestore, Pub/Sub, OIDC and Cloud Storage emulators
   and one worker instance (werkzeug, threaded, its clients injected), sharing one interpreter
   lock;
2. the emulators in a process of their own (`python -m emulators`), the same worker instance
   in this one;
3. with JOBS_BENCH_WORKER_DEPLOYED=1 also (=only: only this one) as deployed: the worker
   started as its container starts it (`functions-framework --target=worker`, gunicorn
   gthread, THREADS etc. from infra/env.py's `server_environment`, settings from JOBS_*
   variables only) with WORKERS processes sharing one listening socket, standing for that many
   Cloud Run instances behind one URL (the kernel spreads the connections over them).
In each the emulator keeps at most instances x `workerConcurrency` (infra/config.py, the
value Cloud Run's per-instance concurrency and THREADS both come from) push requests in flight:
Pub/Sub itself has no fixed cap and adapts to the endpoint's successes
(https://cloud.google.com/pubsub/docs/push), and Cloud Run admits at most that many requests
per instance (https://cloud.google.com/run/docs/about-concurrency).
Schedules, claims and enqueues N jobs (one source object each), then publishes their IDs and
times from the first publish to the last 2xx answer. Firestore's counters are reset just before
publishing, so the reads and writes printed per job are the worker's alone (start, complete).
The deployed set-up also prints the worker processes' CPU (user + system, from /proc) per job,
beside the load average: the figure issue 35 tracks. Then the same number of messages is pushed
to an endpoint that only answers 204 (raw push throughput, with the same OIDC push and
concurrency) and the ratio is printed.
Run: `.venv/bin/python -m tests.benchmarks worker` (JOBS_BENCH_WORKER_JOBS=N to change N,
JOBS_BENCH_WORKER_INSTANCES=K for the deployed set-up's instances; default: the CPU count).
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
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any

import requests
from werkzeug.serving import make_server

from tests.benchmarks import rig
from tests.benchmarks.rig import PUSHER, Done

DEFAULT_JOBS = 400
MEDIA_BUCKET = "bench-media"


@dataclass
class Emulators:
    """Where the emulators are, Firestore's billing counters and Pub/Sub's push outcomes."""

    certs_url: str
    stats: Callable[[str], dict[str, Any]]
    reset_stats: Callable[[str], None]
    push_statuses: Callable[[], dict[str, int]]
    reset_push_statuses: Callable[[], None]


@dataclass
class Worker:
    """A running worker: its push URL and how many pushes it answered, by kind."""

    url: str
    acknowledged: Callable[[], int]
    others: Callable[[], dict[int, int]]
    # CPU seconds the worker's own processes have used so far; None when the worker shares
    # this process with the benchmark (its CPU cannot be told apart).
    cpu_s: Callable[[], float] | None = None


def worker_concurrency() -> int:
    """Requests one worker instance takes at once: the deployed default of workerConcurrency
    (Cloud Run's per-instance concurrency and the server's THREADS, infra/env.py)."""
    from infra.config import SETTINGS_BY_NAME

    return int(SETTINGS_BY_NAME["workerConcurrency"].default)


def _instances() -> int:
    return int(os.environ.get("JOBS_BENCH_WORKER_INSTANCES", os.cpu_count() or 1))


@contextlib.contextmanager
def _in_process(push_concurrency: int) -> Iterator[Emulators]:
    """Every emulator in this process, sharing its interpreter lock with the worker."""
    from emulators.firestore.server import start as start_firestore
    from emulators.oidc.server import start as start_oidc
    from emulators.pubsub.server import start as start_pubsub
    from emulators.storage.server import ENV_VAR
    from emulators.storage.server import start as start_storage

    with start_oidc() as oidc, start_storage() as storage_emulator:
        firestore_emulator = start_firestore(host="127.0.0.1", port=0, admin_port=0)
        pubsub_emulator = start_pubsub(issuer=oidc.issuer, max_push_concurrency=push_concurrency)
        os.environ["FIRESTORE_EMULATOR_HOST"] = firestore_emulator.address
        os.environ["PUBSUB_EMULATOR_HOST"] = pubsub_emulator.address
        os.environ[ENV_VAR] = storage_emulator.url
        try:
            yield Emulators(
                oidc.certs_url,
                firestore_emulator.stats,
                firestore_emulator.reset_stats,
                lambda: dict(pubsub_emulator.stats()["push_attempts_by_status"]),
                pubsub_emulator.clear_stats,
            )
        finally:
            pubsub_emulator.stop()
            firestore_emulator.stop()


@contextlib.contextmanager
def _separate_process(push_concurrency: int | None = None) -> Iterator[Emulators]:
    """The emulators in their own process (`python -m emulators`), the worker elsewhere;
    `push_concurrency` None keeps the emulator's default (benchmarks that only pull)."""
    with rig.own_process(push_concurrency) as launched:
        stats_url = launched.admin["firestore admin"] + "/stats"
        push_url = launched.admin["pubsub admin"] + "/stats"
        yield Emulators(
            launched.exports["JOBS_OIDC_CERTS_URL"],
            lambda project: dict(requests.get(stats_url, params={"project": project}).json()),
            lambda project: requests.delete(stats_url, params={"project": project}).close(),
            lambda: dict(requests.get(push_url).json()["push_attempts_by_status"]),
            lambda: requests.delete(push_url).close(),
        )


def main() -> None:
    jobs = int(os.environ.get("JOBS_BENCH_WORKER_JOBS", DEFAULT_JOBS))
    logging.getLogger("werkzeug").setLevel(logging.WARNING)
    concurrency = worker_concurrency()
    deployed = os.environ.get("JOBS_BENCH_WORKER_DEPLOYED", "0")
    if deployed not in ("0", "1", "only"):
        raise SystemExit(f"JOBS_BENCH_WORKER_DEPLOYED: {deployed!r} is not 0, 1 or only")
    if deployed != "only":
        _run_in_process(jobs, concurrency)
    if deployed == "0":
        return
    instances = _instances()
    print(
        "-- as deployed: emulators in their own process, the worker by functions-framework "
        f"with {instances} instance(s) x {concurrency} threads (push concurrency "
        f"{instances * concurrency})",
        flush=True,
    )
    with _separate_process(instances * concurrency) as emulators:
        _run(jobs, emulators, "bench-worker-c", _deployed_worker(instances, concurrency))


def _run_in_process(jobs: int, concurrency: int) -> None:
    print(
        f"-- emulators and one worker instance in this process (push concurrency {concurrency})",
        flush=True,
    )
    with _in_process(concurrency) as emulators:
        _run(jobs, emulators, "bench-worker-a", _worker_in_process)
    print(
        "-- emulators in their own process (python -m emulators), one worker instance in this "
        f"one (push concurrency {concurrency})",
        flush=True,
    )
    with _separate_process(concurrency) as emulators:
        _run(jobs, emulators, "bench-worker-b", _worker_in_process)


WorkerFactory = Callable[[str, Emulators, Any], contextlib.AbstractContextManager[Worker]]


@contextlib.contextmanager
def _worker_in_process(project: str, emulators: Emulators, storage_client: Any) -> Iterator[Worker]:
    """One instance in this process: werkzeug's threaded server, clients injected."""
    from google.cloud import firestore

    from services.jobs.clock import SystemClock
    from services.store.job_store import FirestoreJobStore
    from services.store.rejections import RejectionStore
    from services.worker import media
    from services.worker.actions import ActionRegistry
    from services.worker.app import create_app, read_environment_once
    from services.worker.settings import WorkerSettings

    clock = SystemClock()
    client = firestore.Client(project=project)
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
    # As default_actions sets up the deployed worker's client (the benchmark's environment has
    # no proxy or netrc settings either).
    read_environment_once(storage_client._http)
    actions = ActionRegistry([media.delete_source_action(storage_client, settings.retry_policy)])
    holder["app"] = create_app(
        settings,
        clock=clock,
        store=FirestoreJobStore(client, clock),
        actions=actions,
        rejections=RejectionStore(client),
    )
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield Worker(url, lambda: done.completed, lambda: dict(done.other))
    finally:
        server.shutdown()
        thread.join(timeout=5)
        client.close()


def _deployed_worker(instances: int, concurrency: int) -> WorkerFactory:
    @contextlib.contextmanager
    def start(project: str, emulators: Emulators, storage_client: Any) -> Iterator[Worker]:
        """The worker as its container runs it: functions-framework (gunicorn gthread) with
        production's server variables, configured by JOBS_* variables only."""
        from emulators.launcher import free_port
        from infra.config import SETTINGS_BY_NAME
        from infra.env import server_environment
        from services.edge import settings as common
        from services.worker import settings as worker_settings

        port = free_port("127.0.0.1")
        url = f"http://127.0.0.1:{port}/"
        timeout_s = int(SETTINGS_BY_NAME["workerRequestTimeoutS"].default)
        env = {
            **os.environ,
            **server_environment(concurrency, timeout_s),
            # functions-framework's gunicorn worker processes: one per modelled instance.
            "WORKERS": str(instances),
            common.PROJECT: project,
            common.OIDC_CERTS_URL: emulators.certs_url,
            common.LOG_LEVEL: "INFO",
            worker_settings.WORKER_AUDIENCE: url,
            worker_settings.WORKER_ALLOWED_INVOKERS: PUSHER,
            worker_settings.MEDIA_BUCKET: MEDIA_BUCKET,
        }
        command = [
            os.path.join(os.path.dirname(sys.executable), "functions-framework"),
            "--target=worker",
            "--source=services/worker/main.py",
            "--host=127.0.0.1",
            f"--port={port}",
        ]
        # Its JSON log lines (one per outcome, as in production) go nowhere.
        process = subprocess.Popen(
            command, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL
        )
        try:
            _wait_listening(url, process)
            _warm_up(url, instances * concurrency)
            emulators.reset_push_statuses()
            yield Worker(
                url,
                lambda: _acknowledged(emulators.push_statuses()),
                lambda: {
                    int(status): n
                    for status, n in emulators.push_statuses().items()
                    if status.isdigit() and not 200 <= int(status) < 300
                },
                lambda: rig.tree_cpu_s(process.pid),
            )
        finally:
            process.terminate()
            process.wait(timeout=30)

    return start


def _acknowledged(statuses: dict[str, int]) -> int:
    """Pushes answered 2xx (the worker: 204 completed, 200 any other acknowledged outcome)."""
    return sum(n for status, n in statuses.items() if status.isdigit() and 200 <= int(status) < 300)


def _warm_up(url: str, requests_at_once: int) -> None:
    """Concurrent GETs (each answered 405) until every instance has built its handler (the
    clients, the OIDC certs): a cold start is not what this measures."""

    def get(_: int) -> None:
        for _try in range(3):
            requests.get(url, timeout=30).close()

    with ThreadPoolExecutor(requests_at_once) as pool:
        list(pool.map(get, range(requests_at_once)))


def _wait_listening(url: str, process: subprocess.Popen[bytes]) -> None:
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        if process.poll() is not None:
            raise RuntimeError(f"functions-framework exited with {process.returncode}")
        try:
            requests.get(url, timeout=1).close()  # any answer (405: POST only) means it serves
            return
        except requests.ConnectionError:
            time.sleep(0.1)
    raise RuntimeError("the worker did not start listening within 60 s")


def _run(jobs: int, emulators: Emulators, project: str, start_worker: WorkerFactory) -> None:
    import google.cloud.storage as storage
    from google.auth.credentials import AnonymousCredentials
    from google.cloud import firestore, pubsub_v1

    from services.jobs.clock import SystemClock
    from services.jobs.model import NewJob
    from services.store.job_store import FirestoreJobStore
    from services.telemetry.log import configure_logging
    from services.worker import media
    from tests.fixtures.store import mark_enqueued

    # The worker logs as in production (one JSON line per outcome), into the void.
    devnull = open(os.devnull, "w")  # noqa: SIM115 - closed below
    configure_logging("INFO", stream=devnull)
    clock = SystemClock()
    client = firestore.Client(project=project)
    store = FirestoreJobStore(client, clock)
    storage_client = storage.Client(project=project, credentials=AnonymousCredentials())
    bucket = storage_client.create_bucket(MEDIA_BUCKET)
    publisher = pubsub_v1.PublisherClient()
    subscriber = pubsub_v1.SubscriberClient()

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
        mark_enqueued(store, job.job_id, job.generation, f"pre-{job.job_id}")

    with start_worker(project, emulators, storage_client) as worker:
        topic = publisher.create_topic(name=f"projects/{project}/topics/jobs").name
        subscription = f"projects/{project}/subscriptions/jobs-push"
        subscriber.create_subscription(
            request={
                "name": subscription,
                "topic": topic,
                "push_config": rig.push_config(worker.url),
                "ack_deadline_seconds": 60,
            }
        )
        emulators.reset_stats(project)
        cpu_before = worker.cpu_s() if worker.cpu_s else None
        load_before = rig.loadavg()
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
        while worker.acknowledged() < len(claimed) and time.monotonic() < deadline:
            time.sleep(0.02)
        elapsed = time.perf_counter() - started
        cpu_used = worker.cpu_s() - cpu_before if worker.cpu_s and cpu_before is not None else None
        load_after = rig.loadavg()
        stats = emulators.stats(project)
        completed, other = worker.acknowledged(), worker.others()
        subscriber.delete_subscription(subscription=subscription)

    remaining = sum(1 for _ in storage_client.list_blobs(bucket.name))
    print(f"jobs completed through push: {completed} of {len(claimed)} in {elapsed:.2f} s")
    print(f"end-to-end throughput: {completed / elapsed:.1f} jobs/s")
    print(f"other answers: {other or 'none'}; source objects left: {remaining}")
    per_job = max(completed, 1)
    reads = stats["document_reads"] / per_job
    writes = stats["document_writes"] / per_job
    print(
        f"Firestore billed ops per job (worker only): reads {reads:.2f}, writes {writes:.2f}, "
        f"total {reads + writes:.2f}"
    )
    print(f"Firestore RPCs during the run: {stats['calls']}")
    if cpu_used is not None:
        # The measure of the worker's own cost: its processes' CPU (user + system) from the
        # first publish to the last answer, per job; at 100 % of one vCPU that is the rate.
        ms = cpu_used * 1000 / per_job
        print(
            f"worker CPU: {cpu_used:.2f} s, {ms:.2f} ms per job, "
            f"{1000 / ms if ms else 0:,.0f} jobs/s per busy vCPU "
            f"(load average {load_before} before, {load_after} after)"
        )

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
            "push_config": rig.push_config(url),
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
