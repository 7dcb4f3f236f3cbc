"""Commands on single jobs and lists of them: schedule, cancel, reschedule, show, list."""

from __future__ import annotations

import argparse
import json
from typing import Any

from services.cli.errors import Refused, UsageError
from services.cli.output import Report, fields, table
from services.cli.session import Session
from services.cli.timespec import parse_time
from services.jobs.model import (
    DEFAULT_MAX_ATTEMPTS,
    Job,
    NewJob,
    derive_job_id,
    document_id_problems,
)
from services.jobs.state import State

PAGE = 50  # one page on screen
ALL_PAGE = 500  # the store's largest page, for --all
DEFAULT_ACTION = "media.delete_source"


def register(commands: Any, common: argparse.ArgumentParser) -> None:
    p = commands.add_parser(
        "schedule",
        parents=[common],
        help="schedule a job (idempotent by job ID)",
        description="Schedule a deferred job. The same job ID with the same content is a no-op; "
        "with different content it is refused (exit 1).",
    )
    ident = p.add_mutually_exclusive_group(required=True)
    ident.add_argument("--job-id", help="the job ID (document ID) to use")
    ident.add_argument(
        "--decision", help="derive the job ID from action + subject + this decision ID"
    )
    p.add_argument("--action", default=DEFAULT_ACTION, help=f"default {DEFAULT_ACTION}")
    p.add_argument("--subject", required=True, help="what the action acts on (a media ID)")
    p.add_argument(
        "--param",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="a parameter; VALUE is parsed as JSON when it can be (repeatable)",
    )
    p.add_argument("--due", default="now", help="when: now, +30d, ISO 8601 (default now)")
    p.add_argument("--max-attempts", type=int, default=DEFAULT_MAX_ATTEMPTS)
    p.set_defaults(handler=schedule)

    p = commands.add_parser("cancel", parents=[common], help="cancel a job")
    p.add_argument("job_id")
    p.add_argument("--reason", required=True, help="why (kept in the job's history)")
    p.set_defaults(handler=cancel)

    p = commands.add_parser("reschedule", parents=[common], help="move a deferred job's due time")
    p.add_argument("job_id")
    p.add_argument("--due", required=True, help="new due time: now, +2h, ISO 8601")
    p.add_argument("--reason", required=True, help="why (kept in the job's history)")
    p.set_defaults(handler=reschedule)

    p = commands.add_parser("show", parents=[common], help="one job with its history")
    p.add_argument("job_id")
    p.set_defaults(handler=show)

    p = commands.add_parser(
        "list",
        parents=[common],
        help="list jobs in time order",
        description="List jobs ordered by due time (by claim time with --claimed-before). "
        "At most one of --due-before, --overdue, --claimed-before.",
    )
    p.add_argument("--state", choices=[s.value for s in State])
    when = p.add_mutually_exclusive_group()
    when.add_argument("--due-before", metavar="TIME", help="due_at before TIME")
    when.add_argument("--overdue", action="store_true", help="deferred and due now or earlier")
    when.add_argument("--claimed-before", metavar="TIME", help="claimed before TIME (-10m)")
    p.add_argument(
        "--limit", type=int, help=f"page size, 1-500 (default {PAGE}; {ALL_PAGE} with --all)"
    )
    pages = p.add_mutually_exclusive_group()
    pages.add_argument("--cursor", help="continue from a previous page's next cursor")
    pages.add_argument("--all", action="store_true", help="follow every page (progress on stderr)")
    p.set_defaults(handler=list_jobs)


def schedule(session: Session, args: argparse.Namespace) -> Report:
    params = dict(_param(text) for text in args.param)
    if args.decision == "":
        raise UsageError("decision must be a non-empty string")
    job_id = (
        args.job_id
        if args.job_id is not None
        else derive_job_id(args.action, args.subject, args.decision)
    )
    new = NewJob(
        job_id=job_id,
        action=args.action,
        subject=args.subject,
        due_at=parse_time(args.due, session.now()),
        params=params,
        max_attempts=args.max_attempts,
    )
    result = session.store().schedule(new, by=f"jobsctl:{session.operator}")
    verb = "scheduled" if result.created else "already scheduled (unchanged)"
    return Report(
        data={"created": result.created, "job": job_document(result.job)},
        text=f"{verb}: {result.job.job_id}\n{summary(result.job)}",
    )


def cancel(session: Session, args: argparse.Namespace) -> Report:
    _check_job_id(args.job_id)
    job = session.store().cancel(args.job_id, reason=args.reason, by=session.operator)
    if job.state is State.RUNNING:
        text = (
            f"cancel requested: {job.job_id} is running; its worker stops at its next check "
            "between units of work and the job ends cancelled (work already done stays done); "
            "if the action finishes first, the job ends completed"
        )
    else:
        text = f"cancelled: {job.job_id}"
    return Report(data={"job": job_document(job)}, text=text)


def reschedule(session: Session, args: argparse.Namespace) -> Report:
    _check_job_id(args.job_id)
    due_at = parse_time(args.due, session.now())
    job = session.store().reschedule(
        args.job_id, due_at=due_at, reason=args.reason, by=session.operator
    )
    return Report(
        data={"job": job_document(job)}, text=f"rescheduled: {job.job_id}\n{summary(job)}"
    )


def show(session: Session, args: argparse.Namespace) -> Report:
    _check_job_id(args.job_id)
    job = session.store().get(args.job_id)
    if job is None:
        raise Refused(f"job {args.job_id!r} not found")
    history = table(
        ["at", "from", "to", "by", "reason"],
        [[h.at, h.from_state, h.to_state, h.by, h.reason] for h in job.history],
    )
    return Report(data={"job": job_document(job)}, text=f"{details(job)}\n\nhistory:\n{history}")


def _check_job_id(job_id: str) -> None:
    # No job can have an ID Firestore refuses; without this check the client library raises
    # a ValueError traceback ('a/b') or the backend a 400 that reads as "unavailable" ('').
    problems = document_id_problems(job_id)
    if problems:
        raise UsageError("; ".join(problems))


def list_jobs(session: Session, args: argparse.Namespace) -> Report:
    now = session.now()
    filters: dict[str, Any] = {
        "state": State(args.state) if args.state else None,
        "due_before": parse_time(args.due_before, now) if args.due_before else None,
        "overdue_at": now if args.overdue else None,
        "claimed_before": parse_time(args.claimed_before, now) if args.claimed_before else None,
    }
    store = session.store()
    if not args.all:
        page = store.list_jobs(
            **filters, limit=PAGE if args.limit is None else args.limit, cursor=args.cursor
        )
        jobs, next_cursor = list(page.jobs), page.next_cursor
    else:
        jobs, next_cursor = [], None
        progress = session.progress("listing jobs")
        cursor = None
        while True:
            page = store.list_jobs(
                **filters, limit=ALL_PAGE if args.limit is None else args.limit, cursor=cursor
            )
            jobs.extend(page.jobs)
            progress.advance(len(page.jobs))
            cursor = page.next_cursor
            if cursor is None:
                break
        progress.finish()
    text = table(
        ["job_id", "state", "action", "subject", "due_at", "attempt", "updated_at"],
        [
            [j.job_id, j.state, j.action, j.subject, j.due_at, _attempts(j), j.updated_at]
            for j in jobs
        ],
    )
    text += f"\n({len(jobs):,} job{'s' if len(jobs) != 1 else ''})"
    if next_cursor:
        text += f"\nmore: jobsctl list ... --cursor {next_cursor}"
    return Report(
        data={"jobs": [job_document(j) for j in jobs], "next_cursor": next_cursor}, text=text
    )


def job_document(job: Job) -> dict[str, Any]:
    """The job as JSON-ready data: the stored document plus its ID."""
    return {"job_id": job.job_id, **job.to_document()}


def summary(job: Job) -> str:
    return fields(
        [
            ("state", job.state),
            ("action", job.action),
            ("subject", job.subject),
            ("due_at", job.due_at),
        ]
    )


def details(job: Job) -> str:
    pairs: list[tuple[str, object]] = [
        ("job_id", job.job_id),
        ("state", job.state),
        ("action", job.action),
        ("subject", job.subject),
        ("params", json.dumps(dict(job.params), sort_keys=True) if job.params else None),
        ("due_at", job.due_at),
        ("scheduled_due_at", job.scheduled_due_at),
        ("attempt", _attempts(job)),
        ("generation", job.generation),
        (
            "claimed",
            f"{job.claim.claimed_at:%Y-%m-%d %H:%M:%SZ} by {job.claim.run_id}"
            if job.claim
            else None,
        ),
        ("enqueued_at", job.enqueued_at),
        ("message_id", job.message_id),
        (
            "lease",
            f"{job.lease_owner} until {job.lease_until:%Y-%m-%d %H:%M:%SZ}"
            if job.lease_until
            else None,
        ),
        (
            "cancel_requested",
            f"{job.cancel_requested.by}: {job.cancel_requested.reason}"
            if job.cancel_requested
            else None,
        ),
        ("result", job.result.outcome if job.result else None),
        (
            "last_error",
            f"{job.last_error.code}: {job.last_error.message}" if job.last_error else None,
        ),
        ("created_at", job.created_at),
        ("updated_at", job.updated_at),
        ("expire_at", job.expire_at),
    ]
    return fields(pairs)


def _attempts(job: Job) -> str:
    return f"{job.attempt}/{job.max_attempts}"


def _param(text: str) -> tuple[str, Any]:
    key, sep, raw = text.partition("=")
    if not sep or not key:
        raise UsageError(f"--param {text!r} is not KEY=VALUE")
    try:
        return key, json.loads(raw)
    except json.JSONDecodeError:
        return key, raw
