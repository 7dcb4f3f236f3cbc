"""`jobsctl`: the operator CLI of Deferred Jobs. `main(argv)` is the console script.

Exit codes: 0 done; 1 refused (job not found or terminal, lost a race, conflicting schedule);
2 usage or validation error; 3 backend unavailable (Firestore or Pub/Sub unreachable, no
credentials, permission denied). Every command prints a table by default and JSON with --json.
"""

from __future__ import annotations

import argparse
import getpass
import os
import re
import sys
from collections.abc import Sequence

from services.cli.backends import FIRESTORE_DATABASE, OPERATOR
from services.cli.commands import backlog, control, deadletter, job, runs
from services.cli.errors import ExitCode
from services.cli.session import Session, run_command
from services.jobs.settings import PROJECT

EPILOG = """\
exit codes: 0 done; 1 refused (not found, terminal, lost race, conflict); 2 usage or
validation; 3 backend unavailable (Firestore/Pub/Sub unreachable, credentials, permission)

environment: JOBS_PROJECT (or --project), JOBS_FIRESTORE_DATABASE, FIRESTORE_EMULATOR_HOST,
PUBSUB_EMULATOR_HOST, JOBS_TOPIC and JOBS_DEAD_LETTER_SUBSCRIPTION (dead-letters),
JOBS_OPERATOR (who you are in audit trails; default: your login name)
"""

TIME_FLAGS = frozenset({"--due", "--due-before", "--claimed-before"})
_PAST = re.compile(r"-\d")


def build_parser() -> argparse.ArgumentParser:
    common = argparse.ArgumentParser(add_help=False)
    common.add_argument(
        "--json", action="store_true", default=argparse.SUPPRESS, help="print JSON on stdout"
    )
    common.add_argument(
        "--project", default=argparse.SUPPRESS, help=f"Google Cloud project ({PROJECT})"
    )
    common.add_argument(
        "--database",
        default=argparse.SUPPRESS,
        help=f"Firestore database ID ({FIRESTORE_DATABASE}, default (default))",
    )
    parser = argparse.ArgumentParser(
        prog="jobsctl",
        description="Operate Deferred Jobs: schedule, inspect and steer jobs; plan a catch-up.",
        epilog=EPILOG,
        formatter_class=argparse.RawDescriptionHelpFormatter,
        parents=[common],
    )
    commands = parser.add_subparsers(dest="command", metavar="COMMAND", required=True)
    for module in (job, backlog, control, runs, deadletter):
        module.register(commands, common)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    """Run one command; returns the exit code (the console script exits with it)."""
    parser = build_parser()
    try:
        args = parser.parse_args(_attach_past_times(sys.argv[1:] if argv is None else argv))
    except SystemExit as exc:  # argparse: --help (0) or a usage error (2)
        return int(exc.code) if isinstance(exc.code, int) else ExitCode.USAGE
    environ = dict(os.environ)
    session = Session(
        project_flag=getattr(args, "project", None),
        environ=environ,
        operator=environ.get(OPERATOR) or _login_name(),
        stdout=sys.stdout,
        stderr=sys.stderr,
        as_json=getattr(args, "json", False),
        database_flag=getattr(args, "database", None),
    )
    return run_command(session, args)


def _attach_past_times(argv: Sequence[str]) -> list[str]:
    """`--claimed-before -10m` as `--claimed-before=-10m`: argparse takes a value that starts
    with '-' (and is not a plain number) for an option, so the runbook's own examples failed."""
    joined: list[str] = []
    for token in argv:
        if joined and joined[-1] in TIME_FLAGS and _PAST.match(token):
            joined[-1] = f"{joined[-1]}={token}"
        else:
            joined.append(token)
    return joined


def _login_name() -> str:
    try:
        return getpass.getuser()
    except (KeyError, OSError):
        return "unknown"
