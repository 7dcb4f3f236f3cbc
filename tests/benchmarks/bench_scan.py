"""Scan throughput over a 20,000-job backlog, and Firestore billed operations per job.

Runs `Scanner.run` (what each scan request does after authentication) with the real Firestore
and Pub/Sub clients against the built-in emulators, until the backlog is drained. Prints jobs
claimed and published per second, the per-run figures, and the emulator's billing counters
divided by the jobs published (reads include each run's control read, reclaim queries and
backlog counts; writes include the claim, the enqueue mark and each run's scan_runs document).
Run: `.venv/bin/python -m tests.benchmarks scan`. Everything is in this process on 127.0.0.1,
so the figures include the emulators' own cost on the same two cores.
"""

from __future__ import annotations

import os
import threading
import time
from datetime import UTC, datetime, timedelta
from typing import Any, cast

from emulators.firestore.server import start as start_firestore
from emulators.pubsub.server import start as start_pubsub
from services.edge.publisher import Publisher
from services.jobs import schema
from services.jobs.budget import ScanLimits
from services.jobs.clock import FakeClock
from services.jobs.model import NewJob
from services.jobs.record import Job
from services.scan.scanner import Scanner
from services.store.job_store import FirestoreJobStore
from services.store.runs import ScanRunLog
from services.telemetry.metrics import InMemorySink

T0 = datetime(2026, 1, 1, tzinfo=UTC)
BACKLOG = 20_000
PROJECT = "bench-scan"
TOPIC = "jobs"
LIMITS = ScanLimits(
    time_budget_s=600, max_per_run=2_000, page_size=500, interval_s=60, claim_timeout_s=900
)


class _TimedStore:
    """The real store, with the wall time spent in each operation (summed across threads)."""

    def __init__(self, store: FirestoreJobStore) -> None:
        self._store = store
        self.seconds: dict[str, float] = {}
        self._lock = threading.Lock()

    def __getattr__(self, name: str) -> Any:
        method = getattr(self._store, name)

        def timed(*args: Any, **kwargs: Any) -> Any:
            started = time.perf_counter()
            try:
                return method(*args, **kwargs)
            finally:
                with self._lock:
                    self.seconds[name] = self.seconds.get(name, 0.0) + time.perf_counter() - started

        return timed


def _seed(client: Any, count: int) -> None:
    for first in range(0, count, 500):
        batch = client.batch()
        for n in range(first, min(first + 500, count)):
            job_id = f"job-{n:07d}"
            new = NewJob(
                job_id, "media.delete_source", f"media-{n}", T0, {"object": f"media-{n}/source.mp4"}
            )
            job = Job.create(new.validated(), T0)
            batch.set(client.collection(schema.JOBS).document(job_id), job.to_document())
        batch.commit()


def _drain_subscription(subscriber: Any, subscription: str) -> dict[str, int]:
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


def main() -> None:
    firestore_emulator = start_firestore(host="127.0.0.1", port=0, admin_port=0)
    pubsub_emulator = start_pubsub()
    os.environ["FIRESTORE_EMULATOR_HOST"] = firestore_emulator.address
    os.environ["PUBSUB_EMULATOR_HOST"] = pubsub_emulator.address
    from google.cloud import firestore, pubsub_v1

    client = firestore.Client(project=PROJECT)
    admin_publisher = pubsub_v1.PublisherClient()
    subscriber = pubsub_v1.SubscriberClient()
    topic_path = admin_publisher.topic_path(PROJECT, TOPIC)
    subscription = subscriber.subscription_path(PROJECT, "bench")
    admin_publisher.create_topic(name=topic_path)
    subscriber.create_subscription(name=subscription, topic=topic_path)
    publisher = Publisher.create(PROJECT, TOPIC, timeout_s=30)
    clock = FakeClock(T0 + timedelta(minutes=1))
    store = FirestoreJobStore(client, clock)
    # The operator's dials: let the deployment's ceiling (LIMITS.max_per_run) set the budget.
    store.update_control(
        "bench", "benchmark", claim_budget=LIMITS.max_per_run, catch_up_rate=1000.0
    )
    timed = _TimedStore(store)
    scanner = Scanner(
        cast(FirestoreJobStore, timed),  # a proxy: each call goes to the real store, timed
        publisher,
        clock,
        LIMITS,
        runs=ScanRunLog(client, retention=timedelta(days=30)),
        metrics=InMemorySink(),
    )
    try:
        seeded = time.perf_counter()
        _seed(client, BACKLOG)
        seeded = time.perf_counter() - seeded
        print(f"seeded {BACKLOG:,} due jobs in {seeded:.1f} s (500-write batches)")
        print(
            f"limits: max_per_run {LIMITS.max_per_run}, page_size {LIMITS.page_size}, "
            f"mark_workers {LIMITS.mark_workers}"
        )
        firestore_emulator.reset_stats(PROJECT)
        claimed = published = runs = 0
        started = time.perf_counter()
        while True:
            run_started = time.perf_counter()
            run = scanner.run()
            elapsed = time.perf_counter() - run_started
            runs += 1
            claimed += run.claimed
            published += run.published
            print(
                f"  run {runs:2d}: claimed {run.claimed:5d} published {run.published:5d} "
                f"failed {run.publish_failed} in {elapsed:5.2f} s "
                f"({run.published / elapsed:6.0f} jobs/s), due left {run.due_count:6d}, "
                f"stopped: {run.stopped_because}"
            )
            clock.advance(timedelta(seconds=LIMITS.interval_s))
            if run.stopped_because != "budget" or not run.due_count:
                break
        total = time.perf_counter() - started
        stats = firestore_emulator.stats(PROJECT)
        counts = _drain_subscription(subscriber, subscription)
        once = sum(1 for c in counts.values() if c == 1)
        print(f"scan runs: {runs}, claimed {claimed:,}, published {published:,} in {total:.1f} s")
        print(f"  claimed per second:   {claimed / total:8.0f}")
        print(f"  published per second: {published / total:8.0f}")
        print(
            f"  Firestore billed per job: reads {stats['document_reads'] / published:.3f}, "
            f"writes {stats['document_writes'] / published:.3f} "
            f"(totals: {stats['document_reads']:,} reads, {stats['document_writes']:,} writes, "
            f"{stats['index_entries_counted']:,} index entries counted)"
        )
        print(f"  messages on the topic: {sum(counts.values()):,}; job IDs exactly once: {once:,}")
        print("  time in store calls (mark_* summed over the mark threads):")
        for name, seconds in sorted(timed.seconds.items(), key=lambda item: -item[1]):
            print(f"    {name:<22} {seconds:7.1f} s")
    finally:
        scanner.close()
        publisher.close()
        admin_publisher.stop()
        subscriber.close()
        client.close()
        pubsub_emulator.stop()
        firestore_emulator.stop()
