"""A job as the API shows it: the record's fields as JSON, timestamps in RFC 3339 UTC.

Internal bookkeeping that a producer cannot act on (the claim's run ID, the lease owner, the
idempotency key) stays out; docs/job-record.md describes the stored record in full.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from datetime import datetime
from typing import Any

from services.api.due import format_timestamp
from services.jobs.record import Job


def job_resource(job: Job) -> dict[str, Any]:
    """The JSON object of `openapi.json`'s `Job` schema."""
    return {
        "job_id": job.job_id,
        "action": job.action,
        "subject": job.subject,
        "params": _json_safe(job.params),
        "state": job.state.value,
        "due_at": format_timestamp(job.due_at),
        "scheduled_due_at": format_timestamp(job.scheduled_due_at),
        "attempt": job.attempt,
        "max_attempts": job.max_attempts,
        "created_at": format_timestamp(job.created_at),
        "updated_at": format_timestamp(job.updated_at),
        "cancel_requested": job.cancel_requested is not None,
        "producer": job.producer,
        "result": (
            {
                "outcome": job.result.outcome,
                "completed_at": _time(job.result.completed_at),
                "details": _json_safe(job.result.details),
            }
            if job.result
            else None
        ),
        "last_error": (
            {
                "code": job.last_error.code,
                "message": job.last_error.message,
                "at": _time(job.last_error.at),
            }
            if job.last_error
            else None
        ),
        "history": [
            {
                "at": format_timestamp(entry.at),
                "from": entry.from_state.value if entry.from_state else None,
                "to": entry.to_state.value,
                "by": entry.by,
                "reason": entry.reason,
            }
            for entry in job.history
        ],
    }


def _time(value: datetime | None) -> str | None:
    return format_timestamp(value) if value is not None else None


def _json_safe(value: Mapping[str, Any]) -> dict[str, Any]:
    """A stored map as plain JSON: the worker may record values JSON has no type for
    (a timestamp in a result's details); those become strings rather than a 500."""

    def default(item: Any) -> Any:
        return format_timestamp(item) if isinstance(item, datetime) else str(item)

    result: dict[str, Any] = json.loads(json.dumps(dict(value), default=default))
    return result
