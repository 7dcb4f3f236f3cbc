"""Request bodies: bytes in, typed requests out, or an ApiError naming every bad field.

The API checks shape here (JSON, known fields, types, sizes, times); the store then checks
content with the same rules every other producer meets (`NewJob.validated`, through
`FirestoreJobStore.schedule`), and its ValidationError comes back as 400 naming the field.
Nothing reaches the store that could make it fail for a reason other than its own rules:
lone surrogates, nesting deep enough to exhaust the stack, or NaN are refused first.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from services.api.due import DueError, parse_delay, parse_timestamp
from services.api.errors import FieldViolation, invalid, invalid_fields
from services.jobs.horizon import due_at_problem
from services.jobs.ids import derive_job_id
from services.jobs.model import MAX_SUBJECT_BYTES, NewJob
from services.jobs.values import MAX_MAP_DEPTH

SCHEDULE_FIELDS = (
    "job_id",
    "decision_id",
    "action",
    "subject",
    "params",
    "due_at",
    "delay",
    "max_attempts",
)
CANCEL_FIELDS = ("reason",)
RESCHEDULE_FIELDS = ("due_at", "delay", "reason")

MAX_DECISION_ID_BYTES = MAX_SUBJECT_BYTES
MAX_REASON_BYTES = 1024
MAX_ACTION_BYTES = 256
# Params may nest MAX_MAP_DEPTH maps (Firestore's limit); one more level for the body itself
# and a margin so the store, not this parser, names a params nesting problem.
MAX_BODY_DEPTH = MAX_MAP_DEPTH + 4


@dataclass(frozen=True)
class CancelBody:
    reason: str | None = None


@dataclass(frozen=True)
class RescheduleBody:
    due_at: datetime
    reason: str | None = None


@dataclass
class _Fields:
    """One JSON object's fields, collecting every violation before raising."""

    data: Mapping[str, Any]
    violations: list[FieldViolation] = field(default_factory=list)

    def given(self, name: str) -> bool:
        """Whether the body sets `name` (null counts as not set)."""
        return self.data.get(name) is not None

    def bad(self, name: str, description: str) -> None:
        self.violations.append(FieldViolation(name, description))

    def text(
        self, name: str, *, max_bytes: int, required: bool = False, empty_ok: bool = False
    ) -> str | None:
        if name not in self.data or self.data[name] is None:
            if required:
                self.bad(name, "is required")
            return None
        value = self.data[name]
        if not isinstance(value, str):
            self.bad(name, f"must be a string, not {_json_type(value)}")
            return None
        if not value and not empty_ok:
            self.bad(name, "must not be empty")
            return None
        if len(value.encode("utf-8")) > max_bytes:
            self.bad(name, f"must be at most {max_bytes} bytes")
            return None
        return value

    def raise_if_bad(self) -> None:
        if self.violations:
            raise invalid_fields(self.violations)


def decode_object(body: bytes, allowed: tuple[str, ...], *, empty_ok: bool) -> _Fields:
    """The body as a JSON object with only `allowed` keys; ApiError otherwise."""
    if not body.strip():
        if empty_ok:
            return _Fields({})
        raise invalid("body", "must be a JSON object")
    try:
        data = json.loads(
            body.decode("utf-8"),
            object_pairs_hook=_no_duplicates,
            parse_constant=_no_constants,
        )
    except UnicodeDecodeError as exc:
        raise invalid("body", f"is not UTF-8 (byte {exc.start})") from exc
    except RecursionError as exc:
        raise invalid("body", "is nested too deeply") from exc
    except _DuplicateKey as exc:
        raise invalid(exc.key, "appears more than once") from exc
    except ValueError as exc:  # JSONDecodeError, NaN/Infinity, a 5,000-digit integer
        raise invalid("body", f"is not valid JSON: {exc}") from exc
    if not isinstance(data, dict):
        raise invalid("body", f"must be a JSON object, not {_json_type(data)}")
    fields = _Fields(data)
    for key, value in data.items():
        if key not in allowed:
            fields.bad(_printable(key), f"unknown field; known: {', '.join(allowed)}")
        elif not _encodable(value):
            fields.bad(key, "contains a lone surrogate; strings must be valid Unicode")
        elif _depth(value) > MAX_BODY_DEPTH:
            fields.bad(key, f"is nested deeper than {MAX_BODY_DEPTH} levels")
    fields.raise_if_bad()
    return fields


def parse_schedule(body: bytes, now: datetime) -> NewJob:
    """The NewJob a `POST /v1/jobs` body asks for (not yet validated by the store)."""
    f = decode_object(body, SCHEDULE_FIELDS, empty_ok=False)
    job_id = f.text("job_id", max_bytes=10 * 1024)  # the store applies Firestore's 1,500
    decision_id = f.text("decision_id", max_bytes=MAX_DECISION_ID_BYTES)
    action = f.text("action", max_bytes=MAX_ACTION_BYTES, required=True)
    subject = f.text("subject", max_bytes=MAX_SUBJECT_BYTES, required=True)
    has_id, has_decision = f.given("job_id"), f.given("decision_id")
    if has_id == has_decision:
        name = "job_id" if not has_id else "decision_id"
        f.bad(name, "give exactly one of job_id and decision_id")
    params = f.data.get("params", {})
    if not isinstance(params, dict):
        f.bad("params", f"must be a JSON object, not {_json_type(params)}")
    max_attempts = f.data.get("max_attempts", NewJob.max_attempts)
    if not isinstance(max_attempts, int) or isinstance(max_attempts, bool):
        f.bad("max_attempts", f"must be an integer, not {_json_type(max_attempts)}")
    due_at = _due(f, now)
    f.raise_if_bad()
    assert action is not None and subject is not None and due_at is not None
    if decision_id is not None:
        job_id = derive_job_id(action, subject, decision_id)
    assert job_id is not None
    return NewJob(
        job_id=job_id,
        action=action,
        subject=subject,
        due_at=due_at,
        params=params,
        max_attempts=max_attempts,
    )


def parse_cancel(body: bytes) -> CancelBody:
    f = decode_object(body, CANCEL_FIELDS, empty_ok=True)
    reason = f.text("reason", max_bytes=MAX_REASON_BYTES)
    f.raise_if_bad()
    return CancelBody(reason)


def parse_reschedule(body: bytes, now: datetime) -> RescheduleBody:
    f = decode_object(body, RESCHEDULE_FIELDS, empty_ok=False)
    reason = f.text("reason", max_bytes=MAX_REASON_BYTES)
    due_at = _due(f, now)
    f.raise_if_bad()
    assert due_at is not None
    return RescheduleBody(due_at, reason)


def _due(f: _Fields, now: datetime) -> datetime | None:
    """due_at, or now + delay: exactly one of the two."""
    has_due, has_delay = f.given("due_at"), f.given("delay")
    if has_due == has_delay:
        f.bad("due_at" if not has_due else "delay", "give exactly one of due_at and delay")
        return None
    name = "due_at" if has_due else "delay"
    text = f.text(name, max_bytes=64)
    if text is None:
        return None
    try:
        due_at = parse_timestamp(text) if has_due else now + parse_delay(text)
    except DueError as exc:
        f.bad(name, str(exc))
        return None
    # One window for both forms (services/jobs/horizon.py); the store applies it too.
    problem = due_at_problem(due_at, now)
    if problem is not None:
        f.bad(name, problem.replace("due_at", "the due time", 1) if has_delay else problem)
        return None
    return due_at


class _DuplicateKey(ValueError):
    def __init__(self, key: str) -> None:
        super().__init__(key)
        self.key = _printable(key)


def _no_duplicates(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    # RFC 8259 leaves duplicate names' meaning open; taking the last silently would let two
    # parsers (a proxy, this service) disagree about what was asked.
    result: dict[str, Any] = {}
    for key, value in pairs:
        if key in result:
            raise _DuplicateKey(key)
        result[key] = value
    return result


def _no_constants(name: str) -> Any:
    raise ValueError(f"{name} is not a JSON number")


def _encodable(value: Any) -> bool:
    try:
        json.dumps(value, ensure_ascii=False).encode("utf-8")
    except (UnicodeEncodeError, RecursionError, ValueError):
        return False
    return True


def _depth(value: Any) -> int:
    """How deeply objects and arrays nest in `value` (a scalar is 0), without recursion."""
    deepest, stack = 0, [(value, 0)]
    while stack:
        item, level = stack.pop()
        if isinstance(item, dict | list):
            deepest = max(deepest, level + 1)
            children = item.values() if isinstance(item, dict) else item
            stack.extend((child, level + 1) for child in children)
    return deepest


def _json_type(value: Any) -> str:
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "a boolean"
    if isinstance(value, int | float):
        return "a number"
    if isinstance(value, str):
        return "a string"
    if isinstance(value, list):
        return "an array"
    return "an object"


def _printable(key: str) -> str:
    """A key safe to echo in an error: at most 80 characters, escapes for the unprintable."""
    shown = json.dumps(key[:80])[1:-1]
    return shown + ("…" if len(key) > 80 else "")
