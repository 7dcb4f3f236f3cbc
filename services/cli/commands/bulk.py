"""`jobsctl bulk cancel|reschedule|replay`: an action over a filter, as the console runs it.

Without --apply it previews: the exact count the filter matches (a count aggregation when the
query alone decides). With --apply it runs the operation in batches over exactly the jobs
that preview counted (services/jobs/bulk.py: the pages are read at the preview's read time),
each job changed by its own single-job transaction with the operator (JOBS_OPERATOR) in its
history; above --confirm-over jobs it needs --confirm COUNT, the count typed back. SIGINT or
SIGTERM stops it between two jobs; a harder kill leaves every job either changed or as it
was, never half-written (one transaction each). Progress goes to stderr, one line a batch.
"""

from __future__ import annotations

import argparse
import contextlib
import signal
import time
from collections.abc import Iterator
from types import FrameType
from typing import Any

from services.cli.output import Report, fields
from services.cli.session import Session
from services.jobs.bulk import (
    DEFAULT_BATCH,
    DEFAULT_CONFIRM_OVER,
    BulkKind,
    Change,
    JobFilter,
    Progress,
    check_preview,
    examples,
    operation_id,
    run_batch,
)


def register(commands: Any, common: argparse.ArgumentParser) -> None:
    p = commands.add_parser(
        "bulk",
        parents=[common],
        help="cancel, reschedule or replay every job a filter matches (preview first)",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    p.add_argument("kind", choices=[k.value for k in BulkKind], help="what to do to each job")
    p.add_argument("--state", required=True, help="the jobs' state (required)")
    p.add_argument("--action", default="", help="only this action")
    p.add_argument("--subject-prefix", default="", help="only subjects starting with this")
    p.add_argument("--due-from", default="", help="due at or after (ISO 8601 with offset)")
    p.add_argument("--due-before", default="", help="due before (ISO 8601 with offset)")
    p.add_argument("--producer", default="", help="only jobs this producer scheduled")
    p.add_argument("--reason", default="", help="written into each job's history (required)")
    p.add_argument("--to", default="", help="reschedule: the new due time (ISO 8601)")
    p.add_argument("--by", default="", dest="offset", help="reschedule: move by (+2h, -30m)")
    p.add_argument("--batch", type=int, default=DEFAULT_BATCH, help="jobs per batch")
    p.add_argument("--apply", action="store_true", help="run it (default: preview only)")
    p.add_argument("--confirm", default="", help="the previewed count, typed back")
    p.add_argument(
        "--confirm-over",
        type=int,
        default=DEFAULT_CONFIRM_OVER,
        help=f"above this many jobs --confirm is needed (default {DEFAULT_CONFIRM_OVER})",
    )
    p.set_defaults(handler=bulk)


def bulk(session: Session, args: argparse.Namespace) -> Report:
    filter_fields = {
        "state": args.state,
        "action": args.action,
        "subject_prefix": args.subject_prefix,
        "due_from": args.due_from,
        "due_before": args.due_before,
        "producer": args.producer,
    }
    job_filter = JobFilter.parse(filter_fields)
    # A preview writes nothing, so it needs no reason; --apply does (each job's history).
    reason = args.reason if args.apply else (args.reason or "preview")
    change = Change.parse(args.kind, reason, args.to, args.offset)
    change.require_state(job_filter.state)
    store = session.store()
    count, read_time = store.count_matching(job_filter)
    preview = {"filter": job_filter.as_fields(), "change": change.describe(), "count": count}
    if not args.apply:
        text = fields(
            [
                ("filter", job_filter.describe()),
                ("would", change.describe()),
                ("jobs", f"{count:,}"),
            ]
        )
        return Report(preview, text + "\nrun again with --apply to act on them")
    check_preview(count, args.confirm, args.confirm_over)
    by = f"jobsctl:{session.operator}"
    operation = operation_id(by, read_time, job_filter.as_fields(), change)
    progress = Progress(count)
    stop = _Stop()
    started = time.monotonic()
    cursor = None
    with stop.installed():
        while True:
            batch = run_batch(
                store,
                job_filter,
                change,
                by=by,
                operation=operation,
                read_time=read_time,
                cursor=cursor,
                limit=args.batch,
                now=session.now(),
                stop=stop,
            )
            progress.add(batch)
            session.stderr.write(
                f"batch {progress.batches}: {progress.handled:,}/{count:,} "
                f"({progress.changed:,} changed, {progress.skipped:,} skipped)\n"
            )
            if batch.done or batch.stopped:
                break
            cursor = batch.next_cursor
    seconds = time.monotonic() - started
    result = {
        **preview,
        "operation": operation,
        "changed": progress.changed,
        "skipped": progress.skipped,
        "batches": progress.batches,
        "stopped": stop.asked,
        "seconds": round(seconds, 2),
        "skipped_examples": [list(e) for e in progress.skipped_examples],
    }
    text = fields(
        [
            ("operation", operation),
            ("changed", f"{progress.changed:,} of {count:,}"),
            ("skipped", f"{progress.skipped:,} {examples(progress.skipped_examples)}".strip()),
            ("batches", progress.batches),
            ("stopped", "yes: the rest are untouched" if stop.asked else "no"),
            ("took", f"{seconds:.1f} s"),
        ]
    )
    return Report(result, text, exit_code=1 if stop.asked else 0)


class _Stop:
    """SIGINT / SIGTERM ask the loop to stop before its next job."""

    def __init__(self) -> None:
        self.asked = False

    def __call__(self) -> bool:
        return self.asked

    def _ask(self, signum: int, frame: FrameType | None) -> None:
        self.asked = True

    @contextlib.contextmanager
    def installed(self) -> Iterator[None]:
        previous = {s: signal.signal(s, self._ask) for s in (signal.SIGINT, signal.SIGTERM)}
        try:
            yield
        finally:
            for s, handler in previous.items():
                signal.signal(s, handler)
