"""A producer schedules a plug-in's action through the API before the worker has it (issue 32,
Measure, third bullet), through the whole local system at PRODUCTION CADENCE.

The test plug-in (`my-trials`, action `trials.expire`, tests/fixtures/plugin.py) is installed
the way pip leaves a distribution, in a directory that is on the **api's** PYTHONPATH only: the
api knows the action (its params are checked), the worker and the scan do not (an image built
before the plug-in was added). The stack is `make run`'s (tests/benchmarks/full_stack.py: the
emulators in their own process, the scan, worker and api behind the local Cloud Run front ends,
the push subscription, the strict local Cloud Scheduler at `* * * * *`, paced runs, plus one
forced run at start as `make run` does). Nothing else runs in it.

1. N jobs (JOBS_BENCH_LATEWORKER_JOBS, default 100) are scheduled with `POST /v1/jobs`, due now
   (`delay: 0s`), by the local producer with its ID token.
2. The scan claims them, the worker without the plug-in answers each delivery: every job is
   deferred (`unknown_action`, due again in 5 minutes, no attempt spent), none failed.
3. JOBS_BENCH_LATEWORKER_WAIT_S (30) after the last deferral, the worker is restarted with the
   plug-in on its PYTHONPATH (a new revision), on the same port behind the same front end.
4. Every job completes once it is due again and a scan run claims it.

Prints: the API's answers; job states after the first deliveries; time from the worker's restart
and from scheduling to the last completion; jobs failed; attempts; the plug-in's results.

Run: `.venv/bin/python -m tests.benchmarks lateworker` (about 7 minutes: the first
`unknown_action` backoff is 5 minutes).
"""

from __future__ import annotations

import os
import tempfile
import time
from collections import Counter
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from tests.benchmarks import rig
from tests.benchmarks.full_stack import full_stack

ACTION = "trials.expire"


def main() -> None:
    jobs = int(os.environ.get("JOBS_BENCH_LATEWORKER_JOBS", 100))
    wait_s = float(os.environ.get("JOBS_BENCH_LATEWORKER_WAIT_S", 30))
    timeout_s = float(os.environ.get("JOBS_BENCH_LATEWORKER_TIMEOUT_S", 900))
    with tempfile.TemporaryDirectory(prefix="lateworker-site-") as site:
        from tests.fixtures.plugin import TRIALS_MODULE, install

        install(
            Path(site),
            "my-trials",
            {"my_trials.actions": TRIALS_MODULE, "my_trials.__init__": ""},
            {ACTION: "my_trials.actions:EXPIRE"},
        )
        path = os.pathsep.join(p for p in (site, os.environ.get("PYTHONPATH", "")) if p)
        drill(jobs, wait_s, timeout_s, {"PYTHONPATH": path})


def drill(jobs: int, wait_s: float, timeout_s: float, plugin_env: dict[str, str]) -> None:
    import requests

    with full_stack("lateworker", service_env={"api": plugin_env}) as stack:
        client = stack.backends().firestore()
        session = requests.Session()
        session.headers["Authorization"] = f"Bearer {stack.api_token()}"
        ids = [f"trial-{n:04d}" for n in range(jobs)]
        scheduled_at = time.monotonic()
        answers: Counter[int] = Counter()
        for n, job_id in enumerate(ids):
            body: dict[str, Any] = {
                "job_id": job_id,
                "action": ACTION,
                "subject": f"trial-{n}",
                "params": {"trial_id": f"t-{n}"},
                "delay": "0s",
            }
            answers[session.post(f"{stack.endpoints.api_url}/v1/jobs", json=body).status_code] += 1
        refused = session.post(
            f"{stack.endpoints.api_url}/v1/jobs",
            json={**body, "job_id": "typo", "params": {"trail_id": "t"}},
        )
        session.close()
        print(
            f"[late worker] POST /v1/jobs x {jobs} {ACTION} (api with the plug-in, worker and "
            f"scan without): {dict(answers)}; a typo in params: {refused.status_code} "
            f"{refused.json().get('error', {}).get('message', '')!r}",
            flush=True,
        )
        attempts: list[Any] = []
        scheduler = stack.scheduler(attempts.append).start()
        scheduler.run_now()
        deadline = time.monotonic() + timeout_s
        deferred = _wait(
            stack, client, ids, deadline, lambda s: _unknown_action(client, ids) == jobs
        )
        first_pass = rig.states(client, ids)
        print(
            f"  after the first deliveries ({time.monotonic() - scheduled_at:.0f} s): "
            f"{first_pass}; deferred as unknown_action {deferred}",
            flush=True,
        )
        time.sleep(wait_s)
        stack.restart("worker", plugin_env)
        restarted = time.monotonic()
        print(f"  {datetime.now(UTC):%H:%M:%S} worker restarted with the plug-in", flush=True)
        _wait(stack, client, ids, deadline, lambda s: s.get("completed", 0) == jobs)
        done = time.monotonic()
        scheduler.stop()
        final = _final(client, ids)
    failed = final["states"].get("failed", 0)
    print(
        f"jobs {jobs}: after the old worker {first_pass} (failed {first_pass.get('failed', 0)}); "
        f"at the end {dict(final['states'])} (failed {failed}); attempts {dict(final['attempts'])}"
        f"; results {dict(final['results'])}; last completion "
        f"{done - restarted:.0f} s after the worker's restart, {done - scheduled_at:.0f} s after "
        f"scheduling; scan attempts {len(attempts)}"
    )
    for attempt in attempts:
        b = attempt.body
        print(
            f"  scan attempt {attempt.number} {'forced' if attempt.forced else 'scheduled'} -> "
            f"{attempt.status} claimed {b.get('claimed')} published {b.get('published')}"
        )


def _wait(stack: Any, client: Any, ids: list[str], deadline: float, done: Any) -> int | None:
    while time.monotonic() < deadline:
        time.sleep(5)
        stack.supervisor.check_alive()
        states = rig.states(client, ids)
        print(f"  {datetime.now(UTC):%H:%M:%S} {states}", flush=True)
        if states.get("failed"):
            print("  a job FAILED", flush=True)
        if done(states):
            return _unknown_action(client, ids)
    raise TimeoutError(f"not done by the deadline: {rig.states(client, ids)}")


def _unknown_action(client: Any, ids: list[str]) -> int:
    """Jobs deferred with last_error.code unknown_action."""
    from services.jobs import schema

    found = 0
    collection = client.collection(schema.JOBS)
    for first in range(0, len(ids), 300):
        refs = [collection.document(i) for i in ids[first : first + 300]]
        for snapshot in client.get_all(refs):
            data = snapshot.to_dict() or {}
            error = data.get("last_error") or {}
            if data.get("state") == "deferred" and error.get("code") == "unknown_action":
                found += 1
    return found


def _final(client: Any, ids: list[str]) -> dict[str, Counter[Any]]:
    from services.jobs import schema

    states: Counter[Any] = Counter()
    attempts: Counter[Any] = Counter()
    results: Counter[Any] = Counter()
    collection = client.collection(schema.JOBS)
    for first in range(0, len(ids), 300):
        refs = [collection.document(i) for i in ids[first : first + 300]]
        for snapshot in client.get_all(refs):
            data = snapshot.to_dict() or {}
            states[data.get("state")] += 1
            attempts[data.get("attempt")] += 1
            result = data.get("result") or {}
            trial = (result.get("details") or {}).get("trial")
            results[f"{result.get('outcome')}, trial matches" if trial else "none"] += 1
    return {"states": states, "attempts": attempts, "results": results}
