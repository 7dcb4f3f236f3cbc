"""Bulk scheduling: `jobsctl schedule --from` (batched) against one `schedule` call per job.

Prints wall time, jobs/s and billed operations for 2,000 new jobs from a JSON-lines file, for
the same file again (all already present), and for 2,000 single `FirestoreJobStore.schedule`
calls, against the built-in Firestore emulator in a process of its own (as under `make run`;
in this process it would share the interpreter lock with the client). A `jobsctl schedule`
process per job adds about a second of interpreter start-up each on top of the last figure.
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


def _lines(prefix: str) -> str:
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
        for n in range(JOBS)
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
def _emulator() -> Iterator[Admin]:
    command = [sys.executable, "-m", "emulators.firestore", "--host", "127.0.0.1", "--port", "0"]
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


def main() -> None:
    with _emulator() as emulator, tempfile.TemporaryDirectory() as folder:
        path = Path(folder) / "jobs.jsonl"
        path.write_text(_lines("bench"))
        project = "bench-schedule"
        _from_file(emulator, project, path, f"schedule --from ({JOBS:,} new)")
        _from_file(emulator, project, path, "schedule --from (same file again)")
        _one_by_one(emulator, "bench-schedule-single")
