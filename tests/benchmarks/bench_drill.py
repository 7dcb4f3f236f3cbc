"""The backlog drill: a backlog becomes due while the scan is paused; the operator resumes it at
a catch-up rate; the drain must hold that rate, lose nothing and publish nothing twice, with
the scan's memory flat in the backlog size, and `jobsctl plan` must predict the drain time.

Each size runs in a process of its own (so its peak RSS is the scan's alone), with the
emulators in yet another (`python -m emulators`). In it: N due jobs are seeded while the
control document says paused; a paused run only measures; then `resume` with
`--catch-up-rate` R (JOBS_BENCH_DRILL_RATE, default 200/s) and runs start every I seconds
(JOBS_BENCH_DRILL_INTERVAL_S, default 5: a TEST SETTING, Cloud Scheduler cannot fire more than
once a minute; `python -m tests.benchmarks cadence` is the production-cadence drill), each with the
budget R x I, until one finds nothing due. A pull subscriber takes every message meanwhile
(the side effect: one per job ID). Printed per size: the drain rate against R (±5 %), jobs
not enqueued, job IDs received other than exactly once, peak RSS of the scan's process, and
`plan_drain(N, R, reserve 0)` (what `jobsctl plan --due N --rate R --reserve 0` prints)
against the measured drain time (±15 %).

Sizes: JOBS_BENCH_DRILL_SIZES (default "20000,60000"). 180,000 at 200/s is 15 minutes of
draining alone plus about 3 minutes of seeding per size on a 2-core machine, so the default
stops at 60,000 and the figure for 180,000 is extrapolated (printed as such) from the two
measured sizes. Run: `.venv/bin/python -m tests.benchmarks drill`.
"""

from __future__ import annotations

import json
import os
import resource
import subprocess
import sys
import threading
import time
from datetime import timedelta
from typing import Any

from tests.benchmarks import rig

DEFAULT_SIZES = "20000,60000"
TARGET = 180_000


def main() -> None:
    sizes = [int(s) for s in os.environ.get("JOBS_BENCH_DRILL_SIZES", DEFAULT_SIZES).split(",")]
    rate = float(os.environ.get("JOBS_BENCH_DRILL_RATE", 200))
    interval = float(os.environ.get("JOBS_BENCH_DRILL_INTERVAL_S", 5))
    results = []
    for size in sizes:
        code = f"from tests.benchmarks.bench_drill import drill; drill({size}, {rate}, {interval})"
        out = subprocess.run(
            [sys.executable, "-c", code], capture_output=True, text=True, check=True
        ).stdout
        result = json.loads(out.strip().splitlines()[-1])
        results.append(result)
        _print(result, rate)
    if len(results) >= 2 and max(sizes) < TARGET:
        a, b = results[0], results[-1]
        slope = (b["rss_mb"] - a["rss_mb"]) / (b["size"] - a["size"])
        rss = b["rss_mb"] + slope * (TARGET - b["size"])
        print(
            f"extrapolated to {TARGET:,} (not measured): drain {TARGET / rate:,.0f} s at "
            f"{rate:.0f}/s if the measured rate holds; peak RSS {rss:.0f} MB "
            f"({slope * 1e4:+.1f} MB per 10,000 jobs between the measured sizes)"
        )


def _print(r: dict[str, Any], rate: float) -> None:
    off = (r["rate"] - rate) / rate
    plan_off = (r["plan_s"] - r["drain_s"]) / r["drain_s"]
    print(
        f"{r['size']:,} jobs: drained in {r['drain_s']:.1f} s over {r['runs']} runs = "
        f"{r['rate']:.1f}/s against {rate:.0f}/s ({off:+.1%}); not enqueued {r['not_enqueued']}; "
        f"IDs received other than once {r['not_once']}; peak RSS {r['rss_mb']:.0f} MB; "
        f"plan {r['plan_s']:.0f} s vs measured {r['drain_s']:.1f} s ({plan_off:+.1%}); "
        f"seeded in {r['seed_s']:.0f} s"
    )


def drill(size: int, rate: float, interval: float) -> None:
    """One size, in this process; prints one JSON line of figures last."""
    from google.cloud import firestore

    from services.jobs.clock import SystemClock
    from services.jobs.plan import plan_drain
    from services.store.job_store import FirestoreJobStore
    from tests.benchmarks.bench_worker import _separate_process

    with _separate_process():
        project = "bench-drill"
        client = firestore.Client(project=project)
        clock = SystemClock()
        topic = rig.topic(project)
        store = FirestoreJobStore(client, clock)
        store.update_control("drill", "backlog drill", paused=True)
        started = time.perf_counter()
        ids = rig.seed_due(client, size, clock.now() - timedelta(minutes=5))
        seed_s = time.perf_counter() - started
        limits = {"time_budget_s": interval, "max_per_run": 100_000, "interval_s": interval}
        scan, publisher = rig.scanner(store, client, project, "jobs", clock, **limits)
        assert scan.run().stopped_because == "paused"
        received: dict[str, int] = {}
        stop = threading.Event()
        puller = threading.Thread(target=_pull, args=(topic, received, stop), daemon=True)
        puller.start()
        store.update_control(
            "drill", "resume after the drill's pause", paused=False, catch_up_rate=rate
        )
        drain_started = time.perf_counter()
        runs = 0
        last_end = drain_started
        while True:
            due_at = drain_started + runs * interval
            time.sleep(max(0.0, due_at - time.perf_counter()))
            run = scan.run()
            runs += 1
            if run.published:
                last_end = time.perf_counter()
            if run.claimed == 0:
                break
        drain_s = last_end - drain_started
        time.sleep(2)
        stop.set()
        puller.join(timeout=30)
        states = rig.states(client, ids)
        scan.close()
        publisher.close()
        topic.close()
        client.close()
    plan = plan_drain(size, rate, 0.0, max_per_run=100_000, interval_s=interval)
    figures = {
        "size": size,
        "drain_s": drain_s,
        "runs": runs,
        "rate": size / drain_s,
        "not_enqueued": size - states.get("enqueued", 0),
        "not_once": sum(1 for i in ids if received.get(i, 0) != 1),
        "rss_mb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024,
        "plan_s": plan.seconds,
        "seed_s": seed_s,
    }
    print(json.dumps(figures), flush=True)


def _pull(topic: Any, received: dict[str, int], stop: threading.Event) -> None:
    while not stop.is_set():
        counts = rig.drain_pull(topic.subscriber_client, topic.subscription)
        for job_id, n in counts.items():
            received[job_id] = received.get(job_id, 0) + n
        if not counts:
            time.sleep(0.2)
