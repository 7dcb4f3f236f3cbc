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
from typing import NoReturn

from services.cli.backends import FIRESTORE_DATABASE, OPERATOR
from services.cli.commands import (
    actions,
    backlog,
    bulk,
    control,
    deadletter,
    forecast,
    job,
    runs,
    shards,
    watch,
)
from services.cli.errors import ExitCode
from services.cli.session import Session, run_command, write_error
from services.edge.settings import PROJECT
from services.jobs.catalogue import Catalogue, load_catalogue
from services.jobs.deployment import Deployment
from services.jobs.errors import CatalogueError
from services.jobs.http_targets import TargetsError

EPILOG = """\
exit codes: 0 done; 1 refused (not found, terminal, lost race, conflict); 2 usage or
validation; 3 backend unavailable (Firestore/Pub/Sub unreachable, credentials, permission);
4 the project looks uninitialised (stats: no control document and no job in it)

repeating a command whose outcome already holds is a no-op that exits 0 and says "already"
(schedule the same decision, cancel a cancelled job, pause when paused, resume when running);
a command on something that does not exist, or whose outcome can no longer happen, exits 1.
with --json, errors are JSON on stderr: {"error": MESSAGE, "exit_code": CODE}.

environment: JOBS_PROJECT (or --project), JOBS_FIRESTORE_DATABASE, FIRESTORE_EMULATOR_HOST,
PUBSUB_EMULATOR_HOST, JOBS_TOPIC and JOBS_DEAD_LETTER_SUBSCRIPTION (dead-letters),
JOBS_OPERATOR (who you are in audit trails; default: your login name), JOBS_SHARDS (the
deployment's shard count, as the services have it: list, stats and reclaim query each shard)
"""

TIME_FLAGS = frozenset({"--due", "--due-before", "--claimed-before"})
_PAST = re.compile(r"-\d")


class ArgumentError(Exception):
    """A command line argparse refused (raised instead of exiting, so --json can shape it)."""

    def __init__(self, message: str, usage: str) -> None:
        super().__init__(message)
        self.usage = usage


class Parser(argparse.ArgumentParser):
    """argparse with usage errors raised as ArgumentError; sub-commands inherit the class."""

    def error(self, message: str) -> NoReturn:
        raise ArgumentError(f"{self.prog}: {message}", self.format_usage())


def build_parser(catalogue: Catalogue | None = None) -> argparse.ArgumentParser:
    """The parser; `catalogue` (default: loaded) names the actions in `schedule`'s help."""
    catalogue = load_catalogue() if catalogue is None else catalogue
    common = Parser(add_help=False)
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
    parser = Parser(
        prog="jobsctl",
        description="Operate Deferred Jobs: schedule, inspect and steer jobs; plan a catch-up.",
        epilog=EPILOG,
        formatter_class=argparse.RawDescriptionHelpFormatter,
        parents=[common],
    )
    commands = parser.add_subparsers(dest="command", metavar="COMMAND", required=True)
    job.register(commands, common, catalogue)
    for module in (backlog, control, runs, deadletter, watch, shards, actions, forecast, bulk):
        module.register(commands, common)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    """Run one command; returns the exit code (the console script exits with it)."""
    try:
        # JOBS_HTTP_TARGETS: an http.request job must name one of them, as the API checks.
        catalogue = load_catalogue(deployment=Deployment.from_env(os.environ))
    except CatalogueError as exc:
        # A broken or conflicting plug-in: nothing may run with a catalogue that lies.
        sys.stderr.write(f"jobsctl: action catalogue: {exc}\n")
        return ExitCode.USAGE
    except TargetsError as exc:
        sys.stderr.write(f"jobsctl: {exc}\n")
        return ExitCode.USAGE
    parser = build_parser(catalogue)
    tokens = _attach_past_times(sys.argv[1:] if argv is None else argv)
    try:
        args = parser.parse_args(tokens)
    except SystemExit as exc:  # argparse: --help (0)
        return int(exc.code) if isinstance(exc.code, int) else ExitCode.USAGE
    except ArgumentError as exc:
        if "--json" in tokens:
            write_error(sys.stderr, str(exc), ExitCode.USAGE)
        else:
            sys.stderr.write(f"{exc.usage}{exc}\n")
        return ExitCode.USAGE
    environ = dict(os.environ)
    session = Session(
        project_flag=getattr(args, "project", None),
        environ=environ,
        operator=environ.get(OPERATOR) or _login_name(),
        stdout=sys.stdout,
        stderr=sys.stderr,
        as_json=getattr(args, "json", False),
        database_flag=getattr(args, "database", None),
        catalogue=catalogue,
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
