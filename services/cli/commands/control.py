"""Commands on the scan's control document: pause, resume, and the catch-up settings."""

from __future__ import annotations

import argparse
from typing import Any

from services.cli import deployment
from services.cli.errors import UsageError
from services.cli.output import Report, fields, table
from services.cli.session import Session
from services.cli.timespec import duration
from services.edge.scan_deployment import SCAN_MAX_PER_RUN
from services.jobs.control import MAX_CLAIM_BUDGET, Control
from services.jobs.errors import ValidationError
from services.jobs.plan import budget_arithmetic, format_duration
from services.jobs.ramp import DEFAULT_START_RATE, OPS_PER_JOB, Ramp


def register(commands: Any, common: argparse.ArgumentParser) -> None:
    p = commands.add_parser(
        "pause",
        parents=[common],
        help="stop the scan claiming work (it still measures)",
        description="Pause the scan: runs still measure and report, but claim nothing. "
        "Deferred records are untouched; queued work keeps flowing to the worker.",
    )
    p.add_argument("--reason", required=True, help="why (shown by stats and kept in history)")
    p.set_defaults(handler=pause)

    p = commands.add_parser(
        "resume",
        parents=[common],
        help="let the scan claim work again",
        description="Resume the scan. Set a conservative catch-up rate first (control set), "
        "see jobsctl plan. It prints the per-run budget the scan will use, with its "
        "arithmetic: min(max per run, catch-up rate x scan interval).",
    )
    p.add_argument("--reason", required=True, help="why (kept in the control history)")
    p.add_argument(
        "--ramp",
        action="store_true",
        help="climb to the catch-up rate by Firestore's 500/50/5 rule: start at --ramp-start, "
        "+50%% every 5 min (a resumed backlog is new traffic); shown in `jobsctl watch`",
    )
    p.add_argument(
        "--ramp-start",
        type=float,
        default=float(DEFAULT_START_RATE),
        metavar="RATE",
        help=f"the ramp's first rate (default {DEFAULT_START_RATE}: 500 ops/s at "
        f"{OPS_PER_JOB} Firestore operations per job)",
    )
    p.set_defaults(handler=resume)

    p = commands.add_parser("control", parents=[common], help="show or change scan settings")
    actions = p.add_subparsers(dest="control_command", metavar="ACTION", required=True)
    show = actions.add_parser("show", parents=[common], help="current settings and history")
    show.set_defaults(handler=show_control)
    change = actions.add_parser(
        "set",
        parents=[common],
        help="change the catch-up rate, per-run budget or claim timeout",
    )
    change.add_argument(
        "--catch-up-rate",
        type=float,
        metavar="RATE",
        help="jobs per second the backlog may drain at (above 0)",
    )
    change.add_argument(
        "--max-per-run",
        type=_per_run_budget,
        metavar="JOBS",
        help=f"per-run claim budget, 1 to {MAX_CLAIM_BUDGET:,} (the deployment may cap it), "
        f"or {DEPLOYMENT_CAP!r}: no budget of the operator's, the deployment's cap "
        f"({SCAN_MAX_PER_RUN}) alone (the default)",
    )
    change.add_argument(
        "--claim-timeout",
        metavar="DURATION",
        help="claims older than this are taken back, e.g. 10m (at most 30d)",
    )
    change.add_argument("--reason", required=True, help="why (kept in the control history)")
    change.set_defaults(handler=set_control)


# `--max-per-run deployment`: drop the operator's budget, leaving the deployment's cap.
DEPLOYMENT_CAP = "deployment"


def _per_run_budget(text: str) -> int | str:
    """An integer, or DEPLOYMENT_CAP (kept as text: argparse's None means "not given")."""
    if text.strip().lower() == DEPLOYMENT_CAP:
        return DEPLOYMENT_CAP
    try:
        return int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(
            f"not a whole number of jobs or {DEPLOYMENT_CAP!r}: {text!r}"
        ) from None


def pause(session: Session, args: argparse.Namespace) -> Report:
    current = session.store().get_control()
    if current.paused:
        # The rule for every command: a repeat whose outcome already holds is a no-op.
        return _report(current, "already paused (unchanged)", changed=False)
    control = session.store().update_control(session.operator, args.reason, paused=True)
    return _report(control, "paused: the scan claims nothing until `jobsctl resume`")


def resume(session: Session, args: argparse.Namespace) -> Report:
    current = session.store().get_control()
    ramp = Ramp(started_at=session.now(), start_rate=args.ramp_start) if args.ramp else None
    if ramp is not None and ramp.problems():
        raise UsageError("--ramp-start: " + "; ".join(ramp.problems()))
    if not current.paused and ramp is None:
        return _report(
            current, f"already running (unchanged): {_budget_text(session, current)}", False
        )
    # A resume without --ramp ends any earlier ramp: the set rate applies at once.
    changes: dict[str, Any] = {"paused": False}
    if ramp is not None or current.ramp is not None:
        changes["ramp"] = ramp
    control = session.store().update_control(session.operator, args.reason, **changes)
    headline = f"resumed: {_budget_text(session, control)}"
    if ramp is not None:
        reaches = ramp.reaches_at(control.catch_up_rate)
        headline += (
            f"\nramp: {ramp.rate_at(ramp.started_at, control.catch_up_rate):g}/s now, x1.5 "
            f"every 5 min, at the set {control.catch_up_rate:g}/s from {reaches:%H:%M:%SZ} "
            "(Firestore's 500/50/5 rule; `jobsctl watch` shows it)"
        )
    return _report(control, headline)


def _claim_budget_text(control: Control) -> str:
    if control.claim_budget is None:
        return f"the deployment's cap ({SCAN_MAX_PER_RUN})"
    return f"{control.claim_budget:,}"


def _budget_text(session: Session, control: Control) -> str:
    budget = deployment.effective_budget(session, control)
    return budget_arithmetic(budget.limit, budget.cap, control.catch_up_rate, budget.interval_s)


def show_control(session: Session, args: argparse.Namespace) -> Report:
    control = session.store().get_control()
    history = table(
        ["at", "by", "changes", "reason"],
        [[c.at, c.by, _changes_text(c.changes), c.reason] for c in control.history],
    )
    headline = f"per run: {_budget_text(session, control)}"
    return _report(control, headline, changed=False, extra=f"\n\nhistory:\n{history}")


def set_control(session: Session, args: argparse.Namespace) -> Report:
    changes: dict[str, Any] = {}
    if args.catch_up_rate is not None:
        changes["catch_up_rate"] = args.catch_up_rate
    if args.max_per_run is not None:
        changes["claim_budget"] = None if args.max_per_run == DEPLOYMENT_CAP else args.max_per_run
    if args.claim_timeout is not None:
        changes["claim_timeout"] = duration("--claim-timeout", args.claim_timeout)
    if not changes:
        raise UsageError(
            "nothing to change: pass --catch-up-rate, --max-per-run or --claim-timeout"
        )
    try:
        control = session.store().update_control(session.operator, args.reason, **changes)
    except ValidationError as exc:
        raise ValidationError([_flag_names(p) for p in exc.problems]) from exc
    return _report(control, f"updated: {_budget_text(session, control)}")


# The control document's field names as the operator typed them.
_FLAGS = {
    "claim_budget": "--max-per-run",
    "catch_up_rate": "--catch-up-rate",
    "claim_timeout": "--claim-timeout",
}


def _flag_names(problem: str) -> str:
    for name, flag in _FLAGS.items():
        problem = problem.replace(name, flag)
    return problem


def control_document(control: Control) -> dict[str, Any]:
    return {
        "paused": control.paused,
        "reason": control.reason,
        "max_per_run": control.claim_budget,
        "catch_up_rate": control.catch_up_rate,
        "claim_timeout_s": control.claim_timeout.total_seconds(),
        "ramp": control.ramp.to_document() if control.ramp else None,
        "changed_by": control.changed_by,
        "changed_at": control.changed_at,
        "history": [
            {"at": c.at, "by": c.by, "reason": c.reason, "changes": dict(c.changes)}
            for c in control.history
        ],
    }


def _report(control: Control, headline: str, changed: bool = True, extra: str = "") -> Report:
    block = fields(
        [
            ("paused", control.paused),
            ("reason", control.reason),
            ("catch-up rate", f"{control.catch_up_rate:g} jobs/s"),
            ("max per run", _claim_budget_text(control)),
            ("claim timeout", format_duration(control.claim_timeout.total_seconds())),
            (
                "changed",
                f"{control.changed_at:%Y-%m-%d %H:%M:%SZ} by {control.changed_by}"
                if control.changed_at
                else None,
            ),
        ]
    )
    text = f"{headline}\n{block}" if headline else block
    return Report(data={**control_document(control), "changed": changed}, text=text + extra)


def _changes_text(changes: Any) -> str:
    return ", ".join(f"{k}={v}" for k, v in sorted(dict(changes).items()))
