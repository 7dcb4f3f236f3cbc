"""`jobsctl forecast`: the calendar of future work, jobs falling due per hour (or day) per
action over a horizon, each action's budget beside it and the windows over it marked.

The same calendar the console's Calendar page draws (services/store/forecasts.py over
services/jobs/forecast.py). The budgets are the catalogue's claim rates (`lanes.claim_rates`)
and the control document's catch-up rate. It costs one count aggregation per action per
window, plus one per action for the overdue jobs (each 1 read, plus 1 per 1,000 jobs counted),
printed on the last line.
"""

from __future__ import annotations

import argparse
from typing import Any

from services.cli.output import Report, table
from services.cli.session import Session
from services.cli.timespec import duration
from services.jobs.forecast import REST_LANE, STEPS, Calendar
from services.jobs.lanes import claim_rates

DEFAULT_HORIZON = "7d"
OVER_MARK = "!"  # beside a count that exceeds the window's budget


def register(commands: Any, common: argparse.ArgumentParser) -> None:
    p = commands.add_parser(
        "forecast",
        parents=[common],
        help="jobs falling due per hour or day per action, against each action's budget",
        description="The calendar of deferred jobs due over --horizon from this hour (or "
        "day), per action, with each action's budget per window (its claim rate, capped by "
        "the catch-up rate; actions without a rate share the catch-up rate as the rest lane) "
        f"and the windows over it marked {OVER_MARK}.",
    )
    p.add_argument("--horizon", default=DEFAULT_HORIZON, help="how far ahead (default 7d)")
    p.add_argument("--step", choices=sorted(STEPS), default="hour", help="window size")
    p.add_argument("--all", action="store_true", help="list every window, not only those with jobs")
    p.set_defaults(handler=forecast)


def forecast(session: Session, args: argparse.Namespace) -> Report:
    store = session.store()
    control = store.get_control()
    calendar = store.calendar(
        session.now(),
        duration("--horizon", args.horizon),
        args.step,
        actions=session.catalogue.names(),
        rates=claim_rates(session.catalogue),
        catch_up_rate=control.catch_up_rate,
    )
    return Report(calendar.to_document(), render(calendar, every=args.all))


def render(calendar: Calendar, *, every: bool = False) -> str:
    """A table: one line per window (those with jobs, or `every` one), one column per row of
    the calendar, `!` beside a count over its budget; then each row's budget and the cost."""
    rows = calendar.rows
    headers = ["window (UTC)", *(r.action for r in rows), "total"]
    fmt = "%Y-%m-%d %H:%M" if calendar.step == "hour" else "%Y-%m-%d"
    lines = [["overdue", *(f"{r.overdue:,}" for r in rows), ""]]
    for i, window in enumerate(calendar.windows):
        total = calendar.totals[i]
        if not total and not every:
            continue
        cells = [f"{r.counts[i]:,}{OVER_MARK if r.over and r.over[i] else ''}" for r in rows]
        lines.append([window.start.strftime(fmt), *cells, f"{total:,}"])
    budgets = ", ".join(f"{r.action} {r.budget:,.0f}" for r in rows if r.budget is not None)
    shared = [r.action for r in rows if r.budget is None]
    notes = [f"budget per {calendar.step}: {budgets or 'none'}"]
    if shared:
        notes.append(f"in the {REST_LANE}: {', '.join(shared)}")
    peak = calendar.peak()
    if peak:
        notes.append(f"peak: {peak[1]:,} due at {peak[0].start.strftime(fmt)}")
    notes.append(f"billed reads: {calendar.reads:,}")
    return table(headers, lines) + "\n" + "\n".join(notes)
