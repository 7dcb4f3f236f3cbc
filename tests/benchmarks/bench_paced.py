"""The backlog drill at production cadence: paced runs once a minute.

N jobs are due while the scan is paused; the operator resumes at R jobs/s (JOBS_BENCH_PACED_RATE,
default 200). A LOCAL MINUTE LOOP (not Cloud Scheduler, and not the local Cloud Scheduler of
emulators/scheduler, which was not on main when this was written) fires a run at each wall-clock
minute, never two at once (a late run delays the next fire to the following minute), each run
carrying `X-CloudScheduler-*`-equivalent execution keys (job name + the minute). Runs are paced:
JOBS_SCAN_MODE=paced, time budget 50 s, interval 60 s, polling every 5 s. During the second
run a duplicate of its execution is fired (Cloud Scheduler's retry while the first attempt
runs): it must claim nothing.

Printed per drill: drain rate per whole minute against R (±5 %); the busiest 10-second window
against 1.5 x R x 10; jobs not enqueued; IDs received other than once; the busiest second of
writes per index range (each claim writes the job once and its enqueue mark once more: 2
writes per job in this drill; the worker's start, completion and the TTL delete come later and
are not part of it) against 500/s; peak RSS of this process (the scan; the emulators run in
their own process for shards 1); `jobsctl plan`'s paced drain time against the measured one
(±10 %). Then a SIMULATION (labelled as such) of due→claim latency with jobs coming due at
20/s: one-pass at `*/5` and paced (polling) at `* * * * *`, using the claim rate measured here.

Sizes: JOBS_BENCH_PACED_SIZE (default 36,000: 3 minutes at 200/s) at shards 1, and
JOBS_BENCH_PACED_SIZE4 (default 24,000) at shards 4 (emulators in this process, strict with the
shards=4 index set). 180,000 is extrapolated, not measured.
Run: `.venv/bin/python -m tests.benchmarks paced`.
"""

from __future__ import annotations

import json
import math
import os
import random
import resource
import subprocess
import sys
import threading
import time
from collections import Counter
from datetime import UTC, datetime, timedelta
from typing import Any

from tests.benchmarks import rig

TARGET = 180_000
INTERVAL_S = 60.0
TIME_BUDGET_S = 50.0
POLL_S = 5.0


def main() -> None:
    rate = float(os.environ.get("JOBS_BENCH_PACED_RATE", 200))
    size1 = int(os.environ.get("JOBS_BENCH_PACED_SIZE", 36_000))
    size4 = int(os.environ.get("JOBS_BENCH_PACED_SIZE4", 24_000))
    results = []
    for size, shards in ((size1, 1), (size4, 4)):
        if size <= 0:
            continue
        code = f"from tests.benchmarks.bench_paced import drill; drill({size}, {rate}, {shards})"
        out = subprocess.run(
            [sys.executable, "-c", code], capture_output=True, text=True, check=True
        ).stdout
        result = json.loads(out.strip().splitlines()[-1])
        results.append(result)
        _print(result, rate)
    if results:
        measured = results[0]["claim_rate_in_run"]
        print(
            f"extrapolated to {TARGET:,} at {rate:.0f}/s (not measured): "
            f"{math.ceil(TARGET / (rate * INTERVAL_S))} runs, {TARGET / rate / 60:.0f} min, "
            "if the per-minute rate above holds"
        )
        _latency_simulation(measured)


def _print(r: dict[str, Any], rate: float) -> None:
    minutes = ", ".join(f"{m:.1f}" for m in r["per_minute"])
    worst_minute = max((abs(m - rate) / rate for m in r["full_minutes"]), default=float("nan"))
    plan_off = (r["plan_s"] - r["drain_s"]) / r["drain_s"]
    print(
        f"[local minute loop, paced, shards {r['shards']}] {r['size']:,} jobs at {rate:.0f}/s: "
        f"drained in {r['drain_s']:.0f} s over {r['runs']} runs; per minute {minutes} jobs/s "
        f"(whole minutes within {worst_minute:.1%} of {rate:.0f}/s); busiest 10 s "
        f"{r['busiest_10s']:,} jobs = {r['busiest_10s'] / (rate * 10):.2f} x rate (limit 1.5); "
        f"not enqueued {r['not_enqueued']}; IDs received other than once {r['not_once']}; "
        f"busiest second per index range {r['busiest_range_writes']:,} writes (claim + mark) "
        f"vs 500/s; peak RSS {r['rss_mb']:.0f} MB{r['rss_note']}; plan {r['plan_s']} s vs "
        f"measured {r['drain_s']:.0f} s ({plan_off:+.1%}); duplicate during run 2: "
        f"{r['duplicate']}; seeded in {r['seed_s']:.0f} s",
        flush=True,
    )


def drill(size: int, rate: float, shards: int) -> None:
    """One drill in this process; prints one JSON line of figures last."""
    from google.cloud import firestore

    from emulators.launcher import PROJECT_INDEXES
    from services.cli.cadence import plan_modes
    from services.jobs.clock import SystemClock
    from services.jobs.scan_leases import ScanLeases
    from services.jobs.store import FirestoreJobStore
    from services.scan.trigger import Execution
    from tests.benchmarks.bench_worker import _separate_process

    separate = shards == 1
    context = (
        _separate_process()
        if separate
        else rig.in_process(firestore_indexes=f"{PROJECT_INDEXES}?shards={shards}")
    )
    with context:
        project = f"bench-paced-{shards}"
        client = firestore.Client(project=project)
        clock = SystemClock()
        topic = rig.topic(project)
        store = FirestoreJobStore(client, clock, shards=shards)
        store.update_control("drill", "backlog drill", paused=True)
        started = time.perf_counter()
        ids = rig.seed_due(client, size, clock.now() - timedelta(minutes=5), shards=shards)
        seed_s = time.perf_counter() - started
        claims: list[tuple[float, int, Counter[int]]] = []
        lock = threading.Lock()
        claim_due = store.claim_due

        def timed(now: Any, run_id: str, limit: int, **kwargs: Any) -> Any:
            got = claim_due(now, run_id, limit, **kwargs)
            with lock:
                claims.append((time.perf_counter(), len(got), _by_shard(got, shards)))
            return got

        store.claim_due = timed  # type: ignore[method-assign]
        limits = {
            "time_budget_s": TIME_BUDGET_S,
            "max_per_run": 100_000,
            "interval_s": INTERVAL_S,
            "page_size": 500,
            "mode": "paced",
            "poll_s": POLL_S,
            "end_when_idle": True,
            "lease_s": TIME_BUDGET_S + 30 + 30,
            "shards": shards,
        }
        scan, publisher = rig.scanner(store, client, project, "jobs", clock, **limits)
        scan._leases = ScanLeases(client)  # the deployed scan's lease (create_app builds it)
        assert scan.run().stopped_because == "paused"
        received: dict[str, int] = {}
        stop = threading.Event()
        puller = threading.Thread(target=_pull, args=(topic, received, stop), daemon=True)
        puller.start()
        store.update_control(
            "drill",
            "resume after the drill's pause",
            paused=False,
            catch_up_rate=rate,
            claim_budget=100_000,
        )
        runs = 0
        duplicate = "not fired"
        first_start: float | None = None
        last_end = 0.0
        while True:
            # The next wall-clock minute (a late run has already pushed us past one).
            now = datetime.now(UTC)
            fire = now.replace(second=0, microsecond=0) + timedelta(minutes=1)
            time.sleep(max(0.0, (fire - datetime.now(UTC)).total_seconds()))
            execution = Execution("bench-scan", fire)
            if first_start is None:
                first_start = time.perf_counter()
            holder: list[Any] = []
            retry: threading.Thread | None = None
            if runs == 1:
                # Cloud Scheduler's retry of this execution while it still runs.
                def again(execution: Execution = execution, holder: list[Any] = holder) -> None:
                    time.sleep(5)
                    holder.append(scan.run(execution=execution))

                retry = threading.Thread(target=again)
                retry.start()
            run = scan.run(execution=execution)
            runs += 1
            if retry is not None:
                retry.join(timeout=120)
                duplicate = f"{holder[0].stopped_because}, claimed {holder[0].claimed}"
            if run.published:
                last_end = time.perf_counter()
            if run.claimed == 0:
                break
        assert first_start is not None
        drain_s = last_end - first_start
        time.sleep(2)
        stop.set()
        puller.join(timeout=30)
        states = rig.states(client, ids)
        scan.close()
        publisher.close()
        topic.close()
        client.close()
    per_minute, full = _per_minute(claims, first_start, drain_s)
    busiest = _busiest(claims, 10.0)
    plan = plan_modes(size, rate, 100_000, INTERVAL_S, TIME_BUDGET_S, POLL_S, shards)[1]
    # The claim rate inside a run, as measured: the busiest 10 s over 10.
    in_run = busiest / 10.0
    figures = {
        "size": size,
        "shards": shards,
        "drain_s": drain_s,
        "runs": runs,
        "per_minute": per_minute,
        "full_minutes": full,
        "busiest_10s": busiest,
        "busiest_range_writes": _busiest_range(claims),
        "not_enqueued": size - states.get("enqueued", 0),
        "not_once": sum(1 for i in ids if received.get(i, 0) != 1),
        "rss_mb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024,
        "rss_note": "" if separate else " (emulators in this process too)",
        "plan_s": plan.drain_s,
        "seed_s": seed_s,
        "duplicate": duplicate,
        "claim_rate_in_run": in_run,
    }
    print(json.dumps(figures), flush=True)


def _by_shard(got: Any, shards: int) -> Counter[int]:
    """Claims per shard of a page: the shard is the job's own (services/jobs/shard.py)."""
    from services.jobs.shard import shard_of

    return Counter(shard_of(j.job_id, shards) for j in got)


def _per_minute(
    claims: list[tuple[float, int, Counter[int]]], start: float, drain_s: float
) -> tuple[list[float], list[float]]:
    buckets: Counter[int] = Counter()
    for at, n, _ in claims:
        buckets[int((at - start) // 60)] += n
    minutes = [buckets[m] / 60 for m in range(int(drain_s // 60) + 1)]
    # Whole minutes: all but the last (partial) one.
    return minutes, minutes[: int(drain_s // 60)]


def _busiest(claims: list[tuple[float, int, Counter[int]]], window_s: float) -> int:
    times = [(at, n) for at, n, _ in claims]
    return max((sum(n for t, n in times if a <= t < a + window_s) for a, _ in times), default=0)


def _busiest_range(claims: list[tuple[float, int, Counter[int]]]) -> int:
    """The most writes one shard's index range took in any one second: each claimed job is
    written by its claim and again by its enqueue mark (within the same second or the next;
    counted in the claim's second, the pessimistic side)."""
    per: Counter[tuple[int, int]] = Counter()
    for at, _, by_shard in claims:
        for shard, n in by_shard.items():
            per[(int(at), shard)] += 2 * n
    return max(per.values(), default=0)


def _pull(topic: Any, received: dict[str, int], stop: threading.Event) -> None:
    while not stop.is_set():
        counts = rig.drain_pull(topic.subscriber_client, topic.subscription)
        for job_id, n in counts.items():
            received[job_id] = received.get(job_id, 0) + n
        if not counts:
            time.sleep(0.2)


def _latency_simulation(claim_rate: float, arrivals_per_s: float = 20.0) -> None:
    """SIMULATION, not a run: jobs come due at a steady 20/s for 30 minutes; each mode claims
    them as the scan would, at the claim rate measured above (a one-pass run at its burst
    speed, a paced run at its pace, never faster than `claim_rate`). Prints p50/p99 of
    due->claim."""
    horizon = 1800.0
    due = [i / arrivals_per_s for i in range(int(horizon * arrivals_per_s))]
    random.Random(7).shuffle(due)
    due.sort()

    def one_pass(interval: float) -> list[float]:
        waits, i, t = [], 0, 0.0
        while t < horizon + interval:
            claim_at = t
            while i < len(due) and due[i] <= t:
                claim_at += 1.0 / claim_rate
                waits.append(claim_at - due[i])
                i += 1
            t += interval
        return waits

    def paced_polling(interval: float, length: float, poll: float) -> list[float]:
        waits, i = [], 0
        for start in range(0, int(horizon + interval), int(interval)):
            t = float(start)
            while t <= start + length:
                while i < len(due) and due[i] <= t:
                    waits.append(t - due[i])
                    i += 1
                t += poll
        return waits

    for label, waits in (
        ("one-pass at */5", one_pass(300.0)),
        ("paced (polling) at * * * * *", paced_polling(60.0, TIME_BUDGET_S, POLL_S)),
        ("paced (end when idle) at * * * * *", one_pass(60.0)),
    ):
        waits.sort()
        p50 = waits[len(waits) // 2]
        p99 = waits[int(len(waits) * 0.99)]
        print(
            f"[SIMULATION, 20 jobs/s due, claim rate {claim_rate:.0f}/s measured above] "
            f"{label}: due->claim p50 {p50:.1f} s, p99 {p99:.1f} s",
            flush=True,
        )
