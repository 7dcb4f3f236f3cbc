"""Scan throughput against the emulator's raw limit for the same writes and publishes, side by
side in one process, and their ratio.

raw: N documents updated twice each (what a claim and an enqueue mark write) in 500-write
commits, 4 commits at a time, while the same N job IDs are published with the scan's own
`Publisher`. scan: real `Scanner` runs over N due jobs until none is due. read: the part of a
claim raw does not do, alone: N due documents read (not decoded, not written) by the claim's
query in transactions of 500, one after another, as the claim thread does; so
raw / (raw + read) is the most the scan could reach if it did nothing but raw's work and the
reads a claim cannot skip (printed as "bound", by wall time and by CPU). Both count from the
first request to the last answer; seeding is not timed. Each also prints this process's CPU
time per job (in one process: every thread, client, emulators and gRPC under one interpreter
lock; in two: the client's, and the emulator process's beside it), the figure that holds better
on a machine other work shares than the wall-clock rates do. The emulator is
strict with the project's index set, whose indexes the scan's backlog queries build before the
raw phase (the emulator builds an index on first use; Firestore keeps it from the start).
N: JOBS_BENCH_SCANRAW_JOBS (default 10,000).
Emulators: JOBS_BENCH_SCANRAW_EMULATORS, a comma-separated list run in that order in one window
(default `builtin`): `builtin` = the built-in emulators in this process, then in their own;
`google` = Google's Firestore and Pub/Sub emulators (`python -m emulators --official`: gcloud,
a JVM each, always in their own processes), which keep no index set: they serve every query
without one and maintain none of the project's, so their writes carry less index work.
Run: `.venv/bin/python -m tests.benchmarks scanraw`;
both sets side by side: `JOBS_BENCH_SCANRAW_EMULATORS=builtin,google .venv/bin/python -m
tests.benchmarks scanraw`.
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from datetime import datetime, timedelta
from typing import Any

from tests.benchmarks import rig

DEFAULT_JOBS = 10_000
LIMITS: dict[str, Any] = {
    "time_budget_s": 600,
    "max_per_run": 2_000,
    "page_size": 500,
    "interval_s": 60,
    "claim_timeout_s": 900,
}


def main() -> None:
    from emulators.launcher import PROJECT_INDEXES

    jobs = int(os.environ.get("JOBS_BENCH_SCANRAW_JOBS", DEFAULT_JOBS))
    chosen = [
        name.strip()
        for name in os.environ.get("JOBS_BENCH_SCANRAW_EMULATORS", "builtin").split(",")
        if name.strip()
    ]
    unknown = sorted(set(chosen) - set(EMULATOR_SETS)) or ([] if chosen else ["(none)"])
    if unknown:
        raise SystemExit(
            f"JOBS_BENCH_SCANRAW_EMULATORS: unknown {', '.join(unknown)}; "
            f"expected a comma-separated list of {', '.join(EMULATOR_SETS)}"
        )
    print(f"-- {jobs:,} jobs; load average at start: {_load()}")
    for name in chosen:
        if name == "builtin":
            print("-- built-in emulators in this process (client and emulator share one lock)")
            # Firestore strict with the project's index set, as deployed: a write maintains
            # the entries production keeps for it, no more.
            with rig.in_process(firestore_indexes=PROJECT_INDEXES):
                _side_by_side(jobs, "bench-scanraw", lambda: 0.0)
            print("-- built-in emulators in their own process (python -m emulators)")
            with rig.own_process() as emulators:
                _side_by_side(jobs, "bench-scanraw-b", emulators.cpu_s)
        else:
            print("-- Google's emulators in their own processes (python -m emulators --official)")
            with rig.own_process(official=True) as emulators:
                _side_by_side(jobs, "bench-scanraw-g", emulators.cpu_s)
        print(f"-- load average after {name}: {_load()}")


EMULATOR_SETS = ("builtin", "google")


def _load() -> str:
    one, five, fifteen = os.getloadavg()
    return f"{one:.1f} / {five:.1f} / {fifteen:.1f} (1 / 5 / 15 min, {os.cpu_count()} CPUs)"


def _side_by_side(jobs: int, project: str, emulator_cpu: Callable[[], float]) -> None:
    """Raw, then the scan, over `jobs` due jobs each; prints both rates, their ratio and the
    CPU per job of this process (plus the emulator process's, when it has its own)."""
    from google.cloud import firestore

    from services.edge.publisher import Publisher
    from services.jobs.clock import SystemClock
    from services.store.job_store import FirestoreJobStore

    client = firestore.Client(project=project)
    clock = SystemClock()
    topic = rig.topic(project)
    ids = rig.seed_due(client, jobs, clock.now() - timedelta(hours=1), prefix="raw")
    store = FirestoreJobStore(client, clock)
    # The emulator builds an index the first time a query needs it; Firestore keeps every
    # declared one from the start. The scan's backlog queries build them now, so the raw
    # writes (which change `state`) maintain the same (state, ...) indexes the scan's do.
    store.backlog(clock.now(), timedelta(seconds=900), timedelta(seconds=900))
    publisher = Publisher.create(project, "jobs", timeout_s=30)
    cpu, remote = time.process_time(), emulator_cpu()
    raw_s = _raw(client, publisher, ids)
    raw_cpu, raw_remote = time.process_time() - cpu, emulator_cpu() - remote
    publisher.close()
    rig.drain_pull(topic.subscriber_client, topic.subscription)

    rig.seed_due(client, jobs, clock.now() - timedelta(hours=1), prefix="scan")
    cpu, remote = time.process_time(), emulator_cpu()
    read_s, read = _read(store, client, clock.now(), jobs)
    read_cpu, read_remote = time.process_time() - cpu, emulator_cpu() - remote
    # Runs of max_per_run each, as LIMITS says: the control's default catch-up rate
    # (20/s x the 60 s interval = 1,200) would otherwise cut every run short of it.
    store.update_control(
        "bench",
        "benchmark",
        claim_budget=LIMITS["max_per_run"],
        catch_up_rate=LIMITS["max_per_run"] / LIMITS["interval_s"],
    )
    scan, scan_publisher = rig.scanner(store, client, project, "jobs", clock, **LIMITS)
    started, cpu, remote = time.perf_counter(), time.process_time(), emulator_cpu()
    published = 0
    while True:
        run = scan.run()
        published += run.published
        if run.stopped_because != "budget":
            break
    scan_s = time.perf_counter() - started
    scan_cpu, scan_remote = time.process_time() - cpu, emulator_cpu() - remote
    scan.close()
    scan_publisher.close()
    messages = rig.drain_pull(topic.subscriber_client, topic.subscription)
    topic.close()
    client.close()
    raw_rate, scan_rate = jobs / raw_s, published / scan_s
    print(
        f"raw:  {2 * jobs:,} updates in 500-write commits + {jobs:,} publishes in {raw_s:.1f} s"
        f" = {raw_rate:,.0f} jobs/s ({2 * jobs / raw_s:,.0f} writes/s)"
    )
    print(
        f"scan: {published:,} jobs claimed, published and marked in {scan_s:.1f} s = "
        f"{scan_rate:,.0f} jobs/s ({len(messages):,} distinct IDs on the topic)"
    )
    print(f"scan / raw: {scan_rate / raw_rate:.0%}")
    raw_ms, scan_ms = 1000 * raw_cpu / jobs, 1000 * scan_cpu / max(published, 1)
    read_ms = 1000 * read_cpu / max(read, 1)
    print(
        f"read: {read:,} due documents read in claim-sized transactions in {read_s:.1f} s = "
        f"{read / read_s:,.0f} documents/s; bound raw / (raw + read): "
        f"{raw_s / (raw_s + read_s * jobs / max(read, 1)):.0%} by wall time, "
        f"{raw_ms / (raw_ms + read_ms):.0%} by CPU"
    )
    print(
        f"CPU per job in this process: raw {raw_ms:.2f} ms, read {read_ms:.2f} ms, "
        f"scan {scan_ms:.2f} ms; raw / scan: {raw_ms / scan_ms:.0%}"
    )
    if raw_remote or scan_remote:
        raw_e, scan_e = 1000 * raw_remote / jobs, 1000 * scan_remote / max(published, 1)
        read_e = 1000 * read_remote / max(read, 1)
        print(
            f"CPU per job in the emulator process: raw {raw_e:.2f} ms, read {read_e:.2f} ms, "
            f"scan {scan_e:.2f} ms; bound by its CPU: {raw_e / (raw_e + read_e):.0%}"
        )


def _read(store: Any, client: Any, now: datetime, jobs: int) -> tuple[float, int]:
    """(seconds, documents read): the claim's own query (`due_query`, LIMITS["page_size"] at
    a time) run `jobs / page_size` times, each in a read-write transaction that holds what it
    read, as a claim's does, through `TransactionRunner.query_in` as the claim reads (raw
    protobufs, no decoding), committed with no writes. Nothing is claimed, so each run reads
    the same first page: the same work per document as reading the next one, which the claim
    reaches without a cursor too."""
    from services.store.bounds import CallBounds
    from services.store.gateway import Gateway
    from services.store.queries import due_query
    from services.store.transactions import TransactionRunner

    runner = TransactionRunner(Gateway(client, None, CallBounds(timeout_s=30)))
    query = store._docs.query(due_query(now, LIMITS["page_size"]))

    def page(transaction: Any) -> int:
        return sum(1 for _ in runner.query_in(transaction, query))

    started = time.perf_counter()
    read = sum(runner.run(page) for _ in range(max(1, jobs // LIMITS["page_size"])))
    return time.perf_counter() - started, read


def _raw(client: Any, publisher: Any, ids: list[str]) -> float:
    from services.jobs import schema

    collection = client.collection(schema.JOBS)

    def commit(chunk: list[str], value: str) -> None:
        batch = client.batch()
        for job_id in chunk:
            batch.update(collection.document(job_id), {"state": value})
        batch.commit()

    chunks = [ids[n : n + 500] for n in range(0, len(ids), 500)]
    started = time.perf_counter()
    futures = [publisher.publish(job_id, 1, "raw") for job_id in ids]
    with ThreadPoolExecutor(max_workers=4) as pool:
        list(pool.map(lambda c: commit(c, "claimed"), chunks))
        list(pool.map(lambda c: commit(c, "enqueued"), chunks))
    for future in futures:
        future.result(timeout=60)
    return time.perf_counter() - started
