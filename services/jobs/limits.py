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


# -- the whole record: Firestore's document size limit and the headroom a life needs --------

# Firestore's maximum document size (https://cloud.google.com/firestore/quotas): a commit that
# would make a document larger is refused with INVALID_ARGUMENT.
MAX_DOCUMENT_BYTES = 1_048_576
# Storage sizes as Firestore counts them (https://cloud.google.com/firestore/docs/storage-size):
# a string is its UTF-8 bytes + 1, numbers, timestamps 8, booleans and null 1, a geo point 16,
# a map its field names and values (counted here, conservatively, with the 32 bytes a document
# adds), a document its name (collection and document ID + 16) + its fields + 32.
_STRING_EXTRA = 1
_NAME_EXTRA = 16
_MAP_EXTRA = 32
_FIXED = 8
# A details map (result.details, progress) is bounded in compact JSON bytes; stored, a JSON byte
# takes at most 4 (a one-digit integer and its comma, 2 JSON bytes, is stored as 8).
STORED_PER_JSON_BYTE = 4
# What the record's life may write beyond what `schedule` writes, per field as stored (name
# included), each at the bound its writer keeps: the claim (a run ID), the lease (owner, token,
# the ended token), a cancel request (reason and who), last_error (code and message), the history
# (its byte bound, with room for the per-entry keys its measure leaves out), one details map
# (result.details or progress: `complete` clears progress as it writes the result), the
# quarantine, and the small fields (state, attempt, times, message ID).
LIFE_FIELD_BYTES: dict[str, int] = {
    "claim": 2 * 1024,
    "lease": 4 * 1024,
    "cancel_requested": 2 * MAX_REASON_BYTES + 256,
    "last_error": MAX_CODE_BYTES + MAX_ERROR_MESSAGE_BYTES + 256,
    "history": 2 * 16 * 1024 + 2 * MAX_REASON_BYTES,
    "details": STORED_PER_JSON_BYTE * MAX_DETAILS_BYTES + MAX_CODE_BYTES + 256,
    "quarantine": MAX_ERROR_MESSAGE_BYTES + 1024,
    "small": 2 * 1024,
}
LIFE_BYTES = sum(LIFE_FIELD_BYTES.values())
# The fields those bounds cover: whatever the record holds in them now is replaced within them.
LIFE_FIELDS = frozenset(
    {
        "state",
        "attempt",
        "claim",
        "enqueued_at",
        "message_id",
        "lease_until",
        "lease_owner",
        "lease_token",
        "ended_lease_token",
        "progress",
        "cancel_requested",
        "result",
        "last_error",
        "history",
        "updated_at",
        "expire_at",
        "quarantine",
    }
)


def stored_bytes(value: object) -> int:
    """The storage size Firestore counts for one field value (a conservative reading of
    https://cloud.google.com/firestore/docs/storage-size for maps)."""
    if value is None or isinstance(value, bool):
        return 1
    if isinstance(value, str):
        return len(value.encode("utf-8", "surrogatepass")) + _STRING_EXTRA
    if isinstance(value, bytes | bytearray):
        return len(value)
    if isinstance(value, int | float | datetime):
        return _FIXED
    if isinstance(value, Mapping):
        return _MAP_EXTRA + sum(
            stored_bytes(str(key)) + stored_bytes(item) for key, item in value.items()
        )
    if isinstance(value, list | tuple):
        return sum(stored_bytes(item) for item in value)
    # A reference, geo point or vector (no job field holds one): its text is an upper bound.
    return max(16, len(str(value).encode("utf-8", "replace")) + _STRING_EXTRA)


def document_bytes(collection: str, document_id: str, fields: Mapping[str, Any]) -> int:
    """The size Firestore counts for a document of `collection` with these fields."""
    name = stored_bytes(collection) + stored_bytes(document_id) + _NAME_EXTRA
    return name + stored_bytes(dict(fields))


def life_headroom_problem(collection: str, job_id: str, fields: Mapping[str, Any]) -> str | None:
    """Why a job record with these fields could not move through its life without passing
    Firestore's document limit (its fields outside LIFE_FIELDS, plus LIFE_BYTES for those), or
    None. Names the largest of those fields first, so a reader can tell what to shrink."""
    base = {key: value for key, value in fields.items() if key not in LIFE_FIELDS}
    size = document_bytes(collection, job_id, base)
    if size + LIFE_BYTES <= MAX_DOCUMENT_BYTES:
        return None
    largest = max(base, key=lambda key: stored_bytes(key) + stored_bytes(base[key]), default="")
    return (
        f"{largest or 'the record'} makes the record of job {job_id[:80]!r} {size} bytes before "
        f"what its life writes (up to {LIFE_BYTES}); at most "
        f"{MAX_DOCUMENT_BYTES - LIFE_BYTES} fit under Firestore's {MAX_DOCUMENT_BYTES}-byte "
        "document limit"
    )
