"""An HTTP target answering 429 with `Retry-After: 30` for one minute (issue 32, Measure, second
bullet), through the whole local system at PRODUCTION CADENCE.

N `http.request` jobs (JOBS_BENCH_RETRYAFTER_JOBS, default 100) are due at once against a local
target (tests/fixtures/throttled_target.py) that answers `429` + `Retry-After: 30` to every call
during its first 60 s (from its first call; JOBS_BENCH_RETRYAFTER_THROTTLE_S), then `204`, and
records each call's start and end, Idempotency-Key and job ID. The stack is `make run`'s
(tests/benchmarks/full_stack.py: emulators in their own process, the scan, worker and api behind
the local Cloud Run front ends, the push subscription, the strict local Cloud Scheduler at
`* * * * *` with paced runs, plus one forced run at start as `make run` does), the target named
as `--http-target bench=URL` does it (JOBS_HTTP_TARGETS for the worker and the api). Nothing
else runs in the stack.

Prints: the calls per 10 s from the first call, by answer; per wave of 429s (answers less than
10 s apart), the calls that started in the 30 s after the wave's first 429 and after its last,
split into those already claimed before that 429 (in flight: enqueued before the pause was
recorded) and those claimed after it (what the pause must prevent: expected 0); jobs not
completed (lost), Idempotency-Keys with other than exactly one 2xx (run twice or never), jobs
whose `attempt` is not 1 (a Retry-After must not spend an attempt); each scan run's claims and
the http.request lane's `paused_until` from its `scan_runs` document.

Run: `.venv/bin/python -m tests.benchmarks retryafter` (about 4 minutes).
"""

from __future__ import annotations

import os
import time
from collections import Counter
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any

from tests.benchmarks import rig
from tests.benchmarks.full_stack import full_stack
from tests.fixtures.throttled_target import Call, ThrottledTarget

ACTION = "http.request"
WAVE_GAP_S = 10.0


def main() -> None:
    jobs = int(os.environ.get("JOBS_BENCH_RETRYAFTER_JOBS", 100))
    retry_after = int(os.environ.get("JOBS_BENCH_RETRYAFTER_S", 30))
    throttle = float(os.environ.get("JOBS_BENCH_RETRYAFTER_THROTTLE_S", 60))
    timeout = float(os.environ.get("JOBS_BENCH_RETRYAFTER_TIMEOUT_S", 600))
    rate = os.environ.get("JOBS_BENCH_RETRYAFTER_RATE")
    with ThrottledTarget(retry_after_s=retry_after, throttle_s=throttle) as target:
        drill(target, jobs, timeout, float(rate) if rate else None)


@dataclass(frozen=True)
class Record:
    state: str
    attempt: int
    claims: tuple[float, ...]  # time.time() of each `claimed` transition in its history


def drill(target: ThrottledTarget, jobs: int, timeout_s: float, rate: float | None) -> None:
    from services.jobs.catalogue import load_catalogue
    from services.jobs.deployment import Deployment
    from services.jobs.http_targets import target_flag
    from services.store.runs import ScanRunLog

    targets = target_flag(f"bench={target.url}")
    with full_stack("retryafter", http_targets=targets) as stack:
        client = stack.backends().firestore()
        catalogue = load_catalogue(deployment=Deployment(http_targets=targets))
        ids = rig.seed_due(
            client,
            jobs,
            datetime.now(UTC) - timedelta(minutes=1),
            prefix="call",
            action=ACTION,
            catalogue=catalogue,
            params=lambda n: {"target": "bench", "path": f"/trials/{n}:expire", "body": {"n": n}},
        )
        if rate is not None:
            stack.store().update_control("bench", "catch-up rate", catch_up_rate=rate)
        attempts: list[Any] = []
        scheduler = stack.scheduler(attempts.append).start()
        scheduler.run_now()
        started = time.monotonic()
        print(
            f"[retry-after] {jobs} {ACTION} jobs due; target {target.url} answers 429 + "
            f"Retry-After: {target.retry_after_s} for {target.throttle_s:g} s from its first "
            f"call, then 204; scheduler '* * * * *' (paced stack defaults) + one forced run; "
            f"catch-up rate {stack.store().get_control().catch_up_rate}",
            flush=True,
        )
        counts: dict[str, int] = {}
        while time.monotonic() - started < timeout_s:
            time.sleep(5)
            stack.supervisor.check_alive()
            counts = rig.states(client, ids)
            print(
                f"  {datetime.now(UTC):%H:%M:%S} {counts}; target calls {len(target.calls)}",
                flush=True,
            )
            if counts.get("completed", 0) + counts.get("failed", 0) == jobs:
                break
        scheduler.stop()
        took = time.monotonic() - started
        records = _records(client, ids)
        runs = ScanRunLog(client, retention=timedelta(days=1)).recent(50)
        pauses = stack.store().get_control().action_pauses
    print(f"control document's action_pauses at the end: {pauses}")
    _report(target, ids, records, attempts, runs, took)


def _records(client: Any, ids: list[str]) -> dict[str, Record]:
    from services.jobs import schema

    found = {}
    collection = client.collection(schema.JOBS)
    for first in range(0, len(ids), 300):
        refs = [collection.document(i) for i in ids[first : first + 300]]
        for snapshot in client.get_all(refs):
            data = snapshot.to_dict() or {}
            claims = tuple(
                entry["at"].timestamp()
                for entry in data.get("history") or []
                if entry.get("to") == "claimed"
            )
            found[snapshot.id] = Record(data["state"], int(data["attempt"]), claims)
    return found


def _claim_of(calls: list[Call], records: dict[str, Record]) -> dict[int, float | None]:
    """Each call's claim (the k-th call of a job was delivered by its k-th claim)."""
    seen: Counter[str] = Counter()
    out: dict[int, float | None] = {}
    for index, call in enumerate(calls):
        claims = records[call.job_id].claims if call.job_id in records else ()
        k = seen[call.job_id]
        seen[call.job_id] += 1
        out[index] = claims[k] if k < len(claims) else None
    return out


def _waves(calls: list[Call]) -> list[list[Call]]:
    refused = [c for c in calls if c.status == 429]
    waves: list[list[Call]] = []
    for call in sorted(refused, key=lambda c: c.ended):
        if waves and call.ended - waves[-1][-1].ended < WAVE_GAP_S:
            waves[-1].append(call)
        else:
            waves.append([call])
    return waves


def _report(
    target: ThrottledTarget,
    ids: list[str],
    records: dict[str, Record],
    attempts: list[Any],
    runs: list[Any],
    took: float,
) -> None:
    calls = target.answered()
    if not calls:
        print("no call reached the target")
        return
    zero = calls[0].started
    claim_of = _claim_of(calls, records)
    print(f"calls per 10 s from the first call ({datetime.fromtimestamp(zero, UTC):%H:%M:%S}):")
    buckets: dict[int, Counter[int]] = {}
    for call in calls:
        buckets.setdefault(int((call.started - zero) // 10), Counter())[call.status] += 1
    for bucket in sorted(buckets):
        statuses = ", ".join(f"{n} x {s}" for s, n in sorted(buckets[bucket].items()))
        print(f"  +{bucket * 10:>4}..{bucket * 10 + 10:<4} s  {statuses}")
    window = target.retry_after_s
    claimed_in_pause = 0
    for number, wave in enumerate(_waves(calls), 1):
        first, last = wave[0].ended, wave[-1].ended
        for label, since in (("first", first), ("last", last)):
            inside = [(i, c) for i, c in enumerate(calls) if since < c.started < since + window]
            before = sum(1 for i, _ in inside if (claim_of[i] or 0) <= since)
            after = len(inside) - before
            print(
                f"wave {number}: {len(wave)} x 429 answered +{first - zero:.1f}..+{last - zero:.1f}"
                f" s; calls started in the {window} s after its {label} 429: {len(inside)} "
                f"(claimed before it, in flight: {before}; claimed after it: {after})"
            )
    # Any call whose claim fell inside some 429's window (the pause should have prevented it).
    ends = [c.ended for c in calls if c.status == 429]
    offenders = []
    for i, call in enumerate(calls):
        claimed = claim_of[i]
        if claimed is None:
            continue
        opened = [e for e in ends if e < claimed < e + window]
        if opened:
            offenders.append((call.job_id, claimed - zero, max(opened) - zero))
            claimed_in_pause += 1
    done = target.done_per_key()
    keys = {c.key for c in calls}
    states = Counter(r.state for r in records.values())
    attempts_not_1 = sum(1 for r in records.values() if r.attempt != 1)
    print(
        f"jobs {len(ids)}: {dict(states)}; lost (not completed) "
        f"{len(ids) - states.get('completed', 0)}; Idempotency-Keys seen {len(keys)}, with "
        f"exactly one 2xx {sum(1 for k in keys if done[k] == 1)}, with more than one "
        f"{sum(1 for k in keys if done[k] > 1)}, with none {sum(1 for k in keys if done[k] == 0)};"
        f" jobs whose attempt is not 1: {attempts_not_1}; calls {len(calls)} "
        f"({dict(Counter(c.status for c in calls))}); calls claimed inside a 429's "
        f"{window} s window: {claimed_in_pause}; all done in {took:.0f} s"
    )
    for job_id, claimed_s, refused_s in offenders[:10]:
        print(
            f"  claimed in a pause: {job_id} claimed +{claimed_s:.1f} s, 429 at +{refused_s:.1f} s"
        )
    for attempt in attempts:
        b = attempt.body
        when = attempt.schedule_time
        print(
            f"  scan attempt {attempt.number} {'forced' if attempt.forced else 'scheduled'} "
            f"{f'{when:%H:%M:%S}' if when else '-'} -> "
            f"{attempt.status} claimed {b.get('claimed')} published {b.get('published')} "
            f"{b.get('stopped_because')} {b.get('duration_s')} s"
        )
    unique = {run.run_id: run for run in runs}.values()
    for run in sorted(unique, key=lambda r: r.started_at):
        lane = dict(run.lanes.get(ACTION) or {})
        paused = lane.get("paused_until")
        print(
            f"  run {run.started_at:%H:%M:%S}-{run.finished_at:%H:%M:%S} claimed {run.claimed}"
            f"{f'; {ACTION} paused until {paused:%H:%M:%S}' if paused else ''}"
        )
