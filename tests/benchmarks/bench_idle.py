"""Billed Firestore operations of a scan run with nothing due, with 0 and with many future jobs.

Seeds no jobs, then JOBS_BENCH_IDLE_FUTURE (default 100,000) jobs due in 30 days or later, and
after each prints the billed reads and writes of three consecutive real `Scanner` runs, from
the emulator's counters: with housekeeping every run (JOBS_SCAN_HOUSEKEEPING_INTERVAL_S=0) and
with the deployed default interval (900 s: the first run of the benchmark does its housekeeping
and marks it in the control document, the next two are within the interval), and once more
from a new scanner (a cold instance reading the mark); after seeding, one housekeeping run
warms the emulator up first (printed apart, see `_warm_up`). The default size is below 1,000,000
because seeding runs at roughly 1,300 writes/s on a 2-core machine; every query of an idle run
is bounded (a limit, or a count of due entries only), so its cost does not grow with the number
of future jobs. The Firestore emulator's RSS is printed after seeding and after the runs
(about 7 KB per job document: it needs about 7.5 GB for 1,000,000).
Run: `.venv/bin/python -m tests.benchmarks idle` (JOBS_BENCH_IDLE_FUTURE=1000000 for the full
figure: about 13 minutes of seeding here).
"""

from __future__ import annotations

import os
import time
from datetime import timedelta
from pathlib import Path
from typing import Any

from tests.benchmarks import rig

DEFAULT_FUTURE = 100_000
RUNS = 3


def main() -> None:
    from google.cloud import firestore

    from services.jobs.budget import DEFAULT_HOUSEKEEPING_INTERVAL_S as SPACED_S
    from services.jobs.clock import SystemClock
    from services.store.job_store import FirestoreJobStore

    future = int(os.environ.get("JOBS_BENCH_IDLE_FUTURE", DEFAULT_FUTURE))
    project = "bench-idle"
    from tests.benchmarks.bench_worker import _separate_process

    # The emulators in their own process (as the drill has them): seeding runs about twice as
    # fast as with them sharing this process's interpreter lock. `python -m emulators` runs
    # Firestore strict with the project's index set, as deployed: the exempted fields hold no
    # single-field entries, so a job document costs the emulator about 7 KB instead of 18.5 KB.
    with _separate_process() as emulators:
        client = firestore.Client(project=project)
        clock = SystemClock()
        rig.topic(project)
        store = FirestoreJobStore(client, clock)
        built = []

        def scanner(interval_s: float) -> Any:
            scan, publisher = rig.scanner(
                store, client, project, "jobs", clock, housekeeping_interval_s=interval_s
            )
            built.append((scan, publisher))
            return scan

        every, spaced = scanner(0), scanner(SPACED_S)
        try:
            _measure(emulators, project, every, "0 jobs, housekeeping every run")
            _measure(emulators, project, spaced, f"0 jobs, housekeeping every {SPACED_S:g} s")
            started = time.perf_counter()
            rig.seed_due(
                client,
                future,
                clock.now() + timedelta(days=30),
                spacing=timedelta(seconds=1),
            )
            held = client.collection("jobs").count().get()[0][0].value
            print(
                f"seeded {future:,} future jobs in {time.perf_counter() - started:.0f} s; "
                f"the store holds {held:,} job documents; emulator {_memory()}"
            )
            _warm_up(emulators, project, scanner(0))
            _measure(emulators, project, every, f"{future:,} future jobs, housekeeping every run")
            _measure(
                emulators,
                project,
                spaced,
                f"{future:,} future jobs, housekeeping every {SPACED_S:g} s (marked earlier)",
            )
            _measure(
                emulators,
                project,
                scanner(SPACED_S),
                f"{future:,} future jobs, a cold instance reading the mark",
            )
            print(f"after the runs: emulator {_memory()}")
        finally:
            for scan, publisher in built:
                scan.close()
                publisher.close()
            client.close()


def _measure(emulators: Any, project: str, scan: Any, label: str) -> None:
    figures = []
    for _ in range(RUNS):
        emulators.reset_stats(project)
        run = scan.run()
        stats = emulators.stats(project)
        assert run.claimed == 0, "an idle run claimed something"
        figures.append(
            f"{rig.billed_ops(stats)} ({stats['document_reads']} reads, "
            f"{stats['document_writes']} writes)"
        )
    print(f"idle run billed ops, {label}: " + "; ".join(figures))


def _warm_up(emulators: Any, project: str, scan: Any) -> None:
    """One housekeeping run before measuring, printed apart: the emulator builds each composite
    index a query walks on first use (about 1 s per 100,000 documents here, each), which at
    1,000,000 jobs can outlast the store's 10 s call timeout, and the retried query bills once
    more; production's indexes exist before any query."""
    emulators.reset_stats(project)
    started = time.perf_counter()
    scan.run()
    stats = emulators.stats(project)
    print(
        f"warm-up run (the emulator builds its composite indexes): "
        f"{rig.billed_ops(stats)} billed ops in {time.perf_counter() - started:.1f} s"
    )


def _memory() -> str:
    """RSS and peak RSS of the emulator process (this process's `python -m emulators` child)."""
    for status in Path("/proc").glob("[0-9]*/status"):
        try:
            fields = dict(
                line.split(":", 1) for line in status.read_text().splitlines() if ":" in line
            )
            cmdline = (status.parent / "cmdline").read_bytes().split(b"\0")
        except OSError:
            continue  # a process that ended meanwhile
        if int(fields["PPid"]) == os.getpid() and b"emulators" in cmdline:
            rss, peak = (int(fields[k].split()[0]) // 1024 for k in ("VmRSS", "VmHWM"))
            return f"RSS {rss:,} MB (peak {peak:,} MB)"
    return "RSS unknown (no emulator child process found)"
