"""Billed Firestore operations per completed job, through the real Scanner, real push and the
real worker, from the emulator's billing counters; the per-run overhead reported separately.

Passes over N due jobs (JOBS_BENCH_COST_JOBS, default 1,000), each with a source object the
worker deletes:

- sequential: scan runs until nothing is due with the subscription still a pull one, then it
  is turned into push and the worker completes every job. Each run's own steps (control read,
  reclaimer, backlog measurement, scan_runs record) are metered one by one, so per job =
  (scan total - those) / N + worker total / N, exactly.
- live: push from the start, as in production (the worker may start a job before the scan
  marked it enqueued); the per-run steps are taken from the sequential pass.
- explicit keys: N/2 jobs each with its own explicit idempotency key, then N/2 more jobs that
  share those keys (the first wave's results are reused; no side effect twice).

- http.request: the sequential pass again, each job an `http.request` to a local target that
  answers 204 (the worker's call, its token and the target cost no Firestore operation; the
  figure is the record's own life). `JOBS_BENCH_COST_ONLY=http.request` runs this pass alone.
- plug-in: the sequential pass again, each job the test plug-in's `trials.expire`
  (tests/fixtures/plugin.py, installed beside the project as pip leaves a distribution, put on
  this process's sys.path; its action records the call in memory and touches no Firestore), the
  scan claiming it in its own lane at the plug-in's `Budget(per_second=5)` as a deployed scan
  does (5/s x 60 s = 300 a run). `JOBS_BENCH_COST_ONLY=trials.expire` runs this pass alone.

Run: `.venv/bin/python -m tests.benchmarks cost`. Everything is in this process on 127.0.0.1.
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable
from dataclasses import dataclass
from datetime import timedelta
from typing import Any

from tests.benchmarks import rig

DEFAULT_JOBS = 1_000
LIMITS: dict[str, Any] = {
    "time_budget_s": 600,
    "max_per_run": 500,
    "page_size": 250,
    "interval_s": 60,
    "claim_timeout_s": 900,
}


@dataclass
class Cost:
    """One cycle's billed operations."""

    jobs: int
    completed: int
    runs: int
    per_job: float
    fixed_per_run: list[int]


def main() -> None:
    jobs = int(os.environ.get("JOBS_BENCH_COST_JOBS", DEFAULT_JOBS))
    only = os.environ.get("JOBS_BENCH_COST_ONLY")
    if only == "http.request":
        with rig.in_process() as emulators, _HttpTarget() as target:
            _http_request_pass(emulators, target, jobs)
        return
    if only == PLUGIN_ACTION:
        with rig.in_process() as emulators:
            _plugin_pass(emulators, jobs)
        return
    with rig.in_process() as emulators:
        with _HttpTarget() as target:
            _http_request_pass(emulators, target, jobs)
        _plugin_pass(emulators, jobs)
        with _World(emulators, "bench-cost-seq", live=False) as world:
            base = world.cycle("sequential", jobs)
        with _World(emulators, "bench-cost-live", live=True) as world:
            world.cycle("live", jobs, fixed_from=base.fixed_per_run)
        with _World(emulators, "bench-cost-keys", live=False) as world:
            half = jobs // 2
            world.cycle("explicit keys, each its own", half, prefix="a", key=_key)
            world.cycle("explicit keys shared with the wave before", half, prefix="b", key=_key)


def _key(n: int) -> str:
    return f"shared-{n}"


class _HttpTarget:
    """A local target answering 204 to every call, counting them."""

    def __enter__(self) -> _HttpTarget:
        import threading
        from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

        target = self
        self.calls = 0

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                self.rfile.read(int(self.headers.get("Content-Length") or 0))
                target.calls += 1
                self.send_response(204)
                self.end_headers()

            def log_message(self, format: str, *args: Any) -> None:
                return None

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}"
        threading.Thread(target=self.server.serve_forever, daemon=True).start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.server.shutdown()
        self.server.server_close()


class _StaticTokens:
    """An ID token source (the token costs no Firestore operation; the target ignores it)."""

    def token(self, audience: str) -> str:
        return "bench-token"


def _http_request_pass(emulators: rig.Emulators, target: _HttpTarget, jobs: int) -> Cost:
    import requests

    from services.jobs.catalogue import load_catalogue
    from services.jobs.deployment import Deployment
    from services.jobs.http_targets import target_flag
    from services.worker.http_request import http_request_action

    targets = target_flag(f"bench={target.url}")
    action = http_request_action(targets, _StaticTokens(), requests.Session())
    catalogue = load_catalogue(deployment=Deployment(http_targets=targets))
    params = {"target": "bench", "path": "/jobs/expire", "body": {"n": 1}}
    with _World(emulators, "bench-cost-http", live=False, extra_actions=(action,)) as world:
        cost = world.cycle(
            "http.request",
            jobs,
            prefix="call",
            seed={"action": "http.request", "catalogue": catalogue, "params": lambda n: params},
        )
    print(f"  target calls: {target.calls:,}")
    return cost


PLUGIN_ACTION = "trials.expire"


def _plugin_pass(emulators: rig.Emulators, jobs: int) -> Cost:
    import importlib
    import sys
    import tempfile
    from pathlib import Path

    from services.jobs.catalogue import load_catalogue
    from services.jobs.lanes import claim_rates
    from tests.fixtures.plugin import TRIALS_MODULE, install

    with tempfile.TemporaryDirectory(prefix="cost-site-") as site:
        install(
            Path(site),
            "my-trials",
            {"my_trials.actions": TRIALS_MODULE, "my_trials.__init__": ""},
            {PLUGIN_ACTION: "my_trials.actions:EXPIRE"},
        )
        sys.path.insert(0, site)
        importlib.invalidate_caches()
        try:
            catalogue = load_catalogue()
            plugin = catalogue.get(PLUGIN_ACTION)
            assert plugin is not None, "the plug-in's entry point was not found"
            rates = claim_rates(catalogue)
            with _World(
                emulators, "bench-cost-plugin", live=False, extra_actions=(plugin,), rates=rates
            ) as world:
                cost = world.cycle(
                    f"plug-in {PLUGIN_ACTION} (claim rate {rates[PLUGIN_ACTION]:g}/s)",
                    jobs,
                    prefix="trial",
                    seed={
                        "action": PLUGIN_ACTION,
                        "catalogue": catalogue,
                        "params": lambda n: {"trial_id": f"t-{n}"},
                    },
                )
            runs = len(sys.modules["my_trials.actions"].RUNS)
            print(f"  plug-in calls: {runs:,}")
        finally:
            sys.path.remove(site)
            for name in [m for m in sys.modules if m.split(".")[0] == "my_trials"]:
                del sys.modules[name]
    return cost


class _World:
    """One project: client, worker, topic, store and a metered Scanner."""

    def __init__(
        self,
        emulators: rig.Emulators,
        project: str,
        *,
        live: bool,
        extra_actions: tuple[Any, ...] = (),
        rates: dict[str, float] | None = None,
    ) -> None:
        from google.cloud import firestore

        from services.jobs.clock import SystemClock
        from services.store.job_store import FirestoreJobStore
        from services.store.runs import ScanRunLog

        self.emulators = emulators
        self.project = project
        self.live = live
        self.client = firestore.Client(project=project)
        self.clock = SystemClock()
        self.worker = rig.serve_worker(project, emulators, self.client, extra_actions=extra_actions)
        self.topic = rig.topic(project, push_url=self.worker.url if live else None)
        self.bucket = f"{project}-media"
        self.storage = self.worker.storage_client.create_bucket(self.bucket)
        store = FirestoreJobStore(self.client, self.clock)
        store.update_control("bench", "benchmark", claim_budget=LIMITS["max_per_run"])
        self.metered = rig.MeteredStore(store, emulators, project)
        runs = rig.MeteredRuns(
            ScanRunLog(self.client, retention=timedelta(days=30)),
            emulators,
            project,
            self.metered.fixed,
        )
        self.scan, self.publisher = rig.scanner(
            self.metered, self.client, project, "jobs", self.clock, runs=runs, rates=rates, **LIMITS
        )

    def __enter__(self) -> _World:
        return self

    def __exit__(self, *exc: object) -> None:
        self.scan.close()
        self.publisher.close()
        self.topic.close()
        self.worker.close()
        self.client.close()

    def cycle(
        self,
        label: str,
        jobs: int,
        *,
        prefix: str = "job",
        key: Callable[[int], str] | None = None,
        fixed_from: list[int] | None = None,
        seed: dict[str, Any] | None = None,
    ) -> Cost:
        print(f"-- {label}: {jobs:,} jobs", flush=True)
        if seed is None:
            rig.upload_objects(self.storage, jobs, prefix)
        rig.seed_due(
            self.client,
            jobs,
            self.clock.now() - timedelta(minutes=1),
            prefix=prefix,
            bucket=self.bucket,
            idempotency_key=key,
            **(seed or {}),
        )
        self.metered.fixed.per_call.clear()
        before = self.worker.done.completed
        self.emulators.reset(self.project)
        started = time.perf_counter()
        summaries = []
        while True:
            run = self.scan.run()
            summaries.append(run)
            if run.claimed == 0:
                break
        scan_stats = self.emulators.billed(self.project)
        if not self.live:
            self.emulators.reset(self.project)
            self.topic.push_to(self.worker.url)
        self.worker.done.wait_for(before + jobs, timeout_s=300)
        elapsed = time.perf_counter() - started
        worker_stats = self.emulators.billed(self.project)
        if not self.live:
            self.topic.push_to(None)
        completed = self.worker.done.completed - before
        fixed = _fixed_per_run(self.metered.fixed, len(summaries))
        published = sum(r.published for r in summaries)
        other = self.worker.done.other or "none"
        print(
            f"  scan runs: {len(summaries)} ({published:,} published); worker acknowledged: "
            f"{completed:,}; other answers so far: {other}; {elapsed:.1f} s"
        )
        if self.live:
            per_job = _live(completed, worker_stats, fixed_from or fixed)
        else:
            per_job = _sequential(jobs, completed, scan_stats, worker_stats, fixed)
        return Cost(jobs, completed, len(summaries), per_job, fixed)


def _fixed_per_run(fixed: rig.FixedCosts, runs: int) -> list[int]:
    per_run = [0] * runs
    for calls in fixed.per_call.values():
        for n, spent in enumerate(calls[:runs]):
            per_run[n] += sum(spent.values())
    return per_run


def _live(completed: int, stats: dict[str, Any], fixed: list[int]) -> float:
    # The same run shapes as the sequential pass: its working runs and its last, idle run.
    overhead = sum(fixed)
    total = rig.billed_ops(stats)
    per_job = rig.per(total - overhead, completed)
    print(
        f"  billed ops in all: {total:,} (reads {stats['document_reads']:,}, writes "
        f"{stats['document_writes']:,}); per-run steps as in the sequential pass: {overhead:,}"
    )
    print(f"  billed ops per completed job: {per_job:.2f}")
    return per_job


def _sequential(
    jobs: int,
    completed: int,
    scan_stats: dict[str, Any],
    worker_stats: dict[str, Any],
    fixed: list[int],
) -> float:
    working, idle = fixed[:-1], fixed[-1]
    scan_job = rig.per(rig.billed_ops(scan_stats) - sum(fixed), jobs)
    worker_job = rig.per(rig.billed_ops(worker_stats), completed)
    print(
        f"  per-run steps (control, reclaimer, backlog, scan_runs): "
        f"{rig.per(sum(working), len(working)):.1f} ops per working run, {idle} for the last "
        f"(idle) run"
    )
    print(
        f"  scan per job: {scan_job:.2f} (scan totals: reads {scan_stats['document_reads']:,}, "
        f"writes {scan_stats['document_writes']:,})"
    )
    print(
        f"  worker per job: {worker_job:.2f} (reads {worker_stats['document_reads']:,}, writes "
        f"{worker_stats['document_writes']:,}, deletes {worker_stats['document_deletes']:,})"
    )
    print(f"  billed ops per completed job: {scan_job + worker_job:.2f}")
    return scan_job + worker_job
