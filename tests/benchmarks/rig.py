"""What the benchmarks share: the emulators in this process, the real worker behind real push,
the real Scanner, seeding, and the helpers that read the emulator's billing counters.

Not a benchmark itself (no `bench_` prefix). Everything listens on 127.0.0.1.
"""

from __future__ import annotations

import contextlib
import logging
import os
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from pathlib import Path
from typing import Any

from werkzeug.serving import make_server

PUSHER = "pusher@deferred-jobs.iam.gserviceaccount.com"
ACTION = "media.delete_source"


class Done:
    """WSGI middleware counting acknowledged (2xx) answers and the rest by status, so waiting
    for the end costs no read. The worker answers 204 for a job it completed and 200 for any
    other acknowledged outcome (a result reused from a shared key, a duplicate)."""

    def __init__(self, app: Callable[..., Any]) -> None:
        self.app = app
        self.completed = 0
        self.other: dict[int, int] = {}
        self._lock = threading.Lock()

    def __call__(self, environ: dict[str, Any], start_response: Any) -> Any:
        def counting(status: str, headers: Any, exc_info: Any = None) -> Any:
            code = int(status.split()[0])
            with self._lock:
                if 200 <= code < 300:
                    self.completed += 1
                else:
                    self.other[code] = self.other.get(code, 0) + 1
            return start_response(status, headers, exc_info)

        return self.app(environ, counting)

    def wait_for(self, count: int, timeout_s: float = 900.0) -> float:
        """Seconds until `count` 2xx answers were sent (or the timeout passed)."""
        started = time.perf_counter()
        deadline = time.monotonic() + timeout_s
        while self.completed < count and time.monotonic() < deadline:
            time.sleep(0.005)
        return time.perf_counter() - started


@dataclass
class Emulators:
    """The four emulators of the local world, in this process."""

    firestore: Any
    pubsub: Any
    oidc: Any
    storage: Any

    def billed(self, project: str) -> dict[str, Any]:
        return dict(self.firestore.stats(project))

    def reset(self, project: str) -> None:
        self.firestore.reset_stats(project)


@contextlib.contextmanager
def in_process(
    push_concurrency: int = 16, firestore_indexes: str | None = None
) -> Iterator[Emulators]:
    """The emulators in this process; with `firestore_indexes` (an index-set spec such as
    `emulators.launcher.PROJECT_INDEXES`) Firestore is strict with those definitions, as a
    deployment has them."""
    from emulators.firestore import indexes
    from emulators.firestore.server import start as start_firestore
    from emulators.oidc.server import start as start_oidc
    from emulators.pubsub.server import start as start_pubsub
    from emulators.storage.server import ENV_VAR
    from emulators.storage.server import start as start_storage

    with start_oidc() as oidc, start_storage() as storage_emulator:
        declared = indexes.load(firestore_indexes) if firestore_indexes is not None else None
        firestore_emulator = start_firestore(
            host="127.0.0.1", port=0, admin_port=0, indexes=declared
        )
        pubsub_emulator = start_pubsub(issuer=oidc.issuer, max_push_concurrency=push_concurrency)
        os.environ["FIRESTORE_EMULATOR_HOST"] = firestore_emulator.address
        os.environ["PUBSUB_EMULATOR_HOST"] = pubsub_emulator.address
        os.environ[ENV_VAR] = storage_emulator.url
        try:
            yield Emulators(firestore_emulator, pubsub_emulator, oidc, storage_emulator)
        finally:
            pubsub_emulator.stop()
            firestore_emulator.stop()


@dataclass
class LauncherProcess:
    """`python -m emulators` in its own process: what it exported, and its admin URLs."""

    exports: dict[str, str]
    admin: dict[str, str]  # e.g. {"firestore admin": "http://127.0.0.1:PORT"}
    pid: int

    def cpu_s(self) -> float:
        """CPU seconds (user + system) the emulator process and every process it started
        (Google's emulators: gcloud and its JVM) have used so far (Linux /proc)."""
        return tree_cpu_s(self.pid)


def tree_cpu_s(root: int) -> float:
    """CPU seconds (user + system) process `root` and all its descendants have used so far
    (Linux /proc); processes that already exited are not counted."""
    stats = process_table()
    tree, ticks = {root}, 0
    grew = True
    while grew:  # descendants: a process whose parent (field 1 after the name) is in tree
        grew = False
        for pid, fields in stats.items():
            if pid not in tree and int(fields[1]) in tree:
                tree.add(pid)
                grew = True
    for pid in tree:
        if pid in stats:
            ticks += cpu_ticks(stats[pid])
    return ticks / os.sysconf("SC_CLK_TCK")


def process_table() -> dict[int, list[str]]:
    """Every process's /proc/PID/stat fields after the name (field 3 on: state, ppid, ...)."""
    table: dict[int, list[str]] = {}
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            with contextlib.suppress(OSError, IndexError):
                table[int(entry.name)] = (entry / "stat").read_text().rsplit(")", 1)[1].split()
    return table


def cpu_ticks(fields: list[str]) -> int:
    """utime + stime (fields 14 and 15 of /proc/PID/stat: 11 and 12 after the name)."""
    return int(fields[11]) + int(fields[12])


@contextlib.contextmanager
def own_process(
    push_concurrency: int | None = None, *, official: bool = False
) -> Iterator[LauncherProcess]:
    """The emulators as `python -m emulators` runs them (strict Firestore with the project's
    index set, every port free), their exports in this process's environment, so the clients
    made here reach them; `push_concurrency` None keeps the launcher's default. `official`:
    `python -m emulators --official`, Google's Firestore and Pub/Sub emulators (gcloud, a JVM
    each) in place of the built-in ones; `cpu_s` then counts the JVMs too."""
    command = [sys.executable, "-m", "emulators"]
    for flag in (
        "firestore",
        "firestore-admin",
        "pubsub",
        "pubsub-admin",
        "oidc",
        "storage",
        "monitoring",
    ):
        command += [f"--{flag}-port", "0"]
    if official:
        command.append("--official")
    if push_concurrency is not None:
        command += ["--pubsub-push-concurrency", str(push_concurrency)]
    process = subprocess.Popen(command, stdout=subprocess.PIPE, text=True)
    try:
        launched = _launched(process)
        os.environ.update(launched.exports)
        yield launched
    finally:
        process.terminate()
        process.wait(timeout=30)


def _launched(process: subprocess.Popen[str]) -> LauncherProcess:
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
            return LauncherProcess(exports, admin, process.pid)
    raise RuntimeError("the emulator launcher exited before it was ready")


def billed_ops(stats: dict[str, Any]) -> int:
    """Reads + writes + deletes: what Firestore bills per operation."""
    return int(stats["document_reads"] + stats["document_writes"] + stats["document_deletes"])


def delta(after: dict[str, Any], before: dict[str, Any]) -> dict[str, int]:
    keys = ("document_reads", "document_writes", "document_deletes")
    return {k: int(after[k] - before[k]) for k in keys}


@dataclass
class WorkerServer:
    """The real worker app (real media action on the storage emulator) on a local port."""

    url: str
    done: Done
    server: Any
    thread: threading.Thread
    storage_client: Any
    devnull: Any = None

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()
        self.thread.join(timeout=5)
        logging.getLogger().handlers.clear()
        if self.devnull is not None:
            self.devnull.close()


def serve_worker(
    project: str, emulators: Emulators, client: Any, *, extra_actions: Sequence[Any] = ()
) -> WorkerServer:
    """The worker with the media action (and `extra_actions`, bound), on 127.0.0.1."""
    import google.cloud.storage as storage
    from google.auth.credentials import AnonymousCredentials

    from services.jobs.clock import SystemClock
    from services.store.job_store import FirestoreJobStore
    from services.store.rejections import RejectionStore
    from services.telemetry.log import configure_logging
    from services.worker import media
    from services.worker.actions import ActionRegistry
    from services.worker.app import create_app
    from services.worker.settings import WorkerSettings

    logging.getLogger("werkzeug").setLevel(logging.WARNING)
    # The worker logs as in production (one JSON line per outcome), into the void.
    devnull = open(os.devnull, "w")  # noqa: SIM115 - closed by WorkerServer.close
    configure_logging("INFO", stream=devnull)
    clock = SystemClock()
    storage_client = storage.Client(project=project, credentials=AnonymousCredentials())
    holder: dict[str, Any] = {}
    done = Done(lambda environ, start: holder["app"](environ, start))
    server = make_server("127.0.0.1", 0, done, threaded=True)
    url = f"http://127.0.0.1:{server.server_port}/"
    settings = WorkerSettings(
        project=project,
        audience=url,
        allowed_invokers=frozenset({PUSHER}),
        certs_url=emulators.oidc.certs_url,
    )
    actions = ActionRegistry(
        [media.delete_source_action(storage_client, settings.retry_policy), *extra_actions]
    )
    holder["app"] = create_app(
        settings,
        clock=clock,
        store=FirestoreJobStore(client, clock),
        actions=actions,
        rejections=RejectionStore(client),
    )
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    return WorkerServer(url, done, server, thread, storage_client, devnull)


def push_config(url: str) -> dict[str, Any]:
    return {
        "push_endpoint": url,
        "oidc_token": {"service_account_email": PUSHER, "audience": url},
    }


@dataclass
class Topic:
    """A topic with one subscription (pull until `push_to`, which turns it into push)."""

    topic: str
    subscription: str
    publisher_client: Any
    subscriber_client: Any

    def push_to(self, url: str | None) -> None:
        """Push to `url`; None turns the subscription back into a pull one."""
        config = push_config(url) if url is not None else {}
        self.subscriber_client.modify_push_config(
            request={"subscription": self.subscription, "push_config": config}
        )

    def close(self) -> None:
        self.publisher_client.stop()
        self.subscriber_client.close()


def topic(project: str, name: str = "jobs", push_url: str | None = None) -> Topic:
    from google.cloud import pubsub_v1

    publisher = pubsub_v1.PublisherClient()
    subscriber = pubsub_v1.SubscriberClient()
    path = publisher.create_topic(name=f"projects/{project}/topics/{name}").name
    subscription = f"projects/{project}/subscriptions/{name}-sub"
    request: dict[str, Any] = {"name": subscription, "topic": path, "ack_deadline_seconds": 60}
    if push_url is not None:
        request["push_config"] = push_config(push_url)
    subscriber.create_subscription(request=request)
    return Topic(path, subscription, publisher, subscriber)


def seed_due(
    client: Any,
    count: int,
    due_at: datetime,
    *,
    prefix: str = "job",
    bucket: str = "bench-media",
    params: Callable[[int], dict[str, Any]] | None = None,
    idempotency_key: Callable[[int], str | None] | None = None,
    spacing: timedelta = timedelta(0),
    shards: int = 1,
    action: str = ACTION,
    catalogue: Any = None,
) -> list[str]:
    """`count` deferred jobs as `schedule` writes them (with JOBS_SHARDS=`shards`), in
    500-write batches (4 at a time)."""
    from concurrent.futures import ThreadPoolExecutor

    from services.jobs import schema
    from services.jobs.model import NewJob
    from services.jobs.record import Job

    ids = [f"{prefix}-{n:07d}" for n in range(count)]
    collection = client.collection(schema.JOBS)

    def batch(first: int) -> None:
        writes = client.batch()
        for n in range(first, min(first + 500, count)):
            new = NewJob(
                ids[n],
                action,
                f"media-{n}",
                due_at + spacing * n,
                params(n) if params else {"bucket": bucket, "objects": [f"src/{prefix}-{n}"]},
                idempotency_key=idempotency_key(n) if idempotency_key else None,
            )
            job = Job.create(new.validated(catalogue), due_at, shards=shards)
            writes.set(collection.document(ids[n]), job.to_document())
        writes.commit()

    with ThreadPoolExecutor(max_workers=4) as pool:
        list(pool.map(batch, range(0, count, 500)))
    return ids


def upload_objects(bucket: Any, count: int, prefix: str = "job") -> None:
    """One small source object per job (`src/<prefix>-<n>`), 16 uploads at a time."""
    from concurrent.futures import ThreadPoolExecutor

    def upload(n: int) -> None:
        bucket.blob(f"src/{prefix}-{n}").upload_from_string(b"x")

    with ThreadPoolExecutor(max_workers=16) as pool:
        list(pool.map(upload, range(count)))


@dataclass
class FixedCosts:
    """Billed operations of a run's steps that do not scale with the jobs it moves."""

    per_call: dict[str, list[dict[str, int]]] = field(default_factory=dict)

    def total(self) -> int:
        return sum(sum(d.values()) for calls in self.per_call.values() for d in calls)


class MeteredStore:
    """The real store; the billed operations of its per-run calls measured one by one.

    Only valid while nothing else uses the emulator's project (no worker running): the
    snapshots around each call would otherwise count other callers' operations.
    """

    FIXED = ("get_control", "reclaim_expired", "backlog")

    def __init__(self, store: Any, emulators: Emulators, project: str) -> None:
        self._store = store
        self._emulators = emulators
        self._project = project
        self.fixed = FixedCosts()

    def __getattr__(self, name: str) -> Any:
        method = getattr(self._store, name)
        if name not in self.FIXED:
            return method

        def metered(*args: Any, **kwargs: Any) -> Any:
            before = self._emulators.billed(self._project)
            try:
                return method(*args, **kwargs)
            finally:
                spent = delta(self._emulators.billed(self._project), before)
                self.fixed.per_call.setdefault(name, []).append(spent)

        return metered


class MeteredRuns:
    """The scan_runs log, with the billed operations of each record."""

    def __init__(self, runs: Any, emulators: Emulators, project: str, fixed: FixedCosts) -> None:
        self._runs = runs
        self._emulators = emulators
        self._project = project
        self._fixed = fixed

    def record(self, run: Any) -> None:
        before = self._emulators.billed(self._project)
        try:
            self._runs.record(run)
        finally:
            spent = delta(self._emulators.billed(self._project), before)
            self._fixed.per_call.setdefault("scan_runs.record", []).append(spent)


def scanner(
    store: Any, client: Any, project: str, topic_name: str, clock: Any, **limits: Any
) -> tuple[Any, Any]:
    """The real Scanner on `store` with a real Publisher; returns (scanner, publisher).
    `rates` (in `limits`): each budgeted action's claim rate, as the scan reads the catalogue."""
    from services.edge.publisher import Publisher
    from services.jobs.budget import ScanLimits
    from services.scan.scanner import Scanner
    from services.store.runs import ScanRunLog
    from services.telemetry.metrics import InMemorySink

    publisher = Publisher.create(project, topic_name, timeout_s=30)
    runs = limits.pop("runs", None) or ScanRunLog(client, retention=timedelta(days=30))
    rates = limits.pop("rates", None)
    scan = Scanner(
        store,
        publisher,
        clock,
        ScanLimits(**limits),
        runs=runs,
        metrics=InMemorySink(),
        rates=rates,
    )
    return scan, publisher


def drain_pull(subscriber: Any, subscription: str) -> dict[str, int]:
    """Pull and acknowledge everything; messages per job ID."""
    counts: dict[str, int] = {}
    while True:
        response = subscriber.pull(
            subscription=subscription, max_messages=1000, return_immediately=True
        )
        batch = list(response.received_messages)
        if not batch:
            return counts
        subscriber.acknowledge(subscription=subscription, ack_ids=[m.ack_id for m in batch])
        for received in batch:
            job_id = received.message.data.decode()
            counts[job_id] = counts.get(job_id, 0) + 1


def per(total: float, count: int) -> float:
    return total / count if count else 0.0


def states(client: Any, ids: Sequence[str]) -> dict[str, int]:
    from services.jobs import schema

    found: dict[str, int] = {}
    collection = client.collection(schema.JOBS)
    for first in range(0, len(ids), 300):
        refs = [collection.document(i) for i in ids[first : first + 300]]
        for snapshot in client.get_all(refs):
            state = str(snapshot.get("state"))
            found[state] = found.get(state, 0) + 1
    return found


def loadavg() -> str:
    """The machine's 1, 5 and 15 minute load averages, printed beside a CPU figure: on a
    shared machine CPU per job rises with the load."""
    return " ".join(Path("/proc/loadavg").read_text().split()[:3])
