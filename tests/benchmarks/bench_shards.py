"""Write rates per (collection, indexed timestamp field, shard) of one job flow, with
JOBS_SHARDS=1 and =4, each on the index set a deployment with that N has.

Seeds JOBS_BENCH_SHARDS_JOBS (default 4,000) due jobs written as `schedule` writes them with N
shards, resets the emulator's counters, drains them with real `Scanner` runs on the real store
(claims on up to min(N, 8) threads, publishes to the Pub/Sub emulator), then runs the worker's
two store steps on each job (`start`, `complete`; 8 threads, no push: the index writes are the
store's). The Firestore emulator is strict and serves the project with
`services.jobs.schema?shards=N` (N = 1: the unsharded indexes, the sharded ones built ahead and
the single-field `due_at`; N = 4: only the sharded ones). From its `write_rates` (every
timestamp field some index of that set holds: shard None = an unsharded index holds it, one key
range for the collection) it prints each row's busiest one-second window: the figure
Firestore's 500 writes/s guidance for a sequential indexed field applies to
(https://cloud.google.com/firestore/docs/best-practices). Seeding is not counted.
Run: `.venv/bin/python -m tests.benchmarks shards`.
"""

from __future__ import annotations

import os
import time
from concurrent import futures
from datetime import timedelta
from typing import Any

from tests.benchmarks import rig

DEFAULT_JOBS = 4_000
SHARD_COUNTS = (1, 4)
WORKER_THREADS = 8
# Collections written once or more per job: an unsharded hot range there caps jobs/s.
PER_JOB = ("jobs", "idempotency")


def main() -> None:
    from emulators.firestore import indexes
    from emulators.firestore.server import start
    from emulators.launcher import PROJECT_INDEXES

    count = int(os.environ.get("JOBS_BENCH_SHARDS_JOBS", DEFAULT_JOBS))
    with rig.in_process() as emulators:
        strict = start(
            host="127.0.0.1", port=0, admin_port=None, indexes=indexes.load(PROJECT_INDEXES)
        )
        os.environ["FIRESTORE_EMULATOR_HOST"] = strict.address
        try:
            for shards in SHARD_COUNTS:
                project = f"bench-shards-{shards}"
                strict.use_indexes(project, indexes.load(f"{PROJECT_INDEXES}?shards={shards}"))
                _flow(strict, project, shards, count)
        finally:
            os.environ["FIRESTORE_EMULATOR_HOST"] = emulators.firestore.address
            strict.stop()


def _flow(emulator: Any, project: str, shards: int, count: int) -> None:
    from google.cloud import firestore

    from services.jobs.clock import SystemClock
    from services.store.job_store import FirestoreJobStore

    client = firestore.Client(project=project)
    clock = SystemClock()
    rig.topic(project)
    store = FirestoreJobStore(client, clock, shards=shards)
    scan, publisher = rig.scanner(
        store, client, project, "jobs", clock, max_per_run=count, page_size=200
    )
    try:
        rig.seed_due(client, count, clock.now(), shards=shards)
        emulator.reset_stats(project)
        started = time.perf_counter()
        claimed = 0
        while claimed < count:
            run = scan.run()
            if run.claimed == 0:
                break
            claimed += run.claimed
        drained = time.perf_counter() - started
        started = time.perf_counter()
        completed = _work(client, store)
        worked = time.perf_counter() - started
        print(
            f"JOBS_SHARDS={shards}: {claimed:,} of {count:,} jobs claimed and published in "
            f"{drained:.1f} s ({claimed / drained:.0f} jobs/s); {completed:,} started and "
            f"completed through the store in {worked:.1f} s ({completed / worked:.0f} jobs/s)"
        )
        _print_rates(emulator.stats(project).get("write_rates", []))
    finally:
        scan.close()
        publisher.close()
        client.close()


def _work(client: Any, store: Any) -> int:
    """`start` then `complete` on every enqueued job, as the worker does after a push."""
    from google.cloud.firestore_v1.base_query import FieldFilter

    from services.jobs.parts import Result
    from services.jobs.record import Job

    query = client.collection("jobs").where(filter=FieldFilter("state", "==", "enqueued"))
    enqueued = [Job.from_document(s.id, s.to_dict() or {}) for s in query.stream()]

    def one(job: Job) -> None:
        running = store.start(job.job_id, job.generation, timedelta(minutes=5), "bench-worker")
        store.complete(running.lease, Result("deleted"), basis=running)

    with futures.ThreadPoolExecutor(WORKER_THREADS) as pool:
        list(pool.map(one, enqueued))
    return len(enqueued)


def _print_rates(rows: list[dict[str, Any]]) -> None:
    rows = sorted(
        rows, key=lambda r: (r["collection"], r["field"], r["shard"] is not None, r["shard"] or 0)
    )
    for row in rows:
        where = "unsharded" if row["shard"] is None else f"shard {row['shard']}"
        print(
            f"  {row['collection']}.{row['field']} {where}: peak "
            f"{row['peak_writes_per_s']:,} writes/s, {row['writes']:,} writes"
        )
    hot = [r for r in rows if r["collection"] in PER_JOB and r["shard"] is None]
    sharded = [r for r in rows if r["shard"] is not None]
    busiest = max((r["peak_writes_per_s"] for r in sharded), default=0)
    fields = sorted({f"{r['collection']}.{r['field']}" for r in hot})
    print(
        f"  unsharded per-job timestamp fields: {', '.join(fields) if fields else 'none'}; "
        f"busiest sharded range: {busiest:,} writes/s"
    )
