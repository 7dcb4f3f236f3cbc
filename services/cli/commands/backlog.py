"""Commands about the backlog as a whole: stats, reclaim (abandoned claims and leases), plan."""

from __future__ import annotations

import argparse
import dataclasses
import math
import uuid
from datetime import datetime, timedelta
from typing import Any

from services.cli import deployment, deployment_costs
from services.cli.errors import ExitCode, UsageError
from services.cli.mode_costs import plan_modes
from services.cli.output import Report, fields, table
from services.cli.session import Session
from services.cli.timespec import duration
from services.edge.scan_deployment import (
    CLAIM_TIMEOUT_S,
    DEFAULT_INTERVAL_S,
    MAX_PER_RUN_LIMIT,
    SCAN_INTERVAL_S,
    SCAN_MAX_PER_RUN,
    claim_timeout_floor_s,
)
from services.edge.settings import SettingsError
from services.jobs import schema
from services.jobs.budget import effective_claim_timeout, enqueue_budget
from services.jobs.control import MAX_CLAIM_TIMEOUT, Control
from services.jobs.layout import ShardCensus, layout_line, mismatched
from services.jobs.plan import budget_arithmetic, describe, format_duration, plan_drain
from services.jobs.record import Job
from services.jobs.results import Reclaimed
from services.jobs.state import State
from services.store.job_store import FirestoreJobStore

RECLAIM_BATCH = 100


def register(commands: Any, common: argparse.ArgumentParser) -> None:
    p = commands.add_parser("stats", parents=[common], help="backlog figures and state counts")
    p.add_argument(
        "--claim-timeout",
        help="claim age counted as stuck (default: the control document's; never below "
        f"{CLAIM_TIMEOUT_S})",
    )
    p.set_defaults(handler=stats)

    p = commands.add_parser(
        "reclaim",
        parents=[common],
        help="take back abandoned claims and expired leases (dry run unless --apply)",
        description="Show the claimed jobs older than the claim timeout and the running jobs "
        "whose lease expired. With --apply, move them back to deferred (an expired lease "
        "spends the attempt: attempt + 1, or failed in the last one), each audited as "
        "reclaimer:jobsctl-<id>. The scan does the same every run.",
    )
    p.add_argument("--apply", action="store_true", help="reclaim them (default: dry run)")
    p.add_argument("--limit", type=int, default=1000, help="at most this many (default 1000)")
    p.add_argument(
        "--claim-timeout",
        help=f"default: the control document's claim timeout; never below {CLAIM_TIMEOUT_S}",
    )
    p.set_defaults(handler=reclaim)

    p = commands.add_parser(
        "plan",
        parents=[common],
        help="drain time of the backlog at a catch-up rate",
        # argparse %-formats help strings, not descriptions: a single % here.
        description="How long the due backlog takes to drain at --rate jobs/s with --reserve % "
        "kept for normal traffic, and whether the per-run budget is the bottleneck. Without "
        "--due it reads the backlog and the control document (rate, budget) from Firestore; "
        "with --due nothing is read, and --max-per-run, else the deployment's cap "
        f"({SCAN_MAX_PER_RUN}, when set), limits the plan. It then compares the scan's modes "
        "(one-pass, paced ending when idle, paced polling): drain time, due->claim latency and "
        "the monthly cost of the scan's instance time and Firestore reads, with the arithmetic "
        "and Google's price pages.",
    )
    p.add_argument("--due", type=int, help="plan this hypothetical backlog (no Firestore)")
    p.add_argument("--rate", type=float, help="catch-up rate, jobs/s (default: control's)")
    p.add_argument(
        "--reserve", type=float, default=10.0, help="%% of the rate kept for normal traffic"
    )
    p.add_argument(
        "--max-per-run",
        type=int,
        help=f"per-run budget (default: control's, capped by {SCAN_MAX_PER_RUN} when set)",
    )
    p.add_argument(
        "--interval",
        # The scan's own default: with the variable unset, this is the interval it budgets for.
        help=f"scan interval, e.g. 5m (default: {SCAN_INTERVAL_S}, else {DEFAULT_INTERVAL_S:g} s)",
    )
    p.set_defaults(handler=plan)


def stats(session: Session, args: argparse.Namespace) -> Report:
    store = session.store()
    control = store.get_control()
    timeout = claim_timeout(session, args.claim_timeout, control)
    now = session.now()
    figures = store.stats(now, timeout)
    age = figures.oldest_overdue_age_s
    shards = store.shards
    census = figures.shard_census
    stranded = census.stranded if census is not None else 0
    layout = control.shard_layout
    mismatch = mismatched(layout, shards, stranded)
    data = {
        "at": now,
        "paused": control.paused,
        "due_count": figures.due_count,
        "oldest_overdue_age_s": age,
        "stuck_claims": figures.stuck_claims,
        "expired_leases": figures.expired_leases,
        "claim_timeout_s": timeout.total_seconds(),
        "per_state": {state.value: figures.per_state.get(state, 0) for state in State},
        "shards": shards,
        "shard_layout": layout.to_document() if layout is not None else None,
        "shard_layout_mismatch": mismatch,
        # Non-terminal records no shard query reaches (None at N = 1: every record is reached).
        "shard_stranded": census.stranded if census is not None else None,
        "shard_out_of_range": census.out_of_range if census is not None else None,
        "shard_without": census.without_shard if census is not None else None,
    }
    stuck = f"{figures.stuck_claims:,} (older than {format_duration(timeout.total_seconds())})"
    text = fields(
        [
            ("paused", f"yes ({control.reason})" if control.paused else "no"),
            ("due now", figures.due_count),
            ("oldest overdue", format_duration(age) if age is not None else "none"),
            ("stuck claims", stuck),
            ("expired leases", figures.expired_leases),
            ("shards", shards),
            ("shard layout", ("MISMATCH: " if mismatch else "") + layout_line(layout, shards)),
            ("out of reach", _reach(census)),
        ]
    )
    text += "\n\n" + table(
        ["state", "jobs"], [[s.value, figures.per_state.get(s, 0)] for s in State]
    )
    text += _newer_records(store, figures, data)
    warning = _uninitialised(session, store, sum(figures.per_state.values()))
    if warning is None:
        return Report(data=data, text=text)
    # An empty system is what a healthy idle one shows too: say why this one may not be.
    data["warning"] = warning
    session.stderr.write(f"jobsctl: warning: {warning}\n")
    return Report(data=data, text=text, exit_code=ExitCode.UNINITIALISED)


def _uninitialised(session: Session, store: FirestoreJobStore, jobs: int) -> str | None:
    """Why the project looks uninitialised, or None: no control document (the scan's first
    run writes it) and no job record at all, as in a mistyped --project."""
    if jobs or store.has_control_document():
        return None
    return (
        f"project {session.backends.project!r} looks uninitialised: no control document "
        f"({schema.CONTROL}/{schema.CONTROL_DOCUMENT}, written by the scan's first run) and "
        f"no job records in {schema.JOBS!r}; check --project / JOBS_PROJECT and the "
        "database, or whether the scan has ever run"
    )


def _reach(census: ShardCensus | None) -> str:
    if census is None:
        return "0 (one shard: every record is reached)"
    if not census.stranded:
        return "0"
    return (
        f"{census.stranded:,} non-terminal job(s): {census.out_of_range:,} with shard >= "
        f"{census.shards}, {census.without_shard or 0:,} without a shard; never claimed until "
        f"`jobsctl backfill-shards --shards {census.shards} --apply`"
    )


def _newer_records(store: Any, figures: Any, data: dict[str, Any]) -> str:
    """The records a newer version wrote (left untouched by this one: roll forward, runbook
    "Records from a newer version"), as `data["newer_records"]` and one line of text."""
    newer = store.newer_records(figures)
    data["newer_records"] = dataclasses.asdict(newer)
    return (
        f"\nfrom a newer version: {newer.newer_schema:,} with a newer schema_version, "
        f"{newer.unknown_state:,} in a state this version does not know"
    )


def _raise_budget_hint(needed: int, rate: float, ceiling: int | None) -> str:
    """How to reach `rate`: the control's budget when the deployment allows `needed` per run;
    otherwise the stack's scanMaxPerRun (the control document cannot lift a run above it)."""
    if ceiling is not None and needed > ceiling:
        return (
            f"\nto reach {rate:g}/s a run must claim {needed:,}, above the deployment's cap "
            f"{ceiling:,} ({SCAN_MAX_PER_RUN}): raise the stack's scanMaxPerRun (at most "
            f"{MAX_PER_RUN_LIMIT:,}; above that, scanPartitions) and run `pulumi up`"
        )
    return (
        f"\nto reach {rate:g}/s raise the per-run budget to {needed:,}: "
        f"jobsctl control set --max-per-run {needed} --reason ..."
    )


def reclaim(session: Session, args: argparse.Namespace) -> Report:
    if args.limit < 1:
        raise UsageError(f"--limit must be at least 1, not {args.limit}")
    store = session.store()
    timeout = claim_timeout(session, args.claim_timeout)
    now = session.now()
    if not args.apply:
        candidates = _reclaim_candidates(session, now - timeout, args.limit)
        text = table(
            ["job_id", "state", "abandoned since"],
            [[j.job_id, j.state, _since(j)] for j in candidates],
        )
        text += f"\n(dry run: {len(candidates):,} would be reclaimed; add --apply to do it)"
        found = [{"job_id": j.job_id, "state": j.state, "since": _since(j)} for j in candidates]
        return Report(data={"applied": False, "candidates": found}, text=text)
    run_id = f"jobsctl-{uuid.uuid4().hex[:12]}"
    total = store.stats(now, timeout, shard_census=False)
    progress = session.progress(
        "reclaiming", min(args.limit, total.stuck_claims + total.expired_leases)
    )
    reclaimed: list[Reclaimed] = []
    while len(reclaimed) < args.limit:
        batch = store.reclaim_expired(
            session.now(), timeout, min(RECLAIM_BATCH, args.limit - len(reclaimed)), run_id
        )
        reclaimed.extend(batch)
        progress.advance(len(batch))
        if not batch:
            break
    progress.finish()
    rows: list[list[object]] = [
        [r.job_id, r.from_state, r.to_state, r.generation] for r in reclaimed
    ]
    text = table(["job_id", "from", "to", "generation"], rows)
    text += f"\n(reclaimed {len(reclaimed):,} as reclaimer:{run_id})"
    return Report(data={"applied": True, "run_id": run_id, "reclaimed": reclaimed}, text=text)


def plan(session: Session, args: argparse.Namespace) -> Report:
    interval_s = deployment.interval_s(session, args.interval)
    budget: int | None
    if args.due is not None:
        # A hypothetical backlog: the budget the operator names, else the deployment's cap
        # (JOBS_SCAN_MAX_PER_RUN) when the shell says what it is.
        backlog, control = args.due, Control()
        budget = args.max_per_run if args.max_per_run is not None else deployment.ceiling(session)
    else:
        store = session.store()
        control = store.get_control()
        backlog = store.stats(session.now(), control.claim_timeout, shard_census=False).due_count
        budget = args.max_per_run
        if budget is None:  # the operator's budget under the deployment's cap, as a run has it
            budget = control.per_run_cap(deployment.run_cap(session))
    ceiling = deployment.ceiling(session)
    if budget is not None and ceiling is not None and budget > ceiling:
        # The scan never claims more than the deployment allows, whatever the control says.
        session.stderr.write(
            f"note: the deployment caps a run at {ceiling:,} ({SCAN_MAX_PER_RUN}, Pulumi "
            f"key scanMaxPerRun); planning with {ceiling:,}, not {budget:,}\n"
        )
        budget = ceiling
    rate = args.rate if args.rate is not None else control.catch_up_rate
    result = plan_drain(
        backlog, rate, args.reserve / 100.0, max_per_run=budget, interval_s=interval_s
    )
    text = describe(result)
    if result.runs is not None:
        every = format_duration(interval_s)
        per_run = enqueue_budget(budget, interval_s, rate_per_s=rate) if budget else None
        arithmetic = budget_arithmetic(
            per_run.limit if per_run else math.floor(rate * interval_s + 1e-9),
            budget,
            rate,
            interval_s,
        )
        text += f"\n{result.runs:,} scan run(s) at one every {every}; {arithmetic}"
    if result.limited_by == "budget":
        text += _raise_budget_hint(math.ceil(rate * interval_s), rate, ceiling)
    modes = plan_modes(
        backlog,
        rate,
        budget if budget is not None else MAX_PER_RUN_LIMIT,
        interval_s,
        deployment.time_budget_s(session, interval_s),
        deployment.poll_s(session),
        deployment.shards(session),
    )
    text += "\n\nby mode (no reserve; instance time and scan reads per 30 days):\n" + table(
        ["mode", "drain", "claims/s in a run", "due->claim p50", "p99", "scan $/month"],
        [
            [
                m.mode,
                format_duration(m.drain_s),
                f"{m.claim_rate_per_s:,.1f}",
                f"{m.latency_p50_s:.1f} s",
                f"{m.latency_p99_s:.1f} s",
                f"{m.cost_usd_per_month:,.2f}",
            ]
            for m in modes
        ],
    )
    for m in modes:
        text += f"\n{m.mode}:\n  " + "\n  ".join(m.arithmetic)
    # The whole deployment, as docs/deploy.md's cost table computes it.
    costs = deployment_costs.summary()
    text += "\n\nthe whole deployment per month (prod's resources; docs/deploy.md):\n  "
    text += "\n  ".join(costs)
    data = {
        **dataclasses.asdict(result),
        "effective_rate_per_s": round(result.effective_rate_per_s, 6),
        "interval_s": interval_s,
        "max_per_run": budget,
        "human": describe(result),
        "modes": [dataclasses.asdict(m) for m in modes],
        "deployment_costs": costs,
    }
    return Report(data=data, text=text)


def claim_timeout(session: Session, text: str | None, control: Control | None = None) -> timedelta:
    """--claim-timeout, else the control document's, never below the deployment's floor.

    The floor (JOBS_CLAIM_TIMEOUT_S, when set) is the scan's own rule, applied by the same
    function: below it, `reclaim --apply` could take back claims a running scan still holds.
    """
    if text:
        asked = duration("--claim-timeout", text)
        if asked > MAX_CLAIM_TIMEOUT:  # the control's own ceiling (now - asked must be a date)
            raise UsageError(f"the claim timeout must be at most {MAX_CLAIM_TIMEOUT.days} d")
    else:
        asked = (control or session.store().get_control()).claim_timeout
    try:
        floor_s = claim_timeout_floor_s(session.environ)
    except SettingsError as exc:
        raise UsageError(str(exc)) from exc
    timeout = effective_claim_timeout(asked, floor_s)
    if timeout > asked:
        session.stderr.write(
            f"note: the deployment's claim timeout ({CLAIM_TIMEOUT_S}) is "
            f"{format_duration(timeout.total_seconds())}; using it, not "
            f"{format_duration(asked.total_seconds())}\n"
        )
    return timeout


def _reclaim_candidates(session: Session, cutoff: datetime, limit: int) -> list[Job]:
    """Claims older than `cutoff`, then running jobs whose lease expired, up to `limit`."""
    store = session.store()
    now = session.now()
    found: list[Job] = []
    filters: tuple[dict[str, Any], ...] = ({"claimed_before": cutoff}, {"state": State.RUNNING})
    for where in filters:
        cursor = None
        while len(found) < limit:
            page = store.list_jobs(**where, limit=min(500, max(1, limit)), cursor=cursor)
            found.extend(
                job
                for job in page.jobs
                if job.state is State.CLAIMED or (job.lease_until and job.lease_until < now)
            )
            cursor = page.next_cursor
            if cursor is None:
                break
    return found[:limit]


def _since(job: Job) -> datetime | None:
    if job.state is State.CLAIMED and job.claim:
        return job.claim.claimed_at
    return job.lease_until
