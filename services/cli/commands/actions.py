"""`jobsctl actions`: the action catalogue with each action's pending jobs, and `jobsctl actions
check`, the pre-deploy check that a worker's catalogue leaves no pending job without its action.

The catalogue is this process's (the built-in actions and the installed plug-ins',
services/jobs/catalogue.py). Pending means not terminal: deferred, claimed, enqueued or
running. Counting costs one count aggregation per action (1 read, plus 1 per 1,000 of its
pending jobs), never a read of the jobs themselves.
"""

from __future__ import annotations

import argparse
from typing import Any

from services.cli.errors import ExitCode, UsageError
from services.cli.output import Report, table
from services.cli.session import Session


def register(commands: Any, common: argparse.ArgumentParser) -> None:
    p = commands.add_parser(
        "actions",
        parents=[common],
        help="list the action catalogue with each action's pending jobs; `check` before a deploy",
        description="List every action this installation knows (built in, or from an installed "
        "distribution's entry point in the group deferred_jobs.actions) with its params, its "
        "retry policy, its budget and how many of its jobs are pending (deferred, claimed, "
        "enqueued or running). `jobsctl actions check --worker-actions a,b` exits 1 naming "
        "every action with pending jobs that the given worker catalogue lacks: run it before "
        "deploying a worker (such jobs would wait, never fail, until a worker knows them).",
    )
    sub = p.add_subparsers(dest="actions_command", metavar="SUBCOMMAND")
    check = sub.add_parser(
        "check",
        parents=[common],
        help="exit 1 if pending jobs need an action the given worker catalogue lacks",
        description="Count the pending jobs of every action of this catalogue and of "
        "--also; exit 1 naming those the worker catalogue (--worker-actions, or a file of one "
        "action name per line with --worker-catalogue) lacks, 0 when it has them all.",
    )
    given = check.add_mutually_exclusive_group(required=True)
    given.add_argument(
        "--worker-actions",
        metavar="A,B",
        help="the action names the worker to be deployed knows, comma-separated",
    )
    given.add_argument(
        "--worker-catalogue",
        metavar="FILE",
        help="a file listing them, one per line (`jobsctl actions --names` writes one)",
    )
    check.add_argument(
        "--also",
        metavar="A,B",
        default="",
        help="more action names to check (jobs scheduled by producers with other plug-ins)",
    )
    check.set_defaults(handler=actions_check)
    p.add_argument(
        "--names", action="store_true", help="print only the names, one per line (no counts)"
    )
    p.set_defaults(handler=actions_list)


def actions_list(session: Session, args: argparse.Namespace) -> Report:
    catalogue = session.catalogue
    if args.names:
        names = catalogue.names()
        return Report(data={"actions": names}, text="\n".join(names))
    pending = session.store().pending_by_action(catalogue.names())
    rows = []
    data = []
    for action in catalogue.actions():
        policy = action.policy
        retry = (
            f"{policy.long_retry_delay} after {policy.retry_later_after_attempts} deliveries"
            if policy
            else "the worker's"
        )
        budget = f"{action.budget.per_second:g}/s" if action.budget else "-"
        params = action.params.summary() if action.params else "any JSON map"
        source = catalogue.source_of(action.name)
        rows.append([action.name, f"{pending[action.name]:,}", budget, retry, params, source])
        data.append(
            {
                "name": action.name,
                "pending": pending[action.name],
                "budget_per_second": action.budget.per_second if action.budget else None,
                "params": params,
                "retry": retry,
                "source": source,
                "description": action.description,
            }
        )
    text = table(["action", "pending", "budget", "retry", "params", "from"], rows)
    return Report(data={"actions": data}, text=text)


def actions_check(session: Session, args: argparse.Namespace) -> Report:
    worker = set(_worker_actions(args))
    if not worker:
        raise UsageError("the worker catalogue names no action")
    names = list(dict.fromkeys([*session.catalogue.names(), *_names(args.also)]))
    pending = session.store().pending_by_action(names)
    missing = {name: count for name, count in pending.items() if count and name not in worker}
    if missing:
        lines = [f"{name}: {count:,} pending job(s)" for name, count in missing.items()]
        text = (
            "the worker catalogue lacks actions with pending jobs (they would wait, "
            "counted as unknown_action, until a worker knows them):\n  " + "\n  ".join(lines)
        )
        return Report(
            data={"ok": False, "missing": missing, "pending": pending},
            text=text,
            exit_code=ExitCode.REFUSED,
        )
    return Report(
        data={"ok": True, "missing": {}, "pending": pending},
        text=f"ok: the worker knows every action with pending jobs ({len(names)} checked)",
    )


def _worker_actions(args: argparse.Namespace) -> list[str]:
    if args.worker_actions is not None:
        return _names(args.worker_actions)
    try:
        with open(args.worker_catalogue, encoding="utf-8") as handle:
            return [line.strip() for line in handle if line.strip()]
    except OSError as exc:
        raise UsageError(f"--worker-catalogue: {exc}") from exc


def _names(text: str) -> list[str]:
    return [name.strip() for name in text.split(",") if name.strip()]
