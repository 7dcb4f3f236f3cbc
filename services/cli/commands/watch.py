"""`jobsctl watch`: a live view of the backlog, the scan runs and the drain rate (see view.py)."""

from __future__ import annotations

import argparse
import json
import math
import time
from datetime import timedelta
from typing import Any

from rich.console import Console
from rich.live import Live

from services.cli import deployment
from services.cli.commands.backlog import claim_timeout
from services.cli.errors import UsageError
from services.cli.output import Report, to_json
from services.cli.session import Session
from services.cli.view import RECENT_RUNS, Snapshot, render
from services.edge.settings import SettingsError
from services.jobs.errors import StoreUnavailable
from services.store.runs import RunLogError, ScanRunLog

DEFAULT_EVERY_S = 2.0
MIN_EVERY_S = 0.5
# Width off a terminal (pipes, tests): wide enough that no table wraps.
PIPE_WIDTH = 120
# Retention only matters when writing; the CLI only reads.
_READ_ONLY_RETENTION = timedelta(days=1)


def register(commands: Any, common: argparse.ArgumentParser) -> None:
    p = commands.add_parser(
        "watch",
        parents=[common],
        help="a live view: states, backlog, scan runs, drain rate and ETA",
        description="Redraw, every --every seconds until Ctrl-C: job counts per state (all "
        "read at one Firestore read time), due now, oldest overdue, stuck claims, expired "
        "leases, stale enqueued and the jobs out of shard reach (from the newest scan run), "
        "the shard layout against JOBS_SHARDS, the per-run budget with its arithmetic, the "
        "set rate against the drain rate the last scan runs measured, the ETA of what is due, "
        "and the last scan runs with their budget and stop reason.",
    )
    p.add_argument("--once", action="store_true", help="print one frame and exit (scripts)")
    p.add_argument(
        "--every",
        type=float,
        default=DEFAULT_EVERY_S,
        metavar="SECONDS",
        help=f"refresh interval (default {DEFAULT_EVERY_S:g}, at least {MIN_EVERY_S:g})",
    )
    p.set_defaults(handler=watch)


def watch(session: Session, args: argparse.Namespace) -> Report:
    if not MIN_EVERY_S <= args.every < math.inf:
        raise UsageError(f"--every must be at least {MIN_EVERY_S:g} seconds, not {args.every:g}")
    if args.once:
        snapshot = take_snapshot(session)
        if session.as_json:
            return Report(data=snapshot.to_data(), text="")
        _console(session).print(render(snapshot))
        return Report(data=None, text="", written=True)
    try:
        if session.as_json:
            while True:  # one JSON document per line per interval: easy to tail and parse
                session.stdout.write(json.dumps(to_json(take_snapshot(session).to_data())) + "\n")
                session.stdout.flush()
                time.sleep(args.every)
        console = _console(session)
        with Live(render(take_snapshot(session)), console=console, auto_refresh=False) as live:
            while True:
                time.sleep(args.every)
                live.update(render(take_snapshot(session)), refresh=True)
    except KeyboardInterrupt:
        return Report(data=None, text="", written=True)


def take_snapshot(session: Session) -> Snapshot:
    store = session.store()
    control = store.get_control()
    timeout = claim_timeout(session, None, control)
    try:
        budget = deployment.effective_budget(session, control)
    except (ValueError, SettingsError) as exc:
        raise UsageError(str(exc)) from exc
    now = session.now()
    stats = store.stats(now, timeout, shard_census=False)
    log = ScanRunLog(session.backends.firestore(), retention=_READ_ONLY_RETENTION)
    try:
        runs = tuple(log.recent(RECENT_RUNS))
    except RunLogError as exc:
        raise StoreUnavailable(str(exc)) from exc
    return Snapshot(now, stats, control, budget, runs, timeout.total_seconds(), store.shards)


def _console(session: Session) -> Console:
    tty = bool(getattr(session.stdout, "isatty", lambda: False)())
    return Console(file=session.stdout, width=None if tty else PIPE_WIDTH, highlight=False)
