"""End to end at PRODUCTION CADENCE: due -> claimed -> done, with the real worker doing its action.

The whole local system as `make run` starts it (tests/benchmarks/full_stack.py): the emulators
in their own process (strict Firestore with the index set of JOBS_BENCH_E2E_SHARDS shards), the
scan, the worker and the api as functions-framework processes behind the local Cloud Run front
end, the push subscription to the worker, and the strict local Cloud Scheduler at `* * * * *`
calling the scan's paced runs. The worker runs `media.delete_source` on the storage emulator (one
source object per job, fenced by its generation).

Two modes (JOBS_BENCH_E2E_MODE):
- `backlog` (default): N jobs due while the scan is paused; the operator resumes at the catch-up
  rate R, the drill the README's figures describe, now with the worker completing each job;
- `steady`: jobs come due at R/s for N / R seconds (starting a minute from now); the catch-up
  rate is set to 2 R so the cadence, not the rate, is measured.

Every latency is read back from the records (`due_at`, `claim.claimed_at`,
`result.completed_at`), never from a service's own account. Printed per whole minute since the
first scheduled run: jobs claimed and completed (per second), due->claimed, claimed->done and
due->done p50/p99 of the jobs completed in that minute, the push backlog (published minus
acknowledged, from the Pub/Sub emulator, sampled every 5 s: the minute's peak) and the busiest
second of writes on one `due_at` index range as the Firestore emulator counted it
(`write_rates`, a per-(collection, field, shard) peak: the counters are read and reset at each
minute's end, so a handful of writes between the read and the reset go uncounted). Then: jobs
lost (not completed, or completed without a claim), jobs acknowledged more than once (the
worker answers 204 only for a completion it made: more 204s than jobs is a repeat), billed
operations per completed job, and CPU seconds per completed job of each process (Linux /proc
utime + stime: the emulators' process, each service's front end, each service), with
/proc/loadavg beside it: other work on the machine slows the wall clock, far less the CPU.

Knobs: JOBS_BENCH_E2E_MODE, JOBS_BENCH_E2E_SIZE (N, 9,000), JOBS_BENCH_E2E_RATE (R, 50),
JOBS_BENCH_E2E_SHARDS (4). Run: `.venv/bin/python -m tests.benchmarks e2e`.
"""

from __future__ import annotations

import contextlib
import os
import threading
import time
from collections import Counter
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from typing import Any

import requests

from tests.benchmarks import rig
from tests.benchmarks.bench_cadence import _busiest
from tests.benchmarks.full_stack import full_stack

SAMPLE_S = 5.0


def main() -> None:
    mode = os.environ.get("JOBS_BENCH_E2E_MODE", "backlog")
    size = int(os.environ.get("JOBS_BENCH_E2E_SIZE", 9_000))
    rate = float(os.environ.get("JOBS_BENCH_E2E_RATE", 50))
    shards = int(os.environ.get("JOBS_BENCH_E2E_SHARDS", 4))
    if mode not in ("backlog", "steady"):
        raise SystemExit(f"JOBS_BENCH_E2E_MODE: {mode!r} is neither 'backlog' nor 'steady'")
    run(mode, size, rate, shards)


# -- CPU per process ----------------------------------------------------------------------


def cpu_by_role(pids: Mapping[str, int]) -> dict[str, float]:
    """CPU seconds so far of each started process: `emulators` (its whole tree), and for each
    service its front end (`<name> front end`, the process itself) and the service under it
    (`<name>`, every descendant). Processes that exited are not counted: take both readings
    while the stack runs."""
    table = rig.process_table()
    children: dict[int, list[int]] = {}
    for pid, fields in table.items():
        children.setdefault(int(fields[1]), []).append(pid)

    def tree(root: int) -> int:
        total, todo = 0, list(children.get(root, []))
        while todo:
            pid = todo.pop()
            total += rig.cpu_ticks(table[pid])
            todo += children.get(pid, [])
        return total

    hz = os.sysconf("SC_CLK_TCK")
    out = {}
    for name, pid in pids.items():
        own = rig.cpu_ticks(table[pid]) if pid in table else 0
        if name == "emulators":
            out[name] = (own + tree(pid)) / hz
        else:
            out[f"{name} front end"] = own / hz
            out[name] = tree(pid) / hz
    return out


# -- what the emulators count ---------------------------------------------------------------


@dataclass
class Minute:
    """What the emulators counted in one minute of the run."""

    backlog_peak: int = 0
    range_peak: int = 0  # busiest second of writes on one due_at index range
    range_writes: int = 0  # writes on due_at index ranges (summed over ranges)
    busiest_range: str = ""


@dataclass
class Watcher:
    """Samples the push backlog every SAMPLE_S and, at each minute's end (from `first`),
    reads and resets the Firestore emulator's per-range write peaks."""

    firestore_admin: str
    pubsub_admin: str
    project: str
    first: datetime
    minutes: dict[int, Minute] = field(default_factory=dict)
    billed: Counter[str] = field(default_factory=Counter)
    acknowledged: int = 0  # pushes the worker answered 204 (a completion it made)
    published: int = 0
    redelivered: int = 0
    _stop: threading.Event = field(default_factory=threading.Event)
    _thread: threading.Thread | None = None

    def start(self) -> Watcher:
        self._reset()
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()
        return self

    def _minute(self, at: datetime) -> int:
        return int((at - self.first).total_seconds() // 60)

    def _to_next_minute(self) -> float:
        elapsed = (datetime.now(UTC) - self.first).total_seconds()
        return 60 - elapsed % 60 + 0.01

    def _stats(self) -> dict[str, Any]:
        url = f"{self.firestore_admin}/stats"
        return dict(requests.get(url, params={"project": self.project}, timeout=30).json())

    def _reset(self) -> None:
        url = f"{self.firestore_admin}/stats"
        requests.delete(url, params={"project": self.project}, timeout=30).close()

    def _pubsub(self) -> dict[str, Any]:
        return dict(requests.get(f"{self.pubsub_admin}/stats", timeout=30).json())

    def _run(self) -> None:
        current = self._minute(datetime.now(UTC))
        # Woken at each minute's boundary too, so a minute's counters are its own.
        while not self._stop.wait(min(SAMPLE_S, self._to_next_minute())):
            now = datetime.now(UTC)
            stats = self._pubsub()
            minute = self.minutes.setdefault(self._minute(now), Minute())
            backlog = int(stats["published"]) - int(stats["acknowledged"])
            minute.backlog_peak = max(minute.backlog_peak, backlog)
            self.published, self.redelivered = int(stats["published"]), int(stats["redelivered"])
            self.acknowledged = sum(
                n for status, n in stats["push_attempts_by_status"].items() if status == "204"
            )
            if self._minute(now) != current:
                self._close_minute(current)
                current = self._minute(now)

    def _close_minute(self, number: int) -> None:
        stats = self._stats()
        self._reset()
        for key in ("document_reads", "document_writes", "document_deletes"):
            self.billed[key] += int(stats[key])
        minute = self.minutes.setdefault(number, Minute())
        ranges = [r for r in stats["write_rates"] if r["field"] == "due_at"]
        for row in ranges:
            minute.range_writes += int(row["writes"])
            if row["peak_writes_per_s"] > minute.range_peak:
                minute.range_peak = int(row["peak_writes_per_s"])
                minute.busiest_range = f"{row['collection']}.due_at shard {row['shard']}"

    def stop(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=60)
        self._close_minute(self._minute(datetime.now(UTC)))


# -- the run -------------------------------------------------------------------------------


@dataclass(frozen=True)
class Record:
    due_at: datetime
    claimed_at: datetime | None
    completed_at: datetime | None
    state: str
    shard: int


def _records(client: Any) -> dict[str, Record]:
    from services.jobs import schema

    found = {}
    query = client.collection(schema.JOBS).select(["due_at", "claim", "result", "state", "shard"])
    for snapshot in query.stream():
        data = snapshot.to_dict() or {}
        claim = data.get("claim") or {}
        result = data.get("result") or {}
        found[snapshot.id] = Record(
            data["due_at"],
            claim.get("claimed_at"),
            result.get("completed_at"),
            data["state"],
            int(data.get("shard") or 0),
        )
    return found


@contextlib.contextmanager
def _quiet_scheduler(stack: Any, attempts: list[Any]) -> Iterator[Any]:
    scheduler = stack.scheduler(attempts.append).start()
    try:
        yield scheduler
    finally:
        scheduler.stop()


def run(mode: str, size: int, rate: float, shards: int) -> None:
    from google.cloud import firestore

    from services.jobs.clock import SystemClock
    from services.store.job_store import FirestoreJobStore

    with full_stack(f"e2e-{shards}", shards=shards) as stack:
        project = stack.options.project
        client = firestore.Client(project=project)
        store = FirestoreJobStore(client, SystemClock(), shards=shards)
        bucket = stack.storage().create_bucket(stack.demo.bucket)
        started = time.monotonic()
        rig.upload_objects(bucket, size)
        if mode == "backlog":
            store.update_control("bench", "e2e: paused while the backlog falls due", paused=True)
            due, spacing, catch_up = datetime.now(UTC) - timedelta(minutes=5), timedelta(0), rate
        else:
            due, spacing = datetime.now(UTC) + timedelta(seconds=60), timedelta(seconds=1 / rate)
            catch_up = 2 * rate
        ids = rig.seed_due(client, size, due, bucket=bucket.name, spacing=spacing, shards=shards)
        print(
            f"[e2e {mode}] {size:,} jobs and source objects ready in "
            f"{time.monotonic() - started:.0f} s; load {rig.loadavg()}",
            flush=True,
        )
        store.update_control(
            "bench", "e2e: resume at the set rate", paused=False, catch_up_rate=catch_up
        )
        attempts: list[Any] = []
        with _quiet_scheduler(stack, attempts) as scheduler:
            first = scheduler.next_scheduled
            admin = dict(note.split(": ", 1) for note in stack.endpoints.notes if ": http" in note)
            watcher = Watcher(
                admin["firestore admin"],
                admin["pubsub admin"],
                project,
                first,
            ).start()
            cpu_before = cpu_by_role(stack.endpoints.pids)
            load_before = rig.loadavg()
            deadline = time.monotonic() + 120 + size / rate * 3 + (60 if mode == "steady" else 0)
            while watcher.acknowledged < size and time.monotonic() < deadline:
                time.sleep(10)
                print(
                    f"  {datetime.now(UTC):%H:%M:%S} completed {watcher.acknowledged:,} of "
                    f"{size:,}; attempts {len(attempts)}; load {rig.loadavg()}",
                    flush=True,
                )
            time.sleep(SAMPLE_S)  # a redelivery in flight would show as a repeat
            cpu_after = cpu_by_role(stack.endpoints.pids)
            load_after = rig.loadavg()
            watcher.stop()
        records = _records(client)
        client.close()
    cpu = {k: cpu_after[k] - cpu_before.get(k, 0.0) for k in cpu_after}
    report(mode, size, rate, catch_up, shards, first, records, ids, watcher, cpu, attempts)
    print(f"load average before {load_before}, after {load_after} (1, 5, 15 min)")


def _percentile(values: Sequence[float], q: float) -> float:
    if not values:
        return float("nan")
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(len(ordered) * q))]


def report(
    mode: str,
    size: int,
    rate: float,
    catch_up: float,
    shards: int,
    first: datetime,
    records: Mapping[str, Record],
    ids: Sequence[str],
    watcher: Watcher,
    cpu: Mapping[str, float],
    attempts: Sequence[Any],
) -> None:
    claimed_in: Counter[int] = Counter()
    done_in: dict[int, list[Record]] = {}
    # Claims per (second, shard), from the records: the scan's share of a range's second.
    claim_seconds: Counter[tuple[int, int]] = Counter()
    for r in records.values():
        if r.claimed_at is not None:
            claimed_in[int((r.claimed_at - first).total_seconds() // 60)] += 1
            claim_seconds[(int((r.claimed_at - first).total_seconds()), r.shard)] += 1
        if r.completed_at is not None:
            minute = int((r.completed_at - first).total_seconds() // 60)
            done_in.setdefault(minute, []).append(r)
    last = max([*claimed_in, *done_in, *watcher.minutes], default=-1)
    print(
        f"[PRODUCTION CADENCE, end to end: local Cloud Scheduler '* * * * *', paced runs, "
        f"{shards} shards, the worker deleting one object per job; {mode}, {size:,} jobs at "
        f"{rate:g}/s]"
    )
    print(
        "minute  claimed/s  done/s  due->claimed p50/p99  claimed->done p50/p99  "
        "due->done p50/p99  push backlog peak  busiest range-second (emulator)  "
        "range writes/job  busiest claim second on one shard (records)"
    )
    for m in range(0, last + 1):
        done = done_in.get(m, [])
        d2c = [(r.claimed_at - r.due_at).total_seconds() for r in done if r.claimed_at]
        c2d = [(r.completed_at - r.claimed_at).total_seconds() for r in done if r.claimed_at]  # type: ignore[operator]
        d2d = [(r.completed_at - r.due_at).total_seconds() for r in done]  # type: ignore[operator]
        w = watcher.minutes.get(m, Minute())
        print(
            f"{m:>6}  {claimed_in[m] / 60:>9.1f}  {len(done) / 60:>6.1f}  "
            f"{_percentile(d2c, 0.5):>8.1f}/{_percentile(d2c, 0.99):<8.1f}    "
            f"{_percentile(c2d, 0.5):>6.2f}/{_percentile(c2d, 0.99):<8.2f}      "
            f"{_percentile(d2d, 0.5):>6.1f}/{_percentile(d2d, 0.99):<8.1f} "
            f"{w.backlog_peak:>10,}        {w.range_peak:>4} writes ({w.busiest_range or '-'})"
            f"  {w.range_writes / max(len(done), 1):>5.2f}"
            f"  {max((n for (t, _), n in claim_seconds.items() if t // 60 == m), default=0):>5}"
        )
    completed = [records[i] for i in ids if i in records and records[i].completed_at is not None]
    lost = len(ids) - len(completed)
    unclaimed_done = sum(1 for r in completed if r.claimed_at is None)
    repeats = max(0, watcher.acknowledged - len(completed))
    claimed = sum(1 for i in ids if i in records and records[i].claimed_at is not None)
    c2d_all = [(r.completed_at - r.claimed_at).total_seconds() for r in completed if r.claimed_at]  # type: ignore[operator]
    d2d_all = [(r.completed_at - r.due_at).total_seconds() for r in completed]  # type: ignore[operator]
    billed = rig.billed_ops(dict(watcher.billed)) if watcher.billed else 0
    print(
        f"completed {len(completed):,} of {size:,}; lost {lost}; completed without a claim "
        f"{unclaimed_done}; completions acknowledged more than once {repeats}; published "
        f"{watcher.published:,} for {claimed:,} claimed (extra {watcher.published - claimed}), "
        f"redelivered {watcher.redelivered}; overall "
        f"claimed->done p50 {_percentile(c2d_all, 0.5):.2f} s p99 {_percentile(c2d_all, 0.99):.2f}"
        f" s, due->done p50 {_percentile(d2d_all, 0.5):.1f} s p99 {_percentile(d2d_all, 0.99):.1f}"
        f" s; runs that claimed {sum(1 for a in attempts if a.body.get('claimed'))}"
    )
    claim_times = sorted(
        (r.claimed_at - first).total_seconds() for r in records.values() if r.claimed_at
    )
    per_shard_second = max(claim_seconds.values(), default=0)
    range_writes = sum(w.range_writes for w in watcher.minutes.values())
    per_job = range_writes / max(len(completed), 1)
    busiest_range = max((w.range_peak for w in watcher.minutes.values()), default=0)
    print(
        f"claim bursts (records): busiest 10 s {_busiest(claim_times, 10.0):,} claims = "
        f"{_busiest(claim_times, 10.0) / (catch_up * 10):.2f} x the catch-up rate "
        f"{catch_up:g}/s; busiest second on one shard {per_shard_second} = "
        f"{per_shard_second / (catch_up / shards):.2f} x its share of it. "
        f"due_at index ranges (emulator): {per_job:.2f} writes per "
        f"completed job (schedule write and TTL delete not included), busiest second on one "
        f"range {busiest_range} against a mean of {rate * per_job / shards:.0f} "
        f"at the set rate"
    )
    whole = [m for m in range(1, last) if done_in.get(m)]
    if whole:
        worst = max(abs(len(done_in[m]) / 60 - rate) / rate for m in whole)
        print(
            f"whole minutes between the first and the last: done/s within {worst:.1%} of {rate:g}"
        )
    n = max(len(completed), 1)
    print(
        f"billed Firestore operations per completed job (from the first run, every writer): "
        f"{billed / n:.2f} ({dict(watcher.billed)})"
    )
    parts = ", ".join(f"{name} {seconds / n * 1000:.2f}" for name, seconds in sorted(cpu.items()))
    total = sum(cpu.values())
    print(f"CPU ms per completed job: {parts}; all {total / n * 1000:.2f}")
