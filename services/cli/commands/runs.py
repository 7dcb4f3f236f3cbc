"""Read-only history: recent scan runs (what each claimed and published) and rejected pushes."""

from __future__ import annotations

import argparse
import dataclasses
from datetime import timedelta
from typing import Any

from services.cli.errors import UsageError
from services.cli.output import Report, table
from services.cli.session import Session
from services.jobs.errors import StoreUnavailable
from services.jobs.rejections import RejectionStore
from services.jobs.runs import RunLogError, ScanRunLog


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
    rows = [
        [
            r.started_at,
            r.run_id,
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
        ]
        for r in recent
    ]
    headers = [
        "started",
        "run_id",
        "stopped",
        "budget",
        "claimed",
        "published",
        "failed",
        "reclaimed",
        "due",
        "stale",
        "took",
        "jobs/s",
    ]
    # The drain rate is what an operator watches after a pause: published / duration per run.
    data = [
        {
            **dataclasses.asdict(r),
            "duration_s": r.duration_s,
            "drain_rate_per_s": r.drain_rate_per_s,
        }
        for r in recent
    ]
    return Report(data={"runs": data}, text=table(headers, rows))


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
