"""Bulk scheduling: `jobsctl schedule --from` (batched) against one `schedule` call per job.

Prints wall time, jobs/s and billed operations for 2,000 new jobs from a JSON-lines file, for
the same file again (all already present), and for 2,000 single `FirestoreJobStore.schedule`
calls, against the built-in Firestore emulator in a process of its own (as under `make run`;
in this process it would share the interpreter lock with the client). A `jobsctl schedule`
process per job adds about a second of interpreter start-up each on top of the last figure.

Then the pacing (issue 35): JOBS_BENCH_SCHEDULE_PACED (12,000) new jobs from one file through
`jobsctl schedule --from` (paced: services/jobs/write_pacer.py) and, for comparison, the same
count through back-to-back `schedule_many` calls of 500 (unpaced, what `--from` did before), at
`JOBS_SHARDS` 1 and 4, each on an emulator serving that N's index set (strict, as a deployment
has it). Printed from the emulator's own counters (`write_rates`): the busiest second of writes
on each `due_at` index range, against Firestore's 500/s, and the writes per range in all.
Run: `.venv/bin/python -m tests.benchmarks schedule`.
"""

from __future__ import annotations

import contextlib
import io
import json
import os
import re
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import requests

from services.cli.app import main as jobsctl
from services.jobs.clock import SystemClock
from services.jobs.model import NewJob
from services.store.job_store import FirestoreJobStore

JOBS = 2000


def _lines(prefix: str, count: int = JOBS) -> str:
    return "".join(
        json.dumps(
            {
                "decision": f"{prefix}-{n}",
                "subject": f"media-{n}",
                "params": {"object": f"media-{n}/source.mp4"},
                "due": "+30d",
            }
        )
        + "\n"
        for n in range(count)
    )


class Admin:
    """The emulator process's admin endpoint: billed-operation counters per project."""

    def __init__(self, url: str) -> None:
        self.url = url

    def reset_stats(self, project: str) -> None:
        requests.delete(f"{self.url}/stats", params={"project": project}, timeout=10).close()

    def stats(self, project: str) -> dict[str, Any]:
        reply = requests.get(f"{self.url}/stats", params={"project": project}, timeout=10)
        return dict(reply.json())


@contextlib.contextmanager
def _emulator(indexes: str | None = None) -> Iterator[Admin]:
    command = [sys.executable, "-m", "emulators.firestore", "--host", "127.0.0.1", "--port", "0"]
    if indexes is not None:
        command += ["--indexes", indexes]
    process = subprocess.Popen(
        command, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True
    )
    try:
        assert process.stdout is not None
        match = re.search(r"listening on (\S+); admin on (\S+)", process.stdout.readline())
        assert match, "emulator did not start"
        os.environ["FIRESTORE_EMULATOR_HOST"] = match.group(1)
        yield Admin(match.group(2))
    finally:
        process.terminate()
        process.wait(timeout=30)


def _from_file(emulator: Admin, project: str, path: Path, label: str) -> None:
    emulator.reset_stats(project)
    out, err = io.StringIO(), io.StringIO()
    started = time.perf_counter()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        code = jobsctl(["schedule", "--from", str(path), "--json", "--project", project])
    elapsed = time.perf_counter() - started
    summary = json.loads(out.getvalue())
    stats = emulator.stats(project)
    print(
        f"{label:<34} {elapsed:6.2f} s  {JOBS / elapsed:8.0f} jobs/s  exit {code}  "
        f"created {summary['created']}, present {summary['already_present']}, "
        f"refused {len(summary['refused'])}  reads {stats['document_reads']}, "
        f"writes {stats['document_writes']}, commits {stats['calls'].get('Commit', 0)}"
    )


def _one_by_one(emulator: Admin, project: str) -> None:
    from google.cloud import firestore

    client = firestore.Client(project=project)
    store = FirestoreJobStore(client, SystemClock())
    due = datetime.now(UTC) + timedelta(days=30)
    emulator.reset_stats(project)
    started = time.perf_counter()
    for n in range(JOBS):
        store.schedule(
            NewJob(f"single-{n}", "media.delete_source", f"m-{n}", due, {"object": f"m-{n}/a"})
        )
    elapsed = time.perf_counter() - started
    stats = emulator.stats(project)
    print(
        f"{'store.schedule, one call per job':<34} {elapsed:6.2f} s  {JOBS / elapsed:8.0f} "
        f"jobs/s  reads {stats['document_reads']}, writes {stats['document_writes']}, "
        f"commits {stats['calls'].get('Commit', 0)}"
    )
    client.close()


def _due_at_ranges(stats: dict[str, Any]) -> str:
    rows = sorted(
        (r for r in stats["write_rates"] if r["collection"] == "jobs" and r["field"] == "due_at"),
        key=lambda r: str(r["shard"]),
    )
    return ", ".join(
        f"shard {r['shard']}: peak {r['peak_writes_per_s']}/s of {r['writes']:,}" for r in rows
    )


def _paced(count: int, shards: int) -> None:
    from emulators.launcher import PROJECT_INDEXES
    from services.jobs.model import NewJob

    indexes = PROJECT_INDEXES if shards == 1 else f"{PROJECT_INDEXES}?shards={shards}"
    with _emulator(indexes) as emulator, tempfile.TemporaryDirectory() as folder:
        project = f"bench-paced-{shards}"
        path = Path(folder) / "jobs.jsonl"
        path.write_text(_lines("paced", count))
        emulator.reset_stats(project)
        os.environ["JOBS_SHARDS"] = str(shards)
        out = io.StringIO()
        started = time.perf_counter()
        with contextlib.redirect_stdout(out), contextlib.redirect_stderr(io.StringIO()):
            code = jobsctl(["schedule", "--from", str(path), "--json", "--project", project])
        elapsed = time.perf_counter() - started
        created = json.loads(out.getvalue())["created"]
        print(
            f"[paced] shards {shards}: jobsctl schedule --from, {count:,} jobs in {elapsed:.1f} s "
            f"= {count / elapsed:.0f} jobs/s, exit {code}, created {created:,}; due_at ranges "
            f"(emulator): {_due_at_ranges(emulator.stats(project))}",
            flush=True,
        )
        from google.cloud import firestore

        client = firestore.Client(project=project)
        store = FirestoreJobStore(client, SystemClock(), shards=shards)
        due = datetime.now(UTC) + timedelta(days=30)
        emulator.reset_stats(project)
        started = time.perf_counter()
        for first in range(0, count, 500):
            store.schedule_many(
                [
                    NewJob(f"unpaced-{n}", "media.delete_source", f"m-{n}", due, {"object": "a"})
                    for n in range(first, min(first + 500, count))
                ]
            )
        elapsed = time.perf_counter() - started
        print(
            f"[unpaced] shards {shards}: schedule_many x 500 back to back, {count:,} jobs in "
            f"{elapsed:.1f} s = {count / elapsed:.0f} jobs/s; due_at ranges (emulator): "
            f"{_due_at_ranges(emulator.stats(project))}",
            flush=True,
        )
        client.close()
        del os.environ["JOBS_SHARDS"]


def main() -> None:
    paced = int(os.environ.get("JOBS_BENCH_SCHEDULE_PACED", 12_000))
    for shards in (1, 4):
        _paced(paced, shards)
    with _emulator() as emulator, tempfile.TemporaryDirectory() as folder:
        path = Path(folder) / "jobs.jsonl"
        path.write_text(_lines("bench"))
        project = "bench-schedule"
        _from_file(emulator, project, path, f"schedule --from ({JOBS:,} new)")
        _from_file(emulator, project, path, "schedule --from (same file again)")
        _one_by_one(emulator, "bench-schedule-single")
