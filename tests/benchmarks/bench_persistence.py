"""Benchmark of --data-dir: how long the emulators take to save and load their state.

Run: ``.venv/bin/python -m tests.benchmarks persistence``. Firestore documents shaped like job
records and Pub/Sub unacknowledged messages go in through the real clients; the figures are the
time ``stop()`` spends saving and ``start()`` spends loading, and the file sizes.
"""

from __future__ import annotations

import os
import tempfile
import time
from datetime import UTC, datetime
from pathlib import Path

from google.cloud import firestore, pubsub_v1

from emulators.firestore import server as firestore_server
from emulators.pubsub import server as pubsub_server
from tests.fixtures.firestore import seed_due_jobs

JOBS = 20_000
MESSAGES = 20_000


def _firestore(data: Path) -> None:
    emulator = firestore_server.start(admin_port=None, data_file=data)
    os.environ["FIRESTORE_EMULATOR_HOST"] = emulator.address
    client = firestore.Client(project="bench")
    seed_due_jobs(client, JOBS, datetime(2026, 1, 1, tzinfo=UTC))
    client.close()
    began = time.perf_counter()
    emulator.stop()
    saved_s = time.perf_counter() - began
    began = time.perf_counter()
    emulator = firestore_server.start(admin_port=None, data_file=data)
    loaded_s = time.perf_counter() - began
    emulator.stop()
    print(
        f"firestore: {JOBS:,} job documents saved in {saved_s:.2f} s, loaded in {loaded_s:.2f} s,"
        f" {data.stat().st_size / 1e6:.1f} MB"
    )


def _pubsub(data: Path) -> None:
    emulator = pubsub_server.start(data_file=data)
    os.environ["PUBSUB_EMULATOR_HOST"] = emulator.address
    publisher = pubsub_v1.PublisherClient()
    subscriber = pubsub_v1.SubscriberClient()
    topic, sub = "projects/bench/topics/jobs", "projects/bench/subscriptions/jobs"
    publisher.create_topic(name=topic)
    subscriber.create_subscription(name=sub, topic=topic)
    futures = [publisher.publish(topic, f"job-{n:06d}".encode()) for n in range(MESSAGES)]
    for future in futures:
        future.result(timeout=60)
    began = time.perf_counter()
    emulator.stop()
    saved_s = time.perf_counter() - began
    began = time.perf_counter()
    emulator = pubsub_server.start(data_file=data)
    loaded_s = time.perf_counter() - began
    emulator.stop()
    print(
        f"pubsub: {MESSAGES:,} unacknowledged messages saved in {saved_s:.2f} s (with the"
        f" server's stop), loaded in {loaded_s:.2f} s, {data.stat().st_size / 1e6:.1f} MB"
    )


def main() -> None:
    with tempfile.TemporaryDirectory() as tmp:
        _firestore(Path(tmp) / "firestore.json")
        _pubsub(Path(tmp) / "pubsub.json")
