"""Per-shard write rates of a drain: the same backlog claimed with JOBS_SHARDS=1 and =4.

Seeds JOBS_BENCH_SHARDS_JOBS (default 4,000) due jobs written as `schedule` writes them with
N shards, resets the emulator's counters, and drains them with real `Scanner` runs on the real
store (claims on up to min(N, 8) threads, publishes to the Pub/Sub emulator). Prints the
drain's jobs/s and, from the Firestore emulator's `write_rates` (the busiest one-second window
per collection, timestamp field and `shard` value), each shard's peak writes/s on `jobs.due_at`:
the figure Firestore's 500 writes/s guidance for a sequential indexed field applies to
(https://cloud.google.com/firestore/docs/best-practices). Seeding is not counted.
Run: `.venv/bin/python -m tests.benchmarks shards`.
"""

from __future__ import annotations

import os
import time
from typing import Any

from tests.benchmarks import rig

DEFAULT_JOBS = 4_000
SHARD_COUNTS = (1, 4)
FIELD = "due_at"


def main() -> None:
    count = int(os.environ.get("JOBS_BENCH_SHARDS_JOBS", DEFAULT_JOBS))
    with rig.in_process() as emulators:
        for shards in SHARD_COUNTS:
            _drain(emulators, shards, count)


def _drain(emulators: rig.Emulators, shards: int, count: int) -> None:
    from google.cloud import firestore

    from services.jobs.clock import SystemClock
    from services.jobs.store import FirestoreJobStore

    project = f"bench-shards-{shards}"
    client = firestore.Client(project=project)
    clock = SystemClock()
    rig.topic(project)
    store = FirestoreJobStore(client, clock, shards=shards)
    scan, publisher = rig.scanner(
        store, client, project, "jobs", clock, max_per_run=count, page_size=200
    )
    try:
        rig.seed_due(client, count, clock.now(), shards=shards)
        emulators.reset(project)
        started = time.perf_counter()
        claimed = 0
        while claimed < count:
            run = scan.run()
            if run.claimed == 0:
                break
            claimed += run.claimed
        elapsed = time.perf_counter() - started
        rows = _due_rows(emulators.billed(project))
        print(
            f"JOBS_SHARDS={shards}: {claimed:,} of {count:,} jobs claimed and published in "
            f"{elapsed:.1f} s ({claimed / elapsed:.0f} jobs/s)"
        )
        for row in rows:
            print(
                f"  jobs.{FIELD} shard {row['shard']}: peak {row['peak_writes_per_s']} writes/s, "
                f"{row['writes']:,} writes"
            )
        peak = max((r["peak_writes_per_s"] for r in rows), default=0)
        print(f"  busiest shard: {peak} writes/s over {len(rows)} shard(s)")
    finally:
        scan.close()
        publisher.close()
        client.close()


def _due_rows(stats: dict[str, Any]) -> list[dict[str, Any]]:
    rows = [
        r for r in stats.get("write_rates", []) if r["collection"] == "jobs" and r["field"] == FIELD
    ]
    return sorted(rows, key=lambda r: (r["shard"] is None, r["shard"] or 0))
