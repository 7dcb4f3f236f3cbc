"""Billed Firestore operations per job for the store's hot path, from the emulator's counters.

Prints reads and writes per job for claim + mark_enqueued + start + complete, and for a
claim_due that finds nothing, with 0 and with 100,000 future jobs in the collection.
Run: `.venv/bin/python -m tests.benchmarks store`.
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from typing import Any

from emulators.firestore.server import Emulator, start
from services.jobs import schema
from services.jobs.clock import FakeClock
from services.jobs.model import NewJob
from services.jobs.parts import Result
from services.jobs.record import Job
from services.jobs.results import ClaimedJob
from services.store.job_store import FirestoreJobStore
from tests.fixtures.store import mark_enqueued

T0 = datetime(2026, 1, 1, tzinfo=UTC)
JOBS = 500
FUTURE = 100_000


def _seed(
    client: Any, count: int, due_at: datetime, prefix: str, *, shared_key: bool = False
) -> None:
    params = {"object": "m/source.mp4"}  # fits the action's params schema
    for first in range(0, count, 500):
        batch = client.batch()
        for n in range(first, min(first + 500, count)):
            job_id = f"{prefix}-{n:07d}"
            key = f"key-{job_id}" if shared_key else None
            new = NewJob(job_id, "media.delete_source", "m", due_at, params, idempotency_key=key)
            document = Job.create(new.validated(), T0).to_document()
            batch.set(client.collection(schema.JOBS).document(job_id), document)
        batch.commit()


def _per_job(emulator: Emulator, project: str, jobs: int) -> tuple[float, float]:
    stats = emulator.stats(project)
    return stats["document_reads"] / jobs, stats["document_writes"] / jobs


def _lifecycle(emulator: Emulator, *, shared_key: bool) -> None:
    """The worker's path as the processor runs it: start, the idempotency read (only for a
    supplied key: a derived key's state is the job's own), complete."""
    from google.cloud import firestore

    project = f"bench-lifecycle-{'shared' if shared_key else 'derived'}"
    client = firestore.Client(project=project)
    store = FirestoreJobStore(client, FakeClock(T0))
    _seed(client, JOBS, T0, "due", shared_key=shared_key)
    rows = []
    emulator.reset_stats(project)
    started = time.perf_counter()
    claimed = store.claim_due(T0, "run-1", JOBS)
    rows.append(("claim_due (pages of 100)", *_per_job(emulator, project, len(claimed))))
    running: dict[str, Job] = {}

    def start(c: ClaimedJob) -> None:
        job = store.start(c.job_id, c.generation, timedelta(minutes=5), "w")
        running[c.job_id] = job
        if job.explicit_key:
            store.get_idempotency(job.idempotency_key)

    steps: tuple[tuple[str, Callable[[ClaimedJob], object]], ...] = (
        (
            "mark_enqueued_many",
            lambda c: mark_enqueued(store, c.job_id, c.generation, f"m-{c.job_id}"),
        ),
        ("start (+ key check if shared)", start),
        ("complete (CAS on start's write)", lambda c: _complete(store, running[c.job_id])),
    )
    for name, step in steps:
        emulator.reset_stats(project)
        for claim in claimed:
            step(claim)
        rows.append((name, *_per_job(emulator, project, len(claimed))))
    elapsed = time.perf_counter() - started
    total_reads = sum(r for _, r, _ in rows)
    total_writes = sum(w for _, _, w in rows)
    kind = "a supplied (shared) idempotency key" if shared_key else "derived idempotency keys"
    print(f"lifecycle of {len(claimed)} jobs with {kind} (one thread, {elapsed:.1f} s):")
    for name, reads, writes in rows:
        print(f"  {name:<30} reads/job {reads:5.2f}   writes/job {writes:5.2f}")
    print(f"  {'total':<30} reads/job {total_reads:5.2f}   writes/job {total_writes:5.2f}")
    client.close()


def _complete(store: FirestoreJobStore, job: Job) -> Job:
    """As the worker completes: on the record its delivery last wrote."""
    assert job.lease is not None
    return store.complete(job.lease, Result("deleted"), basis=job)


def _empty_claim(emulator: Emulator, future: int) -> None:
    from google.cloud import firestore

    project = f"bench-empty-{future}"
    client = firestore.Client(project=project)
    store = FirestoreJobStore(client, FakeClock(T0))
    seeded = time.perf_counter()
    _seed(client, future, T0 + timedelta(days=30), "future")
    seeded = time.perf_counter() - seeded
    for attempt in ("first", "second"):
        emulator.reset_stats(project)
        started = time.perf_counter()
        assert store.claim_due(T0, f"run-{attempt}", 1000) == []
        elapsed_ms = (time.perf_counter() - started) * 1000
        stats = emulator.stats(project)
        print(
            f"empty claim_due with {future:>7,} future jobs ({attempt} call): "
            f"reads {stats['document_reads']}, writes {stats['document_writes']}, "
            f"{elapsed_ms:.1f} ms on the emulator"
        )
    if future:
        print(f"  (seeding {future:,} jobs in 500-write batches took {seeded:.0f} s)")
    client.close()


def main() -> None:
    emulator = start(host="127.0.0.1", port=0, admin_port=0)
    os.environ["FIRESTORE_EMULATOR_HOST"] = emulator.address
    try:
        _lifecycle(emulator, shared_key=False)
        _lifecycle(emulator, shared_key=True)
        _empty_claim(emulator, 0)
        _empty_claim(emulator, FUTURE)
    finally:
        emulator.stop()
