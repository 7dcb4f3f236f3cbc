"""Byte limits on what a job record may hold, and the functions that keep text and maps in them.

Firestore refuses a document over 1 MiB with INVALID_ARGUMENT
(https://firebase.google.com/docs/firestore/quotas#limits); a transition that grew a document
past it would fail forever. So every free-text field is bounded: machine-written text (error
messages, reasons the services compose, result details) is shortened to fit, and operator
input (cancel and reschedule reasons) is refused when longer, so the operator knows.
"""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Mapping
from datetime import datetime
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:  # a type only: the record's modules import this one
    from services.jobs.parts import ErrorInfo
    from services.jobs.record import Job

from services.jobs.values import value_problems

MAX_REASON_BYTES = 1024  # a history reason; a cancel or reschedule reason
MAX_ERROR_MESSAGE_BYTES = 2048  # last_error.message
MAX_CODE_BYTES = 128  # last_error.code, result.outcome
MAX_DETAILS_BYTES = 160 * 1024  # result.details and progress, as compact JSON
TRUNCATED_MARK = "…[truncated]"
MAX_PROBLEM_BYTES = 256  # one problem quoted in the note that replaces invalid details


def bounded_text(value: str, limit: int) -> str:
    """`value` cut to at most `limit` UTF-8 bytes (never inside a character), marked when cut."""
    raw = value.encode("utf-8", "replace")
    if len(raw) <= limit:
        return value
    mark = TRUNCATED_MARK.encode("utf-8")
    return raw[: max(limit - len(mark), 0)].decode("utf-8", "ignore") + TRUNCATED_MARK


def json_bytes(value: object) -> int:
    """The size of `value` as compact JSON (how params, details and progress are measured)."""
    return len(json.dumps(value, separators=(",", ":"), sort_keys=True, default=str).encode())


def bounded_details(
    details: Mapping[str, Any], limit: int = MAX_DETAILS_BYTES, *, depth: int = 1
) -> dict[str, Any]:
    """`details` when it is a valid Firestore map (`values.value_problems`, at nesting level
    `depth` of its document) that fits in `limit` bytes of JSON; otherwise a small note saying
    why, so a talkative or careless action can never make its own completion fail."""
    keys = sorted(map(str, details))[:50] if isinstance(details, Mapping) else []
    problems = value_problems(details, "details", depth)
    if problems:
        shown = [bounded_text(problem, MAX_PROBLEM_BYTES) for problem in problems[:5]]
        return {"invalid": True, "problems": shown, "problem_count": len(problems), "keys": keys}
    size = json_bytes(dict(details))
    if size <= limit:
        return dict(details)
    return {"truncated": True, "original_bytes": size, "keys": keys}


def stamped(error: ErrorInfo, now: datetime) -> ErrorInfo:
    """The error as recorded: its time filled in, its code and message bounded."""
    return dataclasses.replace(
        error,
        code=bounded_text(error.code, MAX_CODE_BYTES),
        message=bounded_text(error.message, MAX_ERROR_MESSAGE_BYTES),
        at=error.at or now,
    )


def progress_of(job: Job, progress: Mapping[str, Any] | None) -> dict[str, Any] | None:
    """The progress to keep: the new one (bounded) when given, else the job's."""
    if progress is None:
        return dict(job.progress) if job.progress is not None else None
    return bounded_details(progress)
