"""What `jobsctl` knows of the deployment it steers: the scan's interval and per-run ceiling
(the same JOBS_* variables the scan reads, through the same readers and bounds in
services/edge/scan_deployment.py), and the enqueue budget they give a control document —
computed by the one budget function (services/jobs/budget.py), so jobsctl never promises
another figure than the scan's."""

from __future__ import annotations

from collections.abc import Callable
from typing import TypeVar

from services.cli.errors import UsageError
from services.cli.session import Session
from services.cli.timespec import duration
from services.edge.scan_deployment import (
    SCAN_MAX_PER_RUN,
    read_interval_s,
    read_max_per_run,
    read_poll_s,
    read_time_budget_s,
)
from services.edge.settings import SHARDS, EnvReader, SettingsError
from services.jobs.budget import PACED_MARGIN_S, EnqueueBudget, enqueue_budget
from services.jobs.control import Control

T = TypeVar("T")


def _read(session: Session, reader: Callable[[EnvReader], T]) -> T:
    """One scan variable, read as the scan reads it; a bad value is a usage error naming it
    (the operator did not type it: the message says where it came from)."""
    env = EnvReader(session.environ)
    value = reader(env)
    try:
        env.finish()
    except SettingsError as exc:
        raise UsageError(str(exc)) from exc
    return value


def interval_s(session: Session, flag: str | None = None) -> float:
    """--interval, else JOBS_SCAN_INTERVAL_S, else the scan's default."""
    if flag:
        return duration("--interval", flag).total_seconds()
    return _read(session, read_interval_s)


def ceiling(session: Session) -> int | None:
    """JOBS_SCAN_MAX_PER_RUN when set: no control document lifts a run above it."""
    if not session.env(SCAN_MAX_PER_RUN):
        return None
    return _read(session, read_max_per_run)


def run_cap(session: Session) -> int:
    """The deployment's per-run cap as the scan applies it: JOBS_SCAN_MAX_PER_RUN, else the
    scan's own default."""
    return _read(session, read_max_per_run)


def effective_budget(session: Session, control: Control) -> EnqueueBudget:
    """The jobs one scan run may claim under `control`, exactly as the scan computes it (at
    the ramp's rate while one climbs)."""
    cap = run_cap(session)
    return enqueue_budget(
        cap,
        interval_s(session),
        rate_per_s=control.rate_at(session.now()),
        cap_override=control.per_run_cap(cap),
    )


def time_budget_s(session: Session, interval: float) -> float:
    """A paced run's length: JOBS_SCAN_TIME_BUDGET_S, else the longest the scan allows
    (the interval less its margin, at least 1 s)."""
    longest = max(1.0, interval - PACED_MARGIN_S)
    return _read(session, lambda env: read_time_budget_s(env, default=longest))


def poll_s(session: Session) -> float:
    """JOBS_SCAN_POLL_S, else the scan's default."""
    return _read(session, read_poll_s)


def shards(session: Session) -> int:
    """JOBS_SHARDS, else 1."""
    text = session.env(SHARDS)
    try:
        return max(1, int(text)) if text else 1
    except ValueError as exc:
        raise UsageError(f"{SHARDS}={text!r} is not an integer") from exc
