"""`jobsctl backfill-shards`: write `shard = shard_of(job ID, N)` on every non-terminal job
record whose shard is missing or another, before (and after) a deployment changes `shards`.

A dry run unless --apply, like `reclaim` and `dead-letters replay`: it reads every non-terminal
record and counts what would change. With --apply each write is conditioned on the record's
update_time, so a record changed meanwhile is re-read and decided again, never clobbered
(services/store/backfill.py), and a pass that reaches the end records N as the shard layout the
scan compares with its JOBS_SHARDS (services/jobs/layout.py). An interrupted run prints the
position to pass to --resume; a re-run from the start is safe too (records already right are
only counted).
"""

from __future__ import annotations

import argparse
from typing import Any

from services.cli.errors import UsageError
from services.cli.output import Report, fields
from services.cli.session import Session, store_bounds
from services.edge.settings import SHARDS
from services.jobs.errors import JobsError, ValidationError
from services.jobs.shard import MAX_SHARDS
from services.store.backfill import MAX_BATCH, BackfillCounts, Position, ShardBackfill
from services.store.bounds import CallBounds


def register(commands: Any, common: argparse.ArgumentParser) -> None:
    p = commands.add_parser(
        "backfill-shards",
        parents=[common],
        help="write each non-terminal job's shard for N shards (dry run unless --apply)",
        description="Every deferred, claimed, enqueued and running record gets shard = "
        "shard_of(job ID, N); with N > 1 the scan finds a record only in its shard. Run it "
        "before raising (or lowering) the Pulumi key `shards`, then once more after the "
        "deploy (docs/capacity.md, 'Changing the shard count'). Reads every non-terminal "
        "record once; writes only the ones that change, each conditioned on its update_time.",
    )
    p.add_argument(
        "--shards",
        type=int,
        help=f"the shard count the services will run with, 1-{MAX_SHARDS} (default: {SHARDS})",
    )
    p.add_argument("--apply", action="store_true", help="write the shards (default: dry run)")
    p.add_argument(
        "--batch-size",
        type=int,
        default=MAX_BATCH,
        help=f"records read and written per batch, 1-{MAX_BATCH} (default {MAX_BATCH})",
    )
    p.add_argument(
        "--resume",
        metavar="STATE:JOB_ID",
        help="continue an interrupted run after this position (printed when it stopped)",
    )
    p.set_defaults(handler=backfill_shards)


def backfill_shards(session: Session, args: argparse.Namespace) -> Report:
    shards = _shards(session, args.shards)
    if not 1 <= args.batch_size <= MAX_BATCH:
        raise UsageError(f"--batch-size must be from 1 to {MAX_BATCH}, not {args.batch_size}")
    try:
        resume = Position.parse(args.resume) if args.resume else None
    except ValidationError as exc:
        raise UsageError(f"--resume: {exc}") from exc
    _, timeout_s = store_bounds(session.environ)
    backfill = ShardBackfill(
        session.backends.firestore(),
        shards,
        batch_size=args.batch_size,
        bounds=CallBounds(timeout_s),
        database=session.backends.database,
        by=session.operator,
        clock=session.clock,
    )
    progress = session.progress(
        "backfilling shards" if args.apply else "checking shards", backfill.total()
    )
    where: list[Position] = []

    def advanced(counts: BackfillCounts, position: Position) -> None:
        progress.advance(counts.scanned - progress.done)
        where[:] = [position]

    try:
        counts = backfill.run(apply=args.apply, resume=resume, progress=advanced)
    except (JobsError, KeyboardInterrupt):
        progress.finish()
        if where:
            again = _again(shards, args, where[0])
            session.stderr.write(f"jobsctl: stopped after {where[0].token()}; resume: {again}\n")
        raise
    progress.finish()
    return _report(counts, shards, args.apply)


def _shards(session: Session, flag: int | None) -> int:
    if flag is None:
        text = session.env(SHARDS)
        if not text:
            raise UsageError(
                f"pass --shards N (the shard count the services will run with) or set {SHARDS}"
            )
        try:
            flag = int(text)
        except ValueError as exc:
            raise UsageError(f"{SHARDS}={text!r} is not an integer") from exc
        source = SHARDS
    else:
        source = "--shards"
    if not 1 <= flag <= MAX_SHARDS:
        raise UsageError(f"{source} must be from 1 to {MAX_SHARDS}, not {flag}")
    return flag


def _again(shards: int, args: argparse.Namespace, position: Position) -> str:
    apply = " --apply" if args.apply else ""
    return f"jobsctl backfill-shards --shards {shards}{apply} --resume {position.token()}"


def _report(counts: BackfillCounts, shards: int, applied: bool) -> Report:
    verb = "updated" if applied else "to update"
    text = fields(
        [
            ("shards", f"{shards} (shard = shard_of(job ID, {shards}))"),
            ("scanned", counts.scanned),
            (verb, counts.updated),
            ("already right", counts.already_right),
            ("changed meanwhile", counts.changed_meanwhile),
            ("gone meanwhile", counts.gone),
        ]
    )
    if applied:
        text += f"\n(wrote {counts.updated:,} shard(s); a dry run now should show 0 to update)"
        text += (
            f"\nrecorded the shard layout {shards} in the control document: a scan with "
            f"JOBS_SHARDS={shards} stops reporting a layout mismatch"
        )
    else:
        text += f"\n(dry run: {counts.updated:,} would be updated; add --apply to write them)"
    data = {
        "applied": applied,
        "shards": shards,
        "scanned": counts.scanned,
        "updated": counts.updated,
        "already_right": counts.already_right,
        "changed_meanwhile": counts.changed_meanwhile,
        "gone": counts.gone,
        "by_state": counts.by_state,
        "layout_recorded": counts.layout.shards if counts.layout is not None else None,
    }
    return Report(data=data, text=text)
