"""Benchmark of --data-dir's write-ahead log: what a commit costs when it must be on disk
before it is answered, against the same commit in memory.

Run: ``.venv/bin/python -m tests.benchmarks durability``. Through the real clients, on free
127.0.0.1 ports, each emulator alone in this process: Firestore document writes (one thread,
then 8 threads so concurrent commits share an fsync), Pub/Sub publishes (one thread, waiting
for each), Cloud Storage uploads (one thread). Printed per operation, in microseconds, with
and without a data directory (a temporary folder on the machine's disk), and for Firestore how
many fsyncs the commits shared.
"""

from __future__ import annotations

import os
import tempfile
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

from google.api_core.client_options import ClientOptions
from google.auth.credentials import AnonymousCredentials
from google.cloud import firestore, pubsub_v1
from google.cloud.storage import Client as StorageClient

from emulators.firestore import server as firestore_server
from emulators.pubsub import server as pubsub_server
from emulators.storage import server as storage_server

COMMITS = 1_000
THREADS = 8
PUBLISHES = 1_000
UPLOADS = 300


def _timed(count: int, run: Callable[[int], object], threads: int = 1) -> float:
    """Microseconds per operation of ``run(i)`` for i in range(count)."""
    began = time.perf_counter()
    if threads == 1:
        for i in range(count):
            run(i)
    else:
        with ThreadPoolExecutor(threads) as pool:
            list(pool.map(run, range(count)))
    return (time.perf_counter() - began) / count * 1e6


def _firestore(data: Path | None) -> str:
    emulator = firestore_server.start(
        admin_port=None, data_file=data / "firestore.json" if data else None
    )
    os.environ["FIRESTORE_EMULATOR_HOST"] = emulator.address
    client = firestore.Client(project="bench")
    jobs = client.collection("jobs")
    body = {"state": "deferred", "attempt": 1, "params": {"bucket": "b", "object": "a/1.mp4"}}
    _timed(50, lambda i: jobs.document(f"warm-{i}").set(body))
    one = _timed(COMMITS, lambda i: jobs.document(f"one-{i}").set(body))
    before = emulator.engine.journal.fsyncs if emulator.engine.journal else 0
    many = _timed(COMMITS, lambda i: jobs.document(f"many-{i}").set(body), THREADS)
    fsyncs = (emulator.engine.journal.fsyncs if emulator.engine.journal else 0) - before
    client.close()
    emulator.stop()
    shared = f", {COMMITS} commits shared {fsyncs} fsyncs" if data else ""
    return (
        f"firestore set: {one:,.0f} us/commit (1 thread), "
        f"{many:,.0f} us/commit ({THREADS} threads){shared}"
    )


def _pubsub(data: Path | None) -> str:
    emulator = pubsub_server.start(data_file=data / "pubsub.json" if data else None)
    os.environ["PUBSUB_EMULATOR_HOST"] = emulator.address
    publisher = pubsub_v1.PublisherClient()
    topic = "projects/bench/topics/jobs"
    publisher.create_topic(name=topic)
    pubsub_v1.SubscriberClient().create_subscription(
        name="projects/bench/subscriptions/jobs", topic=topic
    )
    _timed(50, lambda i: publisher.publish(topic, b"warm").result(timeout=30))
    each = _timed(PUBLISHES, lambda i: publisher.publish(topic, b"job-%d" % i).result(timeout=30))
    emulator.stop()
    return f"pubsub publish: {each:,.0f} us/publish (1 thread, each waited for)"


def _storage(data: Path | None) -> str:
    emulator = storage_server.start(data_dir=data / "storage" if data else None)
    client = StorageClient(
        project="bench",
        credentials=AnonymousCredentials(),
        client_options=ClientOptions(api_endpoint=emulator.url),
    )
    bucket = client.create_bucket("media")
    first = _timed(UPLOADS, lambda i: bucket.blob(f"a/{i}.mp4").upload_from_string(b"x" * 1024))
    then = _timed(UPLOADS, lambda i: bucket.blob(f"b/{i}.mp4").upload_from_string(b"x" * 1024))
    emulator.stop()
    return (
        f"storage upload (1 KiB): {first:,.0f} us/upload for the first {UPLOADS}, "
        f"{then:,.0f} us/upload for the next {UPLOADS}"
    )


def main() -> None:
    print(f"load average: {os.getloadavg()[0]:.1f} (2-core machine shared with other work)")
    for name, bench in (("firestore", _firestore), ("pubsub", _pubsub), ("storage", _storage)):
        print(f"{name} in memory:   {bench(None)}", flush=True)
        with tempfile.TemporaryDirectory(dir=os.environ.get("BENCH_DATA_DIR")) as folder:
            print(f"{name} --data-dir: {bench(Path(folder))}", flush=True)


if __name__ == "__main__":
    main()
