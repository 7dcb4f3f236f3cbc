"""Budgets per action at PRODUCTION CADENCE (issue 32, Measure, first bullet).

Two actions with a backlog each: `trials.expire` (the test plug-in, installed beside the
project the way pip leaves a distribution, `Budget(per_second=5)`) and `media.delete_source`
(no budget). The operator sets the catch-up rate R. The scan runs as deployed (functions-
framework behind the local Cloud Run front end, paced 50 s runs) on the strict local Cloud
Scheduler at `* * * * *`, the emulators in their own process with the strict index set. Per
whole scheduler minute, from the records' `claim.claimed_at`: jobs claimed of each action,
against 5/s x 60 = 300 (±5 %) for the limited one and R x 60 for the other (until its backlog
runs out). Every ID must arrive on the topic exactly once.

Knobs: JOBS_BENCH_BUDGETS_SIZE (3,000 of each), JOBS_BENCH_BUDGETS_RATE (R, 20),
JOBS_BENCH_BUDGETS_MINUTES (how many scheduler minutes to watch; 0: until both drain).
Run: `.venv/bin/python -m tests.benchmarks budgets`.
"""

from __future__ import annotations

import os
import tempfile
import time
from collections import Counter
from datetime import UTC, datetime, timedelta
from pathlib import Path

from tests.benchmarks import rig
from tests.benchmarks.bench_cadence import Messages, _stack

LIMITED, OTHER = "trials.expire", "media.delete_source"
LIMITED_RATE = 5.0


def main() -> None:
    size = int(os.environ.get("JOBS_BENCH_BUDGETS_SIZE", 3_000))
    rate = float(os.environ.get("JOBS_BENCH_BUDGETS_RATE", 20))
    minutes = float(os.environ.get("JOBS_BENCH_BUDGETS_MINUTES", 0))
    with tempfile.TemporaryDirectory(prefix="budgets-site-") as site:
        _install_plugin(Path(site))
        path = os.pathsep.join(p for p in (site, os.environ.get("PYTHONPATH", "")) if p)
        os.environ["PYTHONPATH"] = path
        drill(size, rate, minutes, {"PYTHONPATH": path})


def _install_plugin(site: Path) -> None:
    from tests.fixtures.plugin import TRIALS_MODULE, install

    install(
        site,
        "my-trials",
        {"my_trials.actions": TRIALS_MODULE, "my_trials.__init__": ""},
        {LIMITED: "my_trials.actions:EXPIRE"},
    )


def drill(size: int, rate: float, minutes: float, env: dict[str, str]) -> None:
    from google.cloud import firestore

    from services.jobs import schema
    from services.jobs.clock import SystemClock
    from services.store.job_store import FirestoreJobStore

    with _stack("budgets", 1, "* * * * *", env) as stack:
        client = firestore.Client(project=stack.options.project)
        store = FirestoreJobStore(client, SystemClock())
        store.update_control("drill", "paused while the backlogs fall due", paused=True)
        due = datetime.now(UTC) - timedelta(minutes=5)
        # The limited action's backlog is the older one: without lanes it would go first.
        limited = rig.seed_due(client, size, due - timedelta(minutes=5), prefix="lim")
        for first in range(0, size, 500):
            batch = client.batch()
            for job_id in limited[first : first + 500]:
                batch.update(client.collection(schema.JOBS).document(job_id), {"action": LIMITED})
            batch.commit()
        other = rig.seed_due(client, size, due, prefix="oth")
        store.update_control("drill", "resume", paused=False, catch_up_rate=rate)
        messages = Messages(stack)
        attempts: list[object] = []
        scheduler = stack.scheduler(attempts.append).start()
        first = scheduler.next_scheduled
        print(f"[budgets] {size:,} due of each; R = {rate:g}/s; first run {first:%H:%M:%S}")
        watch_s = minutes * 60 if minutes else 2 * size / LIMITED_RATE
        deadline = time.monotonic() + watch_s + 90
        while time.monotonic() < deadline and sum(messages.received.values()) < 2 * size:
            time.sleep(10)
            print(
                f"  {datetime.now(UTC):%H:%M:%S} received {sum(messages.received.values()):,}",
                flush=True,
            )
        scheduler.stop()
        messages.close()
        claimed = _claimed(client)
        client.close()
    _report(size, rate, first, claimed, limited, other, messages)


def _claimed(client: object) -> dict[str, tuple[str, datetime | None, str]]:
    from services.jobs import schema

    found = {}
    query = client.collection(schema.JOBS).select(["action", "claim", "state"])  # type: ignore[attr-defined]
    for snapshot in query.stream():
        data = snapshot.to_dict() or {}
        found[snapshot.id] = (
            data["action"],
            (data.get("claim") or {}).get("claimed_at"),
            data["state"],
        )
    return found


def _report(
    size: int,
    rate: float,
    first: datetime,
    claimed: dict[str, tuple[str, datetime | None, str]],
    limited: list[str],
    other: list[str],
    messages: Messages,
) -> None:
    per_minute: dict[str, Counter[int]] = {LIMITED: Counter(), OTHER: Counter()}
    for action, at, _ in claimed.values():
        if at is not None:
            per_minute[action][int((at - first).total_seconds() // 60)] += 1
    last = max((m for c in per_minute.values() for m in c), default=-1)
    print("minute  limited (target 300 ±15)  other (target R x 60 until drained)")
    for minute in range(last + 1):
        lim, oth = per_minute[LIMITED][minute], per_minute[OTHER][minute]
        print(f"{minute:>6}  {lim:>6} ({lim / 60:.2f}/s)          {oth:>6} ({oth / 60:.2f}/s)")
    twice = sum(1 for n in messages.received.values() if n > 1)
    unclaimed = {job_id for job_id, (_, at, _) in claimed.items() if at is None}
    lost = len(set(limited + other) - set(messages.received) - unclaimed)
    print(
        f"received {sum(messages.received.values()):,} messages; IDs more than once: {twice}; "
        f"claimed IDs not received: {lost}; not claimed yet: {len(unclaimed)}"
    )
