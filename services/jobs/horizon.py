"""The one rule on when a job may be due: not before the Unix epoch, at most ten years ahead.

Firestore's timestamps run from year 1 to 9999 (https://firebase.google.com/docs/firestore/manage-data/data-types),
so both ends would store; neither is a decision anyone means. A due time before
1970-01-01T00:00:00Z is a zero or negative number read as a time, not a past deadline (and a
past due time is due now anyway: the scan claims it on its next run). A due time more than ten
years ahead is more likely a unit mistake (milliseconds read as seconds) than a retention
decision, and outlives any storage policy this system serves; ten years also bounds an API
`delay` (services/api/due.py), so a delay and the due time it leads to follow one rule.

The API applies it to `due_at` and to `now + delay`; the store applies it to every job it
schedules or reschedules, whoever calls (jobsctl, a Python producer), with the store's clock.
"""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

EARLIEST_DUE_AT = datetime(1970, 1, 1, tzinfo=UTC)
MAX_AHEAD = timedelta(days=3650)
MAX_AHEAD_TEXT = "10 years"


def latest_due_at(now: datetime) -> datetime:
    return now + MAX_AHEAD


def due_at_problem(due_at: datetime, now: datetime) -> str | None:
    """Why `due_at` (aware) is outside the window at `now`, or None."""
    if due_at < EARLIEST_DUE_AT:
        return f"due_at {due_at.isoformat()} is before 1970-01-01T00:00:00Z"
    if due_at > latest_due_at(now):
        return f"due_at {due_at.isoformat()} is more than {MAX_AHEAD_TEXT} ahead"
    return None
