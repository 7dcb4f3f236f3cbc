"""The scan's deployment values that the tools beside it read too: the variable names, defaults
and bounds of its topic, interval, per-run ceiling, time budget, poll and claim timeout.

The scan's Settings (services/scan/settings.py) reads these keys through the readers below, and
so do `jobsctl` (services/cli/deployment.py: the budget it promises, the claim timeout floor it
honours) and the Pulumi program (infra/env.py sets them, infra/config.py bounds its keys alike):
one definition below all three, so a value one of them accepts the others read the same way.
"""

from __future__ import annotations

from collections.abc import Mapping

from services.edge.settings import EnvReader
from services.jobs.budget import DEFAULT_POLL_S, MAX_POLL_S, MIN_POLL_S

TOPIC = "JOBS_TOPIC"
SCAN_TIME_BUDGET_S = "JOBS_SCAN_TIME_BUDGET_S"
SCAN_MAX_PER_RUN = "JOBS_SCAN_MAX_PER_RUN"
SCAN_INTERVAL_S = "JOBS_SCAN_INTERVAL_S"
SCAN_POLL_S = "JOBS_SCAN_POLL_S"
CLAIM_TIMEOUT_S = "JOBS_CLAIM_TIMEOUT_S"

# Cloud Scheduler's attempt deadline is at most 30 min; a run should end well inside it.
MAX_TIME_BUDGET_S = 1800.0
DEFAULT_TIME_BUDGET_S = 60.0
DEFAULT_MAX_PER_RUN = 1000
MAX_PER_RUN_LIMIT = 100_000
DEFAULT_INTERVAL_S = 60.0  # Cloud Scheduler's finest schedule is every minute
MIN_INTERVAL_S, MAX_INTERVAL_S = 1.0, 86400.0
DEFAULT_CLAIM_TIMEOUT_S = 600.0
MIN_CLAIM_TIMEOUT_S, MAX_CLAIM_TIMEOUT_S = 1.0, 7 * 86400.0
# Enqueued-timeout bounds: at least 5 minutes, at most 7 days (Pub/Sub's longest message
# retention). The default (services/jobs/budget.py DEFAULT_ENQUEUED_TIMEOUT_S) says why it is
# 3 h; the infra sets the value per stack from its Pub/Sub settings.
MIN_ENQUEUED_TIMEOUT_S, MAX_ENQUEUED_TIMEOUT_S = 300.0, 7 * 86400.0


def read_interval_s(env: EnvReader) -> float:
    """JOBS_SCAN_INTERVAL_S: seconds between two scheduled runs."""
    return env.duration_s(
        SCAN_INTERVAL_S, DEFAULT_INTERVAL_S, min=MIN_INTERVAL_S, max=MAX_INTERVAL_S
    )


def read_max_per_run(env: EnvReader) -> int:
    """JOBS_SCAN_MAX_PER_RUN: the most jobs one run claims; no control document lifts it."""
    return env.int(SCAN_MAX_PER_RUN, DEFAULT_MAX_PER_RUN, min=1, max=MAX_PER_RUN_LIMIT)


def read_time_budget_s(env: EnvReader, default: float = DEFAULT_TIME_BUDGET_S) -> float:
    """JOBS_SCAN_TIME_BUDGET_S: how long a run claims (a paced run: how long it works)."""
    return env.duration_s(SCAN_TIME_BUDGET_S, default, min=1.0, max=MAX_TIME_BUDGET_S)


def read_poll_s(env: EnvReader) -> float:
    """JOBS_SCAN_POLL_S: how often a paced run looks for newly due work."""
    return env.duration_s(SCAN_POLL_S, DEFAULT_POLL_S, min=MIN_POLL_S, max=MAX_POLL_S)


def read_claim_timeout_s(env: EnvReader) -> float:
    """JOBS_CLAIM_TIMEOUT_S: the age at which a claim is taken back, at the least."""
    return env.duration_s(
        CLAIM_TIMEOUT_S, DEFAULT_CLAIM_TIMEOUT_S, min=MIN_CLAIM_TIMEOUT_S, max=MAX_CLAIM_TIMEOUT_S
    )


def claim_timeout_floor_s(environ: Mapping[str, str]) -> float | None:
    """JOBS_CLAIM_TIMEOUT_S when set (parsed and bounded as the scan does), else None.

    For tools beside the scan (jobsctl) that must honour the same floor; raises SettingsError.
    """
    if not environ.get(CLAIM_TIMEOUT_S, "").strip():
        return None
    env = EnvReader(environ)
    floor = read_claim_timeout_s(env)
    env.finish()
    return floor
