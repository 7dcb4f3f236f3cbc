"""What `jobsctl` knows of the deployment it steers: the scan's interval and per-run ceiling
(the same JOBS_* variables the scan reads), and the enqueue budget they give a control
document — computed by the scan's own function, so jobsctl never promises another figure."""

from __future__ import annotations

from services.cli.errors import UsageError
from services.cli.session import Session
from services.cli.timespec import TimeSpecError, parse_duration
from services.edge.settings import SHARDS
from services.jobs.control import Control
from services.scan.budget import DEFAULT_POLL_S, PACED_MARGIN_S, EnqueueBudget, enqueue_budget
from services.scan.settings import (
    DEFAULT_INTERVAL_S,
    DEFAULT_MAX_PER_RUN,
    SCAN_INTERVAL_S,
    SCAN_MAX_PER_RUN,
    SCAN_POLL_S,
    SCAN_TIME_BUDGET_S,
)


def interval_s(session: Session, flag: str | None = None) -> float:
    """--interval, else JOBS_SCAN_INTERVAL_S, else the scan's default."""
    if flag:
        return parse_duration(flag).total_seconds()
    text = session.env(SCAN_INTERVAL_S, str(DEFAULT_INTERVAL_S))
    try:
        return parse_duration(text).total_seconds()
    except TimeSpecError as exc:
        # The operator did not type this value: name where it came from.
        raise UsageError(f"{SCAN_INTERVAL_S}={text!r}: {exc}") from exc


def ceiling(session: Session) -> int | None:
    """JOBS_SCAN_MAX_PER_RUN when set: no control document lifts a run above it."""
    text = session.env(SCAN_MAX_PER_RUN)
    if not text:
        return None
    try:
        return int(text)
    except ValueError as exc:
        raise UsageError(f"{SCAN_MAX_PER_RUN}={text!r} is not an integer") from exc


def run_cap(session: Session) -> int:
    """The deployment's per-run cap as the scan applies it: JOBS_SCAN_MAX_PER_RUN, else the
    scan's own default."""
    return ceiling(session) or DEFAULT_MAX_PER_RUN


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


def _duration_env(session: Session, key: str) -> float | None:
    text = session.env(key)
    if not text:
        return None
    try:
        return parse_duration(text).total_seconds()
    except TimeSpecError as exc:
        raise UsageError(f"{key}={text!r}: {exc}") from exc


def time_budget_s(session: Session, interval: float) -> float:
    """A paced run's length: JOBS_SCAN_TIME_BUDGET_S, else the longest the scan allows
    (the interval less its margin, at least 1 s)."""
    return _duration_env(session, SCAN_TIME_BUDGET_S) or max(1.0, interval - PACED_MARGIN_S)


def poll_s(session: Session) -> float:
    """JOBS_SCAN_POLL_S, else the scan's default."""
    return _duration_env(session, SCAN_POLL_S) or DEFAULT_POLL_S


def shards(session: Session) -> int:
    """JOBS_SHARDS, else 1."""
    text = session.env(SHARDS)
    try:
        return max(1, int(text)) if text else 1
    except ValueError as exc:
        raise UsageError(f"{SHARDS}={text!r} is not an integer") from exc
