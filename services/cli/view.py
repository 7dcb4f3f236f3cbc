"""The live view behind `jobsctl watch`: one `Snapshot` of the system, and its rendering.

A snapshot holds what an operator watches during a catch-up: the state counts and backlog
figures (read at one Firestore read time), the control settings with the per-run budget they
give, the last scan runs, and the drain rate those runs measured against the rate that was
set, with an ETA. `render` draws it with rich (tables that redraw in place on a terminal);
`Snapshot.to_data` is the `--json` form.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from rich.console import Group, RenderableType
from rich.table import Table
from rich.text import Text

from services.jobs.budget import EnqueueBudget
from services.jobs.control import Control
from services.jobs.lanes import active_pauses, lane_label
from services.jobs.layout import layout_line, mismatched
from services.jobs.plan import budget_arithmetic, format_duration
from services.jobs.results import Stats
from services.jobs.state import State
from services.store.runs import ScanRun

RECENT_RUNS = 5


@dataclass(frozen=True)
class DrainRate:
    """Jobs published per second of wall time across the recent runs (their effective rate),
    or None when fewer than two runs say so."""

    per_s: float | None
    runs: int
    span_s: float


def drain_rate(runs: Sequence[ScanRun]) -> DrainRate:
    """What the runs before the newest published, per second from the oldest's start to the
    newest's start: runs start on the schedule's cadence, so the gaps between runs count and
    this is the rate the backlog drains at."""
    ordered = sorted(runs, key=lambda r: r.started_at)
    if len(ordered) < 2:
        return DrainRate(None, len(ordered), 0.0)
    span = (ordered[-1].started_at - ordered[0].started_at).total_seconds()
    published = sum(r.published for r in ordered[:-1])
    return DrainRate(published / span if span > 0 else None, len(ordered), span)


def effective_run_rate(run: ScanRun, previous: ScanRun | None) -> float | None:
    """One run's published jobs over the time since the previous run started (what the
    schedule allows), as opposed to its burst rate (published over its own duration)."""
    if previous is None:
        return None
    gap = (run.started_at - previous.started_at).total_seconds()
    return run.published / gap if gap > 0 else None


@dataclass(frozen=True)
class Snapshot:
    at: datetime
    stats: Stats
    control: Control
    budget: EnqueueBudget
    runs: tuple[ScanRun, ...]  # newest first
    claim_timeout_s: float
    shards: int = 1  # JOBS_SHARDS as jobsctl runs with it

    @property
    def shard_stranded(self) -> int | None:
        """The newest run's count of non-terminal jobs no shard query reaches (the scan's
        census; jobsctl does not repeat it: `jobsctl stats` counts them exactly)."""
        return self.runs[0].shard_stranded if self.runs else None

    @property
    def shard_layout_mismatch(self) -> bool:
        """The control document's shard layout against JOBS_SHARDS (as the scan compares
        them every run), or the newest run's report when no layout is recorded."""
        return mismatched(self.control.shard_layout, self.shards, self.shard_stranded or 0)

    @property
    def drain(self) -> DrainRate:
        return drain_rate(self.runs)

    @property
    def set_rate_per_s(self) -> float:
        """The rate the settings allow: the budget over the scan interval."""
        return self.budget.limit / self.budget.interval_s

    @property
    def eta_s(self) -> float | None:
        """Time to drain what is due now at the measured rate (else the set rate)."""
        due = self.stats.due_count
        if due == 0:
            return 0.0
        if self.control.paused:
            return None
        rate = self.drain.per_s or self.set_rate_per_s
        return due / rate if rate > 0 else None

    @property
    def stale_enqueued(self) -> int | None:
        """The newest run's count of enqueued jobs whose message may be gone (the scan's own
        measurement; jobsctl does not repeat those queries)."""
        return self.runs[0].stale_enqueued if self.runs else None

    def to_data(self) -> dict[str, Any]:
        drain = self.drain
        layout = self.control.shard_layout
        return {
            "at": self.at,
            "read_time": self.stats.read_time,
            "states": {s.value: self.stats.per_state.get(s, 0) for s in State},
            "due_now": self.stats.due_count,
            "oldest_overdue_age_s": self.stats.oldest_overdue_age_s,
            "stuck_claims": self.stats.stuck_claims,
            "expired_leases": self.stats.expired_leases,
            "stale_enqueued": self.stale_enqueued,
            "claim_timeout_s": self.claim_timeout_s,
            "paused": self.control.paused,
            "catch_up_rate_per_s": self.control.catch_up_rate,
            "budget_per_run": self.budget.limit,
            "budget_source": self.budget.source,
            "interval_s": self.budget.interval_s,
            "set_rate_per_s": self.set_rate_per_s,
            "measured_rate_per_s": drain.per_s,
            "eta_s": self.eta_s,
            "ramp": self.ramp_data(),
            "shards": self.shards,
            "shard_layout": layout.to_document() if layout is not None else None,
            "action_pauses": active_pauses(self.control.action_pauses, self.at),
            "shard_layout_mismatch": self.shard_layout_mismatch,
            "shard_stranded": self.shard_stranded,
            "runs": [
                {
                    "run_id": r.run_id,
                    "started_at": r.started_at,
                    "stopped_because": r.stopped_because,
                    "partition": r.partition,
                    "mode": r.mode,
                    "note": r.note,
                    "budget": r.budget,
                    "claimed": r.claimed,
                    "published": r.published,
                    "publish_failed": r.publish_failed,
                    "failure": r.failure.to_document() if r.failure else None,
                }
                for r in self.runs
            ],
        }

    def ramp_data(self) -> dict[str, Any] | None:
        """The ramp in force (`jobsctl resume --ramp`): its rate now, its next step, when it
        reaches the set rate; None without one."""
        ramp = self.control.ramp
        if ramp is None:
            return None
        target = self.control.catch_up_rate
        step = ramp.next_step(self.at, target)
        return {
            "started_at": ramp.started_at,
            "start_rate_per_s": ramp.start_rate,
            "rate_now_per_s": ramp.rate_at(self.at, target),
            "next_step_at": step[0] if step else None,
            "next_rate_per_s": step[1] if step else None,
            "reaches_set_rate_at": ramp.reaches_at(target),
        }


def render(snapshot: Snapshot) -> RenderableType:
    """The frame: a headline, the backlog, the settings and rates, the recent runs."""
    return Group(_headline(snapshot), _backlog(snapshot), _rates(snapshot), _runs(snapshot))


def _headline(s: Snapshot) -> Text:
    state = "PAUSED" if s.control.paused else "running"
    when = s.at.strftime("%Y-%m-%d %H:%M:%SZ")
    line = Text(f"Deferred Jobs at {when}: scan {state}", style="bold")
    if s.control.paused and s.control.reason:
        line.append(f" ({s.control.reason})")
    return line


def _backlog(s: Snapshot) -> Table:
    table = Table(title="backlog", title_justify="left", show_header=True)
    for state in State:
        table.add_column(state.value, justify="right")
    table.add_row(*(f"{s.stats.per_state.get(state, 0):,}" for state in State))
    figures = Table.grid(padding=(0, 2))
    figures.add_column()
    figures.add_column(justify="right")
    age = s.stats.oldest_overdue_age_s
    stale = s.stale_enqueued
    figures.add_row("due now", f"{s.stats.due_count:,}")
    figures.add_row("oldest overdue", format_duration(age) if age is not None else "none")
    figures.add_row(
        "stuck claims", f"{s.stats.stuck_claims:,} (> {format_duration(s.claim_timeout_s)})"
    )
    figures.add_row("expired leases", f"{s.stats.expired_leases:,}")
    figures.add_row("stale enqueued", f"{stale:,}" if stale is not None else "- (no run yet)")
    stranded = s.shard_stranded
    layout = layout_line(s.control.shard_layout, s.shards)
    if s.shard_layout_mismatch:
        figures.add_row("shard layout", Text(f"MISMATCH: {layout}", style="bold red"))
    else:
        figures.add_row("shard layout", f"JOBS_SHARDS={s.shards}; {layout}")
    reach = f"{stranded:,}" if stranded is not None else "- (no run yet)"
    figures.add_row(
        "out of shard reach",
        Text(reach, style="bold red") if stranded else reach,
    )
    outer = Table.grid()
    outer.add_row(table)
    outer.add_row(figures)
    return outer


def _rates(s: Snapshot) -> Table:
    grid = Table.grid(padding=(0, 2))
    grid.add_column()
    grid.add_column()
    b = s.budget
    grid.add_row(
        "budget",
        budget_arithmetic(b.limit, b.cap, s.control.catch_up_rate, b.interval_s),
    )
    drain = s.drain
    measured = (
        f"{drain.per_s:,.1f}/s over the last {drain.runs} runs ({format_duration(drain.span_s)})"
        if drain.per_s is not None
        else "- (needs two runs)"
    )
    grid.add_row("set rate", f"{s.set_rate_per_s:,.1f}/s (budget / interval)")
    ramp = s.ramp_data()
    if ramp is not None:
        step = (
            f"next x1.5 at {ramp['next_step_at']:%H:%M:%SZ} to {ramp['next_rate_per_s']:,.1f}/s"
            if ramp["next_step_at"]
            else "at the set rate"
        )
        grid.add_row(
            "ramp",
            f"{ramp['rate_now_per_s']:,.1f}/s now of {s.control.catch_up_rate:g}/s (500/50/5: "
            f"from {ramp['start_rate_per_s']:g}/s at {ramp['started_at']:%H:%M:%SZ}); {step}",
        )
    grid.add_row("measured", measured)
    for action, until in sorted(active_pauses(s.control.action_pauses, s.at).items()):
        grid.add_row(
            "action paused",
            Text(
                f"{lane_label(action)} until {until:%H:%M:%SZ} (its dependency's Retry-After)",
                style="bold",
            ),
        )
    lanes = s.runs[0].lanes if s.runs else {}
    if lanes:
        grid.add_row("lanes (last run)", lane_summary(lanes))
    eta = s.eta_s
    if eta is None:
        eta_text = "- (paused)" if s.control.paused else "-"
    else:
        eta_text = "drained" if eta == 0 else format_duration(math.ceil(eta))
    grid.add_row("ETA", eta_text)
    return grid


def lane_summary(lanes: Mapping[str, Mapping[str, Any]]) -> str:
    """A run's claim lanes on one line: claimed/budget at each rate, or paused until when."""
    parts = []
    for key, lane in lanes.items():
        name = lane_label(key)  # `http.request target trials` for a target's lane
        if lane.get("paused_until"):
            parts.append(f"{name} paused until {lane['paused_until']:%H:%M:%SZ}")
            continue
        rate = f" at {lane['rate_per_s']:g}/s" if lane.get("rate_per_s") else ""
        parts.append(f"{name} {lane['claimed']:,}/{lane['budget']:,}{rate}")
    return "; ".join(parts)


def _stopped(run: ScanRun) -> str:
    """The stop reason, and for a run that failed, the status and error kind it failed with."""
    if run.failure is None:
        return run.stopped_because
    return f"{run.stopped_because}: failed {run.failure.status} {run.failure.kind}"


def _runs(s: Snapshot) -> Table:
    table = Table(title="last scan runs", title_justify="left")
    headers = (
        "started",
        "partition",
        "mode",
        "stopped",
        "budget",
        "claimed",
        "published",
        "failed",
    )
    for header in headers:
        left = header in ("started", "stopped", "mode")
        table.add_column(header, justify="left" if left else "right")
    for run in s.runs:
        table.add_row(
            run.started_at.strftime("%H:%M:%S"),
            str(run.partition),
            run.mode,
            _stopped(run),
            f"{run.budget:,}",
            f"{run.claimed:,}",
            f"{run.published:,}",
            f"{run.publish_failed:,}",
        )
    if not s.runs:
        table.add_row("-", "", "", "no scan run recorded yet", "", "", "", "")
    return table
