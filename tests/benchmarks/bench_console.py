"""The console's cost and the bulk action's safety, measured (docs/console.md, "Measured").

1. Billed Firestore reads per page view (the emulator's counters) and the server time of the
   overview and of a 30-day hourly calendar, with N pending jobs (BENCH_CONSOLE_JOBS, default
   100,000) spread evenly over the 30 days, through the console's own app (Flask's test client,
   stand-in identity) on the built-in emulator in this process.
2. `jobsctl bulk cancel` over 10,000 jobs (BENCH_CONSOLE_BULK), in its own process: wall time
   and batches; then again over another 10,000, SIGKILLed midway, and every job checked: either
   cancelled with the operator in its last history entry, or deferred with no entry of the
   operator's (never one without the other).
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from datetime import UTC, datetime, timedelta
from typing import Any

from google.cloud import firestore

from services.console.app import create_app
from services.console.settings import ConsoleSettings
from services.jobs import schema
from services.jobs.bulk import JobFilter
from services.jobs.clock import SystemClock
from services.jobs.model import NewJob
from services.jobs.record import Job
from services.jobs.state import State
from services.store.job_store import FirestoreJobStore
from tests.benchmarks.rig import in_process

PROJECT = "bench-console"
OPERATOR = "bench-operator"
ACTION = "media.delete_source"


def seed(
    client: firestore.Client, prefix: str, count: int, start: datetime, span: timedelta
) -> float:
    """`count` deferred jobs, due evenly over `span` from `start`, written in batches of 500."""
    began = time.perf_counter()
    step = span / max(count, 1)
    collection = client.collection(schema.JOBS)
    now = datetime.now(UTC)
    for first in range(0, count, 500):
        batch = client.batch()
        for n in range(first, min(first + 500, count)):
            job_id = f"{prefix}-{n:07d}"
            new = NewJob(
                job_id,
                ACTION,
                f"{prefix}-{n}",
                start + n * step,
                {"bucket": "media-src", "object": f"{prefix}/{n}.mp4"},
            )
            batch.set(collection.document(job_id), Job.create(new.validated(), now).to_document())
        batch.commit()
    return time.perf_counter() - began


def page_cost(emulators: Any, test_client: Any, path: str, repeat: int = 3) -> tuple[int, float]:
    """Billed reads of one view of `path`, and its best server time of `repeat` views."""
    best = float("inf")
    reads = 0
    for _ in range(repeat):
        before = emulators.billed(PROJECT)["document_reads"]
        started = time.perf_counter()
        response = test_client.get(path)
        best = min(best, time.perf_counter() - started)
        assert response.status_code == 200, response.text[:500]
        reads = emulators.billed(PROJECT)["document_reads"] - before
    return reads, best


def jobsctl_bulk(start: datetime, count: int) -> subprocess.Popen[str]:
    """`jobsctl bulk cancel` of the deferred jobs due in the hour from `start` (a query-side
    filter: the pages read only matching documents)."""
    env = {
        **os.environ,
        "JOBS_PROJECT": PROJECT,
        "JOBS_OPERATOR": OPERATOR,
    }
    argv = [
        sys.executable,
        "-c",
        "import sys; from services.cli.app import main; sys.exit(main())",
        "bulk",
        "cancel",
        "--state",
        "deferred",
        "--due-from",
        start.isoformat(),
        "--due-before",
        (start + timedelta(hours=1)).isoformat(),
        "--reason",
        "bench",
        "--apply",
        "--confirm",
        str(count),
        "--json",
    ]
    return subprocess.Popen(
        argv, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
    )


def main() -> None:
    pending = int(os.environ.get("BENCH_CONSOLE_JOBS", "100000"))
    bulk = int(os.environ.get("BENCH_CONSOLE_BULK", "10000"))
    with in_process() as emulators:
        client = firestore.Client(project=PROJECT)
        now = datetime.now(UTC)
        seconds = seed(client, "p", pending, now + timedelta(hours=1), timedelta(days=30))
        print(f"  seeded {pending:,} pending jobs over 30 days in {seconds:.0f} s")
        settings = ConsoleSettings.from_env(
            {"JOBS_PROJECT": PROJECT, "JOBS_CONSOLE_STAND_IN_IDENTITY": "bench@example.com"}
        )
        app = create_app(settings, firestore_client=client)
        test_client = app.test_client()
        actions = 3
        # The calendars once each: on the built-in emulator a count at a read time runs the
        # whole query (its fast count path answers only the latest snapshot), so their server
        # time here grows with the collection; billed reads do not depend on that.
        for label, path, repeat in (
            ("overview", "/", 3),
            ("calendar 30 d daily", "/calendar?horizon=30d&step=day", 1),
            ("calendar 30 d hourly", "/calendar?horizon=30d&step=hour", 1),
        ):
            reads, best = page_cost(emulators, test_client, path, repeat)
            print(f"  {label}: {reads:,} billed reads per view, server time {best * 1000:.0f} ms")
        print(f"  ({actions} actions in the catalogue; the calendar counts each per window)")

        store = FirestoreJobStore(client, SystemClock())
        if bulk:
            first = (now + timedelta(days=40)).replace(microsecond=0)
            seed(client, "a", bulk, first, timedelta(minutes=59))
            proc = jobsctl_bulk(first, bulk)
            out, err = proc.communicate(timeout=3600)
            assert proc.returncode == 0, err[-2000:]
            result = json.loads(out)
            print(
                f"  bulk cancel of {bulk:,}: {result['changed']:,} changed in {result['batches']} "
                f"batches, {result['seconds']:.1f} s in the command "
                f"({result['changed'] / result['seconds']:.0f} jobs/s)"
            )
            second = first + timedelta(days=10)
            seed(client, "b", bulk, second, timedelta(minutes=59))
            proc = jobsctl_bulk(second, bulk)
            target = JobFilter(
                State.CANCELLED, due_from=second, due_before=second + timedelta(hours=1)
            )
            while True:
                time.sleep(0.5)
                done, _ = store.count_matching(target)
                if done >= bulk // 3 or proc.poll() is not None:
                    break
            proc.send_signal(signal.SIGKILL)
            proc.communicate()
            consistent = {"cancelled": 0, "untouched": 0}
            half = []
            for n in range(bulk):
                job = store.get(f"b-{n:07d}")
                assert job is not None
                mine = [h for h in job.history if OPERATOR in h.by]
                if job.state is State.CANCELLED and len(mine) == 1 and job.history[-1] == mine[0]:
                    consistent["cancelled"] += 1
                elif job.state is State.DEFERRED and not mine:
                    consistent["untouched"] += 1
                else:
                    half.append(job.job_id)
            print(
                f"  SIGKILL midway through a bulk cancel of {bulk:,}: {consistent['cancelled']:,} "
                f"cancelled naming {OPERATOR!r}, {consistent['untouched']:,} untouched, "
                f"{len(half)} half-written {half[:5]}"
            )


if __name__ == "__main__":
    main()
