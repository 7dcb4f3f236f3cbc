"""Commands on single jobs and lists of them: schedule, cancel, reschedule, show, list."""

from __future__ import annotations

import argparse
import json
from datetime import datetime
from typing import Any

from services.cli import jobfile
from services.cli.errors import ExitCode, Refused, UsageError
from services.cli.output import Report, fields, table, timestamp_text
from services.cli.session import Session
from services.cli.timespec import parse_time
from services.jobs.catalogue import Catalogue, built_in
from services.jobs.errors import AlreadyTerminal
from services.jobs.ids import derive_job_id, document_id_problems
from services.jobs.model import NewJob
from services.jobs.ramp import RULE_START_OPS_PER_S
from services.jobs.record import DEFAULT_MAX_ATTEMPTS, Job
from services.jobs.results import ScheduleResult
from services.jobs.state import State
from services.jobs.write_pacer import DEFAULT_RANGE_RATE_PER_S

PAGE = 50  # one page on screen
ALL_PAGE = 500  # the store's largest page, for --all
CREATED, PRESENT, REFUSED = "created", "already present", "refused"
OUTCOMES = (CREATED, PRESENT, REFUSED)


def register(
    commands: Any, common: argparse.ArgumentParser, catalogue: Catalogue | None = None
) -> None:
    catalogue = built_in() if catalogue is None else catalogue
    p = commands.add_parser(
        "schedule",
        parents=[common],
        help="schedule a job, or every job of a JSON-lines file (idempotent)",
        description="Schedule a deferred job. The same decision again (job ID, action, "
        "subject, params, max attempts; not the due time) is a no-op that shows the existing "
        "job; other content under the same job ID is refused (exit 1), naming the field. "
        "--from FILE (or - for stdin) schedules one job per JSON line, in batches: each "
        'line an object like {"decision": "d-1", "subject": "media-1", "params": {"object": '
        '"media-1/source.mp4"}, "due": "+30d"} (keys: job_id or decision; subject; action, '
        "params, due, max_attempts, idempotency_key optional); it prints how many were "
        "created, already present and refused (with line numbers), and exits 1 if any line "
        "was refused. Re-running the same file is a no-op.",
    )
    ident = p.add_mutually_exclusive_group()
    ident.add_argument("--job-id", help="the job ID (document ID) to use")
    ident.add_argument(
        "--decision", help="derive the job ID from action + subject + this decision ID"
    )
    ident.add_argument(
        "--from",
        dest="from_file",
        metavar="FILE",
        help="schedule every job of this JSON-lines file (- reads stdin), paced within "
        f"Firestore's limits: at most {DEFAULT_RANGE_RATE_PER_S} writes/s per shard's index "
        f"range, starting at {RULE_START_OPS_PER_S:g}/s in all and +50%% every 5 minutes "
        "(docs/capacity.md, 'Bulk scheduling')",
    )
    p.add_argument(
        "--action",
        help=f"the side effect, one of the catalogue's ({_actions_help(catalogue)}); default "
        f"{catalogue.default()}; `jobsctl actions` lists them",
    )
    p.add_argument("--subject", help="what the action acts on (a media ID)")
    p.add_argument(
        "--param",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="a parameter (repeatable); VALUE is read as JSON when it parses (3, true, "
        '[...], {...}), else taken as a string; a VALUE starting with [ { or " that is not '
        "valid JSON is refused",
    )
    p.add_argument("--due", help="when: now, +30d, +1y, ISO 8601 (default now)")
    p.add_argument(
        "--max-attempts",
        type=int,
        help=f"long-retry cycles before the job fails (default {DEFAULT_MAX_ATTEMPTS})",
    )
    p.set_defaults(handler=schedule)

    p = commands.add_parser(
        "cancel",
        parents=[common],
        help="cancel a job (again: a no-op)",
        description="Cancel a job. A running one gets a cancel request the worker honours. "
        "Cancelling a cancelled job again changes nothing (exit 0); a completed or failed "
        "job is refused (exit 1).",
    )
    p.add_argument("job_id", help="the job's ID")
    p.add_argument("--reason", required=True, help="why (kept in the job's history)")
    p.set_defaults(handler=cancel)

    p = commands.add_parser("reschedule", parents=[common], help="move a deferred job's due time")
    p.add_argument("job_id", help="the job's ID (it must be deferred)")
    p.add_argument("--due", required=True, help="new due time: now, +2h, ISO 8601")
    p.add_argument("--reason", required=True, help="why (kept in the job's history)")
    p.set_defaults(handler=reschedule)

    p = commands.add_parser("show", parents=[common], help="one job with its history")
    p.add_argument("job_id", help="the job's ID")
    p.set_defaults(handler=show)

    p = commands.add_parser(
        "list",
        parents=[common],
        help="list jobs in time order",
        description="List jobs ordered by due time (by claim time with --claimed-before). "
        "At most one of --due-before, --overdue, --claimed-before.",
    )
    p.add_argument("--state", choices=[s.value for s in State], help="only jobs in this state")
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


def _actions_help(catalogue: Catalogue) -> str:
    """Each action with its params, for --action's help: `a.b (params: x (string), ...)`."""
    parts = []
    for action in catalogue.actions():
        params = action.params.summary() if action.params else "any JSON map"
        parts.append(f"{action.name} (params: {params})")
    return "; ".join(parts)


def schedule(session: Session, args: argparse.Namespace) -> Report:
    if args.from_file is not None:
        return schedule_file(session, args)
    if args.job_id is None and args.decision is None:
        raise UsageError("pass --job-id, --decision or --from")
    if args.subject is None:
        raise UsageError("--subject is required (unless --from)")
    params = dict(_param(text) for text in args.param)
    action = args.action or session.catalogue.default()
    if args.decision == "":
        raise UsageError("--decision must be a non-empty string")
    job_id = (
        args.job_id
        if args.job_id is not None
        else derive_job_id(action, args.subject, args.decision)
    )
    new = NewJob(
        job_id=job_id,
        action=action,
        subject=args.subject,
        due_at=parse_time(args.due or "now", session.now()),
        params=params,
        max_attempts=DEFAULT_MAX_ATTEMPTS if args.max_attempts is None else args.max_attempts,
    )
    result = session.store().schedule(new, by=f"jobsctl:{session.operator}")
    if result.created:
        verb = "scheduled"
    else:
        verb = "already scheduled (unchanged)"
        if _minute(result.job.scheduled_due_at) != _minute(new.due_at):
            verb += (
                f"; it keeps its due time {timestamp_text(result.job.due_at)} (the due time "
                "is not part of a decision; `jobsctl reschedule` moves it)"
            )
    return Report(
        data={"created": result.created, "job": job_document(result.job)},
        text=f"{verb}: {result.job.job_id}\n{summary(result.job)}",
    )


def schedule_file(session: Session, args: argparse.Namespace) -> Report:
    """`schedule --from FILE|-`: every line's job, in batches; a summary with line numbers."""
    given = {
        "--subject": args.subject,
        "--param": args.param,
        "--action": args.action,
        "--due": args.due,
        "--max-attempts": args.max_attempts,
    }
    flags = [flag for flag, value in given.items() if value not in (None, [])]
    if flags:
        raise UsageError(f"{' and '.join(flags)} cannot be combined with --from (use the file)")
    lines = jobfile.read_lines(
        _open_lines(session, args.from_file), session.now(), session.catalogue.default()
    )
    store = session.store()
    progress = session.progress("scheduling", len(lines))
    outcomes: list[tuple[jobfile.Line, str, str]] = []  # line, outcome, reason
    refused = [line for line in lines if line.job is None]
    outcomes.extend((line, REFUSED, line.refusal or "") for line in refused)
    progress.advance(len(refused))
    wanted = [line for line in lines if line.job is not None]
    # Paced per index range and along the 500/50/5 ramp (services/jobs/write_pacer.py): a
    # file of a million lines is new traffic to the jobs collection.
    batches = store.schedule_paced(
        (line.job for line in wanted if line.job is not None), by=f"jobsctl:{session.operator}"
    )
    done = 0
    for results in batches:
        for line, result in zip(wanted[done : done + len(results)], results, strict=True):
            if isinstance(result, ScheduleResult):
                outcomes.append((line, CREATED if result.created else PRESENT, ""))
            else:
                outcomes.append((line, REFUSED, str(result)))
        done += len(results)
        progress.advance(len(results))
    progress.finish()
    return _file_report(sorted(outcomes, key=lambda o: o[0].number), args.from_file)


def _file_report(outcomes: list[tuple[jobfile.Line, str, str]], source: str) -> Report:
    counts = {name: sum(1 for o in outcomes if o[1] == name) for name in OUTCOMES}
    refused = [
        {"line": line.number, "job_id": line.job_id, "reason": reason}
        for line, outcome, reason in outcomes
        if outcome == REFUSED
    ]
    where = "stdin" if source == "-" else source
    text = (
        f"{where}: {len(outcomes):,} job line(s): {counts[CREATED]:,} created, "
        f"{counts[PRESENT]:,} already present, {counts[REFUSED]:,} refused"
    )
    if refused:
        text += "\n" + table(
            ["line", "job_id", "refused because"],
            [[str(r["line"]), r["job_id"], r["reason"]] for r in refused],
        )
    data = {
        "lines": len(outcomes),
        "created": counts[CREATED],
        "already_present": counts[PRESENT],
        "refused": refused,
    }
    # Refusals lose nothing (every other line was scheduled): exit 1 says "look at them".
    return Report(data=data, text=text, exit_code=ExitCode.REFUSED if refused else ExitCode.OK)


def _open_lines(session: Session, source: str) -> list[str]:
    if source == "-":
        return session.stdin.read().splitlines()
    try:
        with open(source, encoding="utf-8") as handle:
            return handle.read().splitlines()
    except (OSError, UnicodeDecodeError) as exc:
        raise UsageError(f"--from {source}: {getattr(exc, 'strerror', None) or exc}") from exc


def _minute(value: datetime) -> datetime:
    # `--due +30d` in a retry is a later instant for the same decision; only say so when the
    # asked-for time is visibly different.
    return value.replace(second=0, microsecond=0)


def cancel(session: Session, args: argparse.Namespace) -> Report:
    _check_job_id(args.job_id)
    try:
        job = session.store().cancel(args.job_id, reason=args.reason, by=session.operator)
    except AlreadyTerminal as exc:
        if exc.current is not State.CANCELLED:
            raise
        # The rule for every command: a repeat whose outcome already holds is a no-op.
        existing = session.store().get(args.job_id)
        data = {"job": job_document(existing) if existing else None, "changed": False}
        return Report(data=data, text=f"already cancelled (unchanged): {args.job_id}")
    if job.state is State.RUNNING:
        text = (
            f"cancel requested: {job.job_id} is running; its worker sees the request at its "
            "next heartbeat (up to a third of the lease from now) and stops after the unit of "
            "work in progress; the job then ends cancelled (work already done stays done); "
            "if the action finishes first, the job ends completed"
        )
    else:
        text = f"cancelled: {job.job_id}"
    return Report(data={"job": job_document(job), "changed": True}, text=text)


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
    except json.JSONDecodeError as exc:
        if raw.lstrip()[:1] in ("[", "{", '"'):
            # It was meant as JSON; a string stored instead fails only when the job runs.
            raise UsageError(f"--param {key}: {raw!r} is not valid JSON ({exc.msg})") from exc
        return key, raw
