"""Issue 22's drills at PRODUCTION CADENCE, through the local Cloud Scheduler.

Every drill here runs what production runs, with production's timing:
- the emulators in their own process (`python -m emulators`: strict Firestore with the index set
  of the drill's shard count, Pub/Sub, the OIDC issuer);
- the scan as deployed: functions-framework behind the local Cloud Run front end, with the
  environment a default stack gives it (services/local's `scan_deployment`: paced, 50 s runs,
  12,000 per run, polling every 5 s, ending when idle);
- the local Cloud Scheduler (emulators/scheduler) calling it with OIDC tokens on a unix-cron
  schedule: `* * * * *` (or `*/5 * * * *` for the one-pass comparison), never two executions
  at once. No test cadence anywhere.
The scan's messages go to a pull subscription this process drains (no worker: these drills
measure the scan). Every figure is read back from the records (`claim.claimed_at`, `due_at`,
`shard`, `state`) and from the messages, not from the scan's own account.

`drill` (the seed's case): N jobs due while the scan is paused; the operator resumes and sets
only the catch-up rate R (the control document sets no per-run budget: the stack's 12,000 is
the cap). Prints: drain rate per whole minute against R (±5 %); the busiest 10 s against
1.5 x R x 10; jobs not enqueued; IDs received other than once; the busiest second of writes on
one index range (each claim writes a job once and its enqueue mark once more, both counted in
the claim's second: the pessimistic side) against Firestore's 500/s; the scan process's peak
RSS (VmHWM); `jobsctl plan`'s paced drain time against the measured one (±10 %); and what a
retry of run 2's execution (Cloud Scheduler's retry while the first attempt runs, sent 10 s
into it with the same headers) was answered, with the claim rate in the 10 s after it.

`latency`: jobs come due at a steady 20/s for JOBS_BENCH_CADENCE_LATENCY_MIN minutes; due->claim
p50/p99 for one-pass runs at `*/5 * * * *`, paced runs ending when idle at `* * * * *` (the
stacks' default) and paced runs polling their whole 50 s (one stack each, all at once), the
catch-up rate set to 100/s so the cadence, not the rate, is measured.

Knobs: JOBS_BENCH_CADENCE (which: "drill,latency"), JOBS_BENCH_CADENCE_SIZE (180,000),
JOBS_BENCH_CADENCE_RATE (200), JOBS_BENCH_CADENCE_SHARDS (shard counts for the drill, "1"),
JOBS_BENCH_CADENCE_LATENCY_MIN (15).
Run: `.venv/bin/python -m tests.benchmarks cadence`.
"""

from __future__ import annotations

import dataclasses
import io
import os
import subprocess
import sys
import tempfile
import threading
import time
from collections import Counter
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

from tests.benchmarks import rig

RATE_FOR_LATENCY = 100.0
# (mode, schedule): one-pass at */5 (the old default), paced ending when idle at every minute
# (the stacks' default), and paced polling its whole run (JOBS_SCAN_END_WHEN_IDLE=false).
LATENCY_MODES = (
    ("one-pass", "*/5 * * * *"),
    ("paced", "* * * * *"),
    ("paced-polling", "* * * * *"),
)
ARRIVALS_PER_S = 20.0


def main() -> None:
    which = os.environ.get("JOBS_BENCH_CADENCE", "drill,latency").split(",")
    if "drill" in which:
        size = int(os.environ.get("JOBS_BENCH_CADENCE_SIZE", 180_000))
        rate = float(os.environ.get("JOBS_BENCH_CADENCE_RATE", 200))
        for shards in os.environ.get("JOBS_BENCH_CADENCE_SHARDS", "1").split(","):
            drill(size, rate, int(shards))
    if "latency" in which:
        minutes = float(os.environ.get("JOBS_BENCH_CADENCE_LATENCY_MIN", 15))
        # The modes at once, each its own stack in its own process: at 20 jobs/s each they
        # share the machine without starving one another, and the wall time is one run's.
        runs = [
            subprocess.Popen(
                [
                    sys.executable,
                    "-c",
                    f"from tests.benchmarks.bench_cadence import latency; "
                    f"latency({mode!r}, {schedule!r}, {minutes})",
                ]
            )
            for mode, schedule in LATENCY_MODES
        ]
        for run in runs:
            run.wait()


# -- the stack ----------------------------------------------------------------------------


def _stack_class() -> Any:
    """ScanStack, built on services/local's LocalSystem (imported late: no work at import)."""
    from google.cloud import pubsub_v1

    from emulators.launcher import free_port
    from services.local.system import HOST, LocalSystem

    class ScanStack(LocalSystem):
        """The emulators, the scan behind its front end and a pull subscription on its topic;
        the local Cloud Scheduler on `schedule`."""

        def __init__(self, options: Any, schedule: str, run_env: Mapping[str, str]) -> None:
            super().__init__(options, io.StringIO())  # its progress lines: not shown
            self.schedule = schedule
            self.run_env = dict(run_env)

        def start(self) -> None:
            self.options.log_dir.mkdir(parents=True, exist_ok=True)
            self._start_emulators()
            port = free_port(HOST)
            self.endpoints.scan_url = f"http://{HOST}:{port}"
            env = {**self.scan_deployment(self.common_environment()), **self.run_env}
            self.wait_listening([self._start_function("scan", port, env)])
            project = self.options.project
            self.publisher = pubsub_v1.PublisherClient()
            self.subscriber = pubsub_v1.SubscriberClient()
            topic = self.publisher.create_topic(
                name=f"projects/{project}/topics/{self.topology.names.topic}"
            ).name
            self.subscription = f"projects/{project}/subscriptions/drill"
            self.subscriber.create_subscription(
                request={"name": self.subscription, "topic": topic, "ack_deadline_seconds": 60}
            )

        def scheduler_job(self) -> Any:
            return dataclasses.replace(super().scheduler_job(), schedule=self.schedule)

        def scheduler(self, on_attempt: Any) -> Any:
            return self._scheduler(on_attempt)

        def scan_rss_mb(self) -> float:
            """Peak RSS (VmHWM) of the scan's functions-framework process, below its front end."""
            return max(
                (_hwm_mb(pid) for pid in _descendants(self.endpoints.pids["scan"])), default=0
            )

        def stop(self) -> None:
            for client in (getattr(self, "subscriber", None),):
                if client is not None:
                    client.close()
            if getattr(self, "publisher", None) is not None:
                self.publisher.stop()
            super().stop()

    return ScanStack


@contextmanager
def _stack(
    name: str, shards: int, schedule: str, run_env: Mapping[str, str] | None = None
) -> Iterator[Any]:
    from services.local.system import Options, Ports

    with tempfile.TemporaryDirectory(prefix=f"cadence-{name}-") as folder:
        options = Options(
            ports=Ports.all_free(),
            project=f"bench-cadence-{name}",
            demo=False,
            fresh=True,
            shards=shards,
            log_dir=Path(folder),
        )
        stack = _stack_class()(options, schedule, run_env or {})
        try:
            stack.start()
            yield stack
        finally:
            stack.stop()


def _descendants(pid: int) -> list[int]:
    children: dict[int, list[int]] = {}
    for child, fields in rig.process_table().items():
        children.setdefault(int(fields[1]), []).append(child)
    found, todo = [], [pid]
    while todo:
        current = todo.pop()
        found.append(current)
        todo += children.get(current, [])
    return found


def _hwm_mb(pid: int) -> float:
    try:
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            if line.startswith("VmHWM:"):
                return int(line.split()[1]) / 1024
    except OSError:
        pass
    return 0.0


# -- what the records say -----------------------------------------------------------------


@dataclasses.dataclass(frozen=True)
class Claimed:
    due_at: datetime
    claimed_at: datetime | None
    shard: int
    state: str


def _records(client: Any) -> dict[str, Claimed]:
    from services.jobs import schema

    found = {}
    query = client.collection(schema.JOBS).select(["due_at", "claim", "shard", "state"])
    for snapshot in query.stream():
        data = snapshot.to_dict() or {}
        claim = data.get("claim") or {}
        found[snapshot.id] = Claimed(
            data["due_at"], claim.get("claimed_at"), int(data.get("shard") or 0), data["state"]
        )
    return found


class Messages:
    """Drains the drill's subscription in the background: messages per job ID."""

    def __init__(self, stack: Any) -> None:
        self.received: Counter[str] = Counter()
        self._stack = stack
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()

    def _run(self) -> None:
        while not self._stop.is_set():
            counts = rig.drain_pull(self._stack.subscriber, self._stack.subscription)
            self.received.update(counts)
            if not counts:
                time.sleep(0.5)

    def close(self) -> None:
        time.sleep(2)
        self._stop.set()
        self._thread.join(timeout=60)
        self.received.update(rig.drain_pull(self._stack.subscriber, self._stack.subscription))


# -- the drill ----------------------------------------------------------------------------


def drill(size: int, rate: float, shards: int) -> None:
    from google.cloud import firestore

    from services.cli.mode_costs import plan_modes
    from services.jobs.clock import SystemClock
    from services.scan import cadence
    from services.store.job_store import FirestoreJobStore

    with _stack(f"drill-{shards}", shards, "* * * * *") as stack:
        client = firestore.Client(project=stack.options.project)
        store = FirestoreJobStore(client, SystemClock(), shards=shards)
        store.update_control("drill", "backlog drill: paused while the jobs fall due", paused=True)
        started = time.monotonic()
        ids = rig.seed_due(client, size, datetime.now(UTC) - timedelta(minutes=5), shards=shards)
        seed_s = time.monotonic() - started
        print(f"[drill, shards {shards}] seeded {size:,} due jobs in {seed_s:.0f} s", flush=True)
        # The operator resumes and sets only the rate.
        store.update_control(
            "drill", "resume after the drill's pause", paused=False, catch_up_rate=rate
        )
        messages = Messages(stack)
        attempts: list[Any] = []
        scheduler = stack.scheduler(attempts.append).start()
        first = scheduler.next_scheduled
        retry_answer = _retry_during_second_run(scheduler, first)
        deadline = time.monotonic() + size / rate + 600
        while sum(messages.received.values()) < size and time.monotonic() < deadline:
            time.sleep(5)
            print(
                f"  {datetime.now(UTC):%H:%M:%S} received {sum(messages.received.values()):,} "
                f"of {size:,}; attempts {len(attempts)}",
                flush=True,
            )
        # One more run to show nothing is left (it claims 0).
        count = len(attempts)
        while len(attempts) == count and time.monotonic() < deadline + 120:
            time.sleep(2)
        scheduler.stop()
        rss = stack.scan_rss_mb()
        messages.close()
        records = _records(client)
        client.close()
    plan = plan_modes(
        size,
        rate,
        cadence.DEFAULT_RUN_MAX_PER_RUN,
        60.0,
        float(cadence.DEFAULT_RUN_TIME_BUDGET_S),
        float(cadence.DEFAULT_RUN_POLL_S),
        shards,
    )[1]
    _report_drill(
        size, rate, shards, first, records, ids, messages, attempts, rss, plan, retry_answer
    )


def _retry_during_second_run(scheduler: Any, first: datetime) -> dict[str, Any]:
    """Sends run 2's retry 10 s into it (from a thread; returns a dict filled in later)."""
    holder: dict[str, Any] = {}
    second = first + timedelta(minutes=1)

    def send() -> None:
        time.sleep(max(0.0, (second + timedelta(seconds=10) - datetime.now(UTC)).total_seconds()))
        holder["sent_at"] = datetime.now(UTC)
        call = scheduler.send_retry_of(second)
        while call.answer is None:
            time.sleep(0.1)
        holder["status"] = call.answer.status
        holder["body"] = call.answer.json_body() if call.answer.status == 200 else {}

    threading.Thread(target=send, daemon=True).start()
    return holder


def _report_drill(
    size: int,
    rate: float,
    shards: int,
    first: datetime,
    records: Mapping[str, Claimed],
    ids: list[str],
    messages: Messages,
    attempts: list[Any],
    rss: float,
    plan: Any,
    retry: Mapping[str, Any],
) -> None:
    claims = sorted((r.claimed_at, r.shard) for r in records.values() if r.claimed_at is not None)
    times = [(at - first).total_seconds() for at, _ in claims]
    drain_s = times[-1] - times[0] if times else 0.0
    minutes = Counter(int(t // 60) for t in times)
    per_minute = [minutes[m] / 60 for m in range(max(minutes) + 1)] if minutes else []
    whole = per_minute[:-1]  # the last minute is partial
    worst = max((abs(m - rate) / rate for m in whole), default=float("nan"))
    busiest_10s = _busiest(times, 10.0)
    per_range = Counter((int(t), shard) for t, (_, shard) in zip(times, claims, strict=True))
    busiest_range = 2 * max(per_range.values(), default=0)
    not_enqueued = sum(1 for i in ids if records[i].state != "enqueued")
    not_once = sum(1 for i in ids if messages.received.get(i, 0) != 1)
    extra = sum(1 for i in messages.received if i not in records)
    runs = [a for a in attempts if a.succeeded and a.body.get("claimed")]
    sent = retry.get("sent_at")
    after_retry = (
        sum(1 for at, _ in claims if sent <= at < sent + timedelta(seconds=10)) / 10
        if sent
        else float("nan")
    )
    plan_off = (plan.drain_s - drain_s) / drain_s if drain_s else float("nan")
    print(
        f"[PRODUCTION CADENCE: local Cloud Scheduler '* * * * *', paced stack defaults, "
        f"shards {shards}] {size:,} jobs resumed at {rate:.0f}/s: first claim to last "
        f"{drain_s:.0f} s over {len(runs)} runs that claimed; per minute "
        f"{', '.join(f'{m:.1f}' for m in per_minute)} jobs/s (whole minutes within "
        f"{worst:.1%} of {rate:.0f}/s, limit 5 %); busiest 10 s {busiest_10s:,} jobs = "
        f"{busiest_10s / (rate * 10):.2f} x rate (limit 1.5); not enqueued {not_enqueued}; "
        f"IDs received other than once {not_once} (unknown IDs {extra}); busiest second on one "
        f"index range {busiest_range:,} writes (claim + mark) vs 500/s; scan peak RSS "
        f"{rss:.0f} MB; plan {plan.drain_s:.0f} s vs measured {drain_s:.0f} s ({plan_off:+.1%},"
        f" limit 10 %); run 2's retry 10 s in: HTTP {retry.get('status')} "
        f"{retry.get('body', {}).get('note') or retry.get('body', {}).get('stopped_because')}, "
        f"claimed {retry.get('body', {}).get('claimed')}, claims in the 10 s after it "
        f"{after_retry:.1f}/s",
        flush=True,
    )
    for attempt in attempts:
        b = attempt.body
        print(
            f"  attempt {attempt.number} {attempt.schedule_time:%H:%M} -> {attempt.status} "
            f"claimed {b.get('claimed')} published {b.get('published')} "
            f"{b.get('stopped_because')} {b.get('note') or ''} {b.get('duration_s')} s",
            flush=True,
        )


def _busiest(times: list[float], window_s: float) -> int:
    best, start = 0, 0
    for end in range(len(times)):
        while times[end] - times[start] >= window_s:
            start += 1
        best = max(best, end - start + 1)
    return best


# -- latency ------------------------------------------------------------------------------


def latency(mode: str, schedule: str, minutes: float) -> None:
    from google.cloud import firestore

    from services.edge import scan_deployment
    from services.jobs.clock import SystemClock
    from services.scan import settings as scan_keys
    from services.store.job_store import FirestoreJobStore

    run_env = {}
    if mode == "one-pass":
        # A one-pass stack at */5: the interval its budget is computed over is 5 minutes.
        run_env = {scan_keys.SCAN_MODE: "one-pass", scan_deployment.SCAN_INTERVAL_S: "300"}
    elif mode == "paced-polling":
        run_env = {scan_keys.SCAN_END_WHEN_IDLE: "false"}
    with _stack(f"latency-{mode}", 1, schedule, run_env) as stack:
        client = firestore.Client(project=stack.options.project)
        store = FirestoreJobStore(client, SystemClock(), shards=1)
        store.update_control("drill", "latency drill", catch_up_rate=RATE_FOR_LATENCY)
        count = int(minutes * 60 * ARRIVALS_PER_S)
        start = datetime.now(UTC) + timedelta(seconds=60)
        rig.seed_due(client, count, start, spacing=timedelta(seconds=1 / ARRIVALS_PER_S), shards=1)
        messages = Messages(stack)
        attempts: list[Any] = []
        scheduler = stack.scheduler(attempts.append).start()
        last_due = start + timedelta(minutes=minutes)
        wait_until = last_due + timedelta(minutes=6 if mode == "one-pass" else 2)
        while datetime.now(UTC) < wait_until and sum(messages.received.values()) < count:
            time.sleep(10)
            print(
                f"  {datetime.now(UTC):%H:%M:%S} {mode}: received "
                f"{sum(messages.received.values()):,} of {count:,}",
                flush=True,
            )
        scheduler.stop()
        messages.close()
        records = _records(client)
        client.close()
    waits = sorted(
        (r.claimed_at - r.due_at).total_seconds()
        for r in records.values()
        if r.claimed_at is not None
    )
    unclaimed = len(records) - len(waits)
    p50 = waits[len(waits) // 2] if waits else float("nan")
    p99 = waits[int(len(waits) * 0.99)] if waits else float("nan")
    print(
        f"[PRODUCTION CADENCE: local Cloud Scheduler '{schedule}', {mode}] {count:,} jobs due "
        f"at {ARRIVALS_PER_S:.0f}/s over {minutes:g} min, catch-up rate {RATE_FOR_LATENCY:.0f}/s: "
        f"due->claim p50 {p50:.1f} s, p99 {p99:.1f} s, max {waits[-1] if waits else 0:.1f} s; "
        f"never claimed {unclaimed}; IDs received other than once "
        f"{sum(1 for i in records if messages.received.get(i, 0) != 1)}",
        flush=True,
    )
