"""Read-only history: recent scan runs (what each claimed and published) and rejected pushes."""

from __future__ import annotations

import argparse
import dataclasses
from datetime import timedelta
from typing import Any

from services.cli.errors import UsageError
from services.cli.output import Report, table
from services.cli.session import Session
from services.cli.view import effective_run_rate, lane_summary
from services.jobs.errors import StoreUnavailable
from services.store.rejections import RejectionStore
from services.store.runs import RunLogError, ScanRun, ScanRunLog


def register(commands: Any, common: argparse.ArgumentParser) -> None:
    p = commands.add_parser(
        "runs", parents=[common], help="recent scan runs, newest first (drain progress)"
    )
    p.add_argument("--limit", type=int, default=20, help="at most this many runs (default 20)")
    p.set_defaults(handler=runs)

    p = commands.add_parser(
        "rejected",
        parents=[common],
        help="push messages the worker acknowledged but could not process",
    )
    p.add_argument("--limit", type=int, default=20, help="at most this many messages (default 20)")
    p.set_defaults(handler=rejected)


def runs(session: Session, args: argparse.Namespace) -> Report:
    # Retention only matters when writing; the CLI only reads.
    _check_limit(args.limit)
    log = ScanRunLog(session.backends.firestore(), retention=timedelta(days=1))
    try:
        recent = log.recent(args.limit)
    except RunLogError as exc:
        raise StoreUnavailable(str(exc)) from exc
    # Newest first; each run's effective rate needs the run before it (the next row).
    effective = [
        effective_run_rate(r, recent[i + 1] if i + 1 < len(recent) else None)
        for i, r in enumerate(recent)
    ]
    rows = [
        [
            r.started_at,
            r.run_id,
            r.partition,
            r.mode,
            f"failed {r.failure.status}" if r.failure else run_outcome(r),
            r.stopped_because,
            r.budget,
            r.claimed,
            r.published,
            r.publish_failed,
            r.reclaimed,
            r.due_count,
            r.stale_enqueued,
            f"{r.duration_s:.1f}s",
            f"{r.drain_rate_per_s:.1f}",
            f"{rate:.1f}" if rate is not None else None,
        ]
        for r, rate in zip(recent, effective, strict=True)
    ]
    headers = [
        "started",
        "run_id",
        "partition",
        "mode",
        "outcome",
        "stopped",
        "budget",
        "claimed",
        "published",
        "failed",
        "reclaimed",
        "due",
        "stale",
        "took",
        "burst/s",
        "effective/s",
    ]
    # Burst: published over the run's own duration (how fast a run goes). Effective: published
    # over the time since the previous run started (the rate the backlog drains at).
    data = [
        {
            **dataclasses.asdict(r),
            "duration_s": r.duration_s,
            "drain_rate_per_s": r.drain_rate_per_s,
            "outcome": run_outcome(r),
            "burst_rate_per_s": r.drain_rate_per_s,
            "effective_rate_per_s": rate,
        }
        for r, rate in zip(recent, effective, strict=True)
    ]
    legend = (
        "burst/s: published / the run's duration; effective/s: published / time since the "
        "previous run started (the drain rate)"
    )
    reasons = "".join(f"\n{r.run_id}: {failure_reason(r)}" for r in recent if r.failure)
    # Why an overlapping or duplicate run claimed nothing.
    reasons += "".join(f"\n{r.run_id}: {r.stopped_because}: {r.note}" for r in recent if r.note)
    # Per claim lane (an action's budget, or its pause): what each claimed of its budget.
    reasons += "".join(f"\n{r.run_id}: lanes {lane_summary(r.lanes)}" for r in recent if r.lanes)
    return Report(data={"runs": data}, text=f"{table(headers, rows)}\n{legend}{reasons}")


def run_outcome(run: ScanRun) -> str:
    """How the run ended for its caller: `failed` is a run that answered 500 or 503 (its record
    names the status and the error kind; an older record without one, a run whose every
    publish failed), `partial` one with some publishes failed."""
    if run.failure is not None or (run.publish_failed and not run.published):
        return "failed"
    return "partial" if run.publish_failed else "ok"


def failure_reason(run: ScanRun) -> str:
    """The line under the table explaining a failed run."""
    failure = run.failure
    if failure is None:
        return ""
    return f"failed with {failure.status} ({failure.kind}): {failure.message}"


def rejected(session: Session, args: argparse.Namespace) -> Report:
    _check_limit(args.limit)
    recent = RejectionStore(session.backends.firestore()).recent(args.limit)
    rows = [[r.received_at, r.reason, r.job_id, r.message_id, r.detail[:60]] for r in recent]
    return Report(
        data={"rejected": recent},
        text=table(["received", "reason", "job_id", "message_id", "detail"], rows),
    )


def _check_limit(limit: int) -> None:
    # Firestore answers a negative limit with a 400, which would read as "unavailable" (exit 3).
    if limit < 1:
        raise UsageError(f"--limit must be at least 1, not {limit}")
