"""The unix-cron schedule Cloud Scheduler runs the scan on: validation at preview, longest gap.

Cloud Scheduler rejects a bad schedule only at `pulumi up`, after other resources changed; this
module rejects it at preview, names the bad field, and works out the longest gap between two
runs, which the services (JOBS_SCAN_INTERVAL_S) and the "scan runs absent" alert both need.
The grammar is Cloud Scheduler's as services/edge/scheduler_cron.py defines it, the one the local
Cloud Scheduler (emulators/scheduler) runs too: the deployed job and the local one accept and run
the same schedules.
"""

from __future__ import annotations

from infra.errors import CronError
from services.edge.scheduler_cron import MINUTES_PER_DAY, CronSchedule, ScheduleError

__all__ = ["MINUTES_PER_DAY", "CronSchedule", "longest_gap_s", "parse_cron"]


def parse_cron(expression: str) -> CronSchedule:
    """Parse a 5-field unix-cron expression; raise CronError naming the bad field."""
    try:
        return CronSchedule.parse(expression)
    except ScheduleError as exc:
        raise CronError(str(exc)) from exc


def longest_gap_s(expression: str) -> int:
    """The longest time between two runs of `expression`, in seconds; CronError when it is
    invalid or fires less than twice in two years."""
    try:
        return CronSchedule.parse(expression).longest_gap_s()
    except ScheduleError as exc:
        raise CronError(str(exc)) from exc
