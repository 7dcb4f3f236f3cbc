"""The job record: what an application asks for (`NewJob`), what Firestore holds (`Job`), and
the small values the store returns. `docs/job-record.md` documents the same schema for writers
in other languages; `to_document` / `from_document` are its one implementation here.
"""

from __future__ import annotations

import hashlib
import json
import re
from collections.abc import Collection, Mapping, Sequence
from dataclasses import dataclass, field, fields
from datetime import UTC, datetime
from typing import Any, overload

from services.jobs.errors import InvalidRecord, JobsError, ValidationError
from services.jobs.params import MEDIA_DELETE_SOURCE, params_problems
from services.jobs.shard import shard_of
from services.jobs.state import HistoryEntry, State

SCHEMA_VERSION = 1
MAX_ID_BYTES = 1500  # Firestore's document ID limit
MAX_SUBJECT_BYTES = 1024
MAX_PARAMS_BYTES = 16 * 1024  # JSON-encoded, compact, UTF-8
MAX_MAP_DEPTH = 20  # Firestore's nesting limit for maps in a document; params is level 1
MAX_ATTEMPTS_LIMIT = 100
DEFAULT_MAX_ATTEMPTS = 5
FIRST_ATTEMPT = 1  # a new job is in its first retry cycle
DEFAULT_ACTIONS: frozenset[str] = frozenset({MEDIA_DELETE_SOURCE})

_RESERVED_NAME = re.compile(r"^__.*__$", re.DOTALL)
_READABLE = re.compile(r"[^A-Za-z0-9._-]+")
_CONTROL = re.compile(r"[\x00-\x1f\x7f-\x9f]")
_INT64 = (-(2**63), 2**63 - 1)


def _as_utc(value: datetime, name: str = "a time") -> datetime:
    if not isinstance(value, datetime):
        raise TypeError(f"{name} is a {type(value).__name__}, not a timestamp")
    return value.astimezone(UTC)


def document_id_problems(value: object, what: str = "job ID") -> list[str]:
    """Why `value` cannot be a Firestore document ID (empty when it can)."""
    if not isinstance(value, str) or not value:
        return [f"{what} must be a non-empty string"]
    problems = []
    if "/" in value:
        problems.append(f"{what} {value[:80]!r} contains '/', which Firestore forbids")
    if value in {".", ".."}:
        problems.append(f"{what} cannot be {value!r}")
    if _RESERVED_NAME.match(value):
        problems.append(f"{what} {value[:80]!r} matches __.*__, which Firestore reserves")
    try:
        size = len(value.encode("utf-8"))
    except UnicodeEncodeError:
        return [*problems, f"{what} is not valid UTF-8"]
    if size > MAX_ID_BYTES:
        problems.append(f"{what} is {size} bytes; Firestore allows at most {MAX_ID_BYTES}")
    return problems


def job_id_problems(value: object) -> list[str]:
    """Why `value` cannot be a job ID (empty when it can): THE rule, shared by `schedule` and
    the worker's envelope, so a job the store accepts is never refused at delivery.

    A job ID is a Firestore document ID that also travels as a Pub/Sub message body and in
    log lines and headers: no control characters (NUL, tab, newline...), no leading or
    trailing whitespace.
    """
    problems = document_id_problems(value)
    if not isinstance(value, str) or not value:
        return problems
    if _CONTROL.search(value):
        problems.append(f"job ID {value[:80]!r} contains a control character")
    if value != value.strip():
        problems.append(f"job ID {value[:80]!r} has leading or trailing whitespace")
    return problems


def is_valid_job_id(value: object) -> bool:
    return not job_id_problems(value)


def _digest(*parts: str) -> str:
    # Byte-for-byte JavaScript's JSON.stringify([...parts]), so other languages can derive
    # the same IDs (docs/job-record.md).
    encoded = json.dumps(list(parts), separators=(",", ":"), ensure_ascii=False)
    return hashlib.sha256(encoded.encode("utf-8")).hexdigest()


def derive_job_id(action: str, subject: str, decision_id: str) -> str:
    """A deterministic, readable job ID for one logical operation.

    Same (action, subject, decision) → same ID, so scheduling a decision twice is a no-op.
    Shape: `<action>:<subject>:<decision>:<sha256 prefix>`, the readable parts sanitised and
    shortened; the hash covers the exact inputs, so different inputs never collide.
    """
    readable = ":".join(_READABLE.sub("_", part)[:100] for part in (action, subject, decision_id))
    return f"{readable}:{_digest(action, subject, decision_id)[:24]}"


def derive_idempotency_key(action: str, job_id: str) -> str:
    """The key of the logical side effect, used as the `idempotency` document's ID."""
    return f"{_READABLE.sub('_', action)[:100]}:{_digest(action, job_id)}"


def _params_problems(params: object) -> list[str]:
    if not isinstance(params, Mapping):
        return ["params must be a map of string keys to JSON values"]
    problems: list[str] = []

    def walk(value: object, path: str, depth: int) -> None:
        if isinstance(value, Mapping):
            if depth > MAX_MAP_DEPTH:
                problems.append(
                    f"params{path} is nested deeper than Firestore's {MAX_MAP_DEPTH} map levels"
                )
                return
            for key, item in value.items():
                if not isinstance(key, str) or not key:
                    problems.append(f"params{path} key {key!r} is not a non-empty string")
                elif _RESERVED_NAME.match(key):
                    problems.append(f"params{path} key {key!r} matches __.*__ (reserved)")
                else:
                    walk(item, f"{path}.{key}", depth + 1)
        elif isinstance(value, list | tuple):
            for index, item in enumerate(value):
                if isinstance(item, list | tuple):
                    problems.append(f"params{path}[{index}]: Firestore forbids nested arrays")
                walk(item, f"{path}[{index}]", depth)
        elif isinstance(value, bool) or value is None or isinstance(value, str):
            return
        elif isinstance(value, int):
            if not _INT64[0] <= value <= _INT64[1]:
                problems.append(f"params{path} = {value} does not fit a 64-bit integer")
        elif isinstance(value, float):
            if value != value or value in (float("inf"), float("-inf")):
                problems.append(f"params{path} is {value}, which JSON cannot encode")
        else:
            problems.append(f"params{path} is a {type(value).__name__}, not a JSON value")

    walk(params, "", 1)
    if problems:
        return problems
    size = len(json.dumps(params, separators=(",", ":"), sort_keys=True).encode("utf-8"))
    if size > MAX_PARAMS_BYTES:
        return [f"params are {size} bytes as JSON; the limit is {MAX_PARAMS_BYTES}"]
    return []


@dataclass(frozen=True)
class NewJob:
    """What an application supplies to schedule a job. `validated()` checks it."""

    job_id: str
    action: str
    subject: str
    due_at: datetime
    params: Mapping[str, Any] = field(default_factory=dict)
    max_attempts: int = DEFAULT_MAX_ATTEMPTS
    idempotency_key: str | None = None  # default: derived from action + job_id

    def validated(self, known_actions: Collection[str] = DEFAULT_ACTIONS) -> NewJob:
        """This job with due_at in UTC and the idempotency key filled in, or ValidationError
        listing every problem."""
        problems = job_id_problems(self.job_id)
        if not isinstance(self.action, str) or self.action not in known_actions:
            known = ", ".join(sorted(known_actions)) or "none"
            problems.append(f"unknown action {self.action!r} (known: {known})")
        if not isinstance(self.subject, str) or not self.subject.strip():
            problems.append("subject must be a non-empty string")
        elif len(self.subject.encode("utf-8")) > MAX_SUBJECT_BYTES:
            problems.append(f"subject is longer than {MAX_SUBJECT_BYTES} bytes")
        if not isinstance(self.due_at, datetime):
            problems.append("due_at must be a datetime")
        elif self.due_at.tzinfo is None or self.due_at.utcoffset() is None:
            problems.append(f"due_at {self.due_at.isoformat()} has no timezone")
        generic = _params_problems(self.params)
        problems.extend(generic)
        if not generic and isinstance(self.action, str):
            # The action's own schema, once params are a JSON map at all.
            problems.extend(params_problems(self.action, self.params))
        if (
            not isinstance(self.max_attempts, int)
            or isinstance(self.max_attempts, bool)
            or not 1 <= self.max_attempts <= MAX_ATTEMPTS_LIMIT
        ):
            problems.append(f"max_attempts must be an integer from 1 to {MAX_ATTEMPTS_LIMIT}")
        if self.idempotency_key is not None:
            problems.extend(document_id_problems(self.idempotency_key, "idempotency key"))
        if problems:
            raise ValidationError(problems)
        return NewJob(
            job_id=self.job_id,
            action=self.action,
            subject=self.subject,
            due_at=_as_utc(self.due_at),
            params=dict(self.params),
            max_attempts=self.max_attempts,
            idempotency_key=self.idempotency_key
            or derive_idempotency_key(self.action, self.job_id),
        )


@dataclass(frozen=True)
class Claim:
    """The latest claim. Kept after the job leaves `claimed` so `generation` keeps counting."""

    run_id: str
    claimed_at: datetime
    generation: int


@dataclass(frozen=True)
class Lease:
    """One delivery's hold on a running job: what every worker transition after `start`
    presents. `token` is new on every `start` (per delivery, never per process), so a stale
    delivery in the same instance is refused like any other; `update_time` is the commit
    time of the write that last set the lease (`start` or a heartbeat)."""

    job_id: str
    generation: int
    token: str
    owner: str
    until: datetime
    update_time: datetime | None = None


@dataclass(frozen=True)
class CancelRequest:
    """An operator's request to cancel a running job; the worker honours it."""

    reason: str
    by: str
    at: datetime


@dataclass(frozen=True)
class ErrorInfo:
    """An error as recorded in `last_error`; `at` is filled in by the store."""

    code: str
    message: str
    at: datetime | None = None


@dataclass(frozen=True)
class Result:
    """The outcome of the side effect; `completed_at` is filled in by the store."""

    outcome: str
    details: Mapping[str, Any] = field(default_factory=dict)
    completed_at: datetime | None = None


def _opt(data: Mapping[str, Any], key: str) -> Any:
    return data.get(key)


def _shard(value: Any) -> int:
    """A stored shard; absent (records older than the field) is shard 0."""
    if value is None:
        return 0
    if isinstance(value, bool) or not isinstance(value, int) or value < 0:
        raise TypeError(f"shard must be a non-negative integer, got {value!r}")
    return value


@dataclass(frozen=True)
class Job:
    """One `jobs` document, immutable. The store returns new copies after each transition."""

    job_id: str
    action: str
    subject: str
    params: Mapping[str, Any]
    due_at: datetime
    scheduled_due_at: datetime  # the due_at first requested; never changes
    state: State
    # The retry cycle in progress, 1..max_attempts: 1 when scheduled, + 1 per long retry
    # (`retry_later`, or the reclaimer finding a lease expired). Quick Pub/Sub redeliveries
    # within a cycle are counted by Pub/Sub's deliveryAttempt, never here.
    attempt: int
    max_attempts: int
    idempotency_key: str
    created_at: datetime
    updated_at: datetime
    claim: Claim | None = None
    enqueued_at: datetime | None = None
    message_id: str | None = None
    lease_until: datetime | None = None
    lease_owner: str | None = None
    cancel_requested: CancelRequest | None = None
    result: Result | None = None
    last_error: ErrorInfo | None = None
    history: tuple[HistoryEntry, ...] = ()
    expire_at: datetime | None = None
    lease_token: str | None = None
    # What an interrupted action finished (media: the objects already handled), so the next
    # delivery resumes with what is left; cleared on completion.
    progress: Mapping[str, Any] | None = None
    # Which slice of the due index holds this job (`shard_of`); records written before the
    # field existed read as shard 0.
    shard: int = 0
    # Who scheduled it through the API (the caller's email); None when scheduled otherwise
    # (jobsctl, a Python producer). Set once, never changed; the API's ownership rule reads it.
    producer: str | None = None
    # The document's update_time when it was read or last written (not a stored field).
    update_time: datetime | None = field(default=None, compare=False)

    @property
    def lease(self) -> Lease | None:
        """The running lease, when there is one."""
        if self.lease_token is None or self.lease_owner is None or self.lease_until is None:
            return None
        return Lease(
            self.job_id,
            self.generation,
            self.lease_token,
            self.lease_owner,
            self.lease_until,
            self.update_time,
        )

    @property
    def explicit_key(self) -> bool:
        """Whether the idempotency key was supplied (may be shared by several jobs) rather
        than derived from this job's ID (belongs to this job alone)."""
        return self.idempotency_key != derive_idempotency_key(self.action, self.job_id)

    @property
    def generation(self) -> int:
        """The fencing number: +1 on every claim; 0 before the first claim."""
        return self.claim.generation if self.claim else 0

    def lease_live(self, now: datetime) -> bool:
        return self.lease_until is not None and self.lease_until > now

    @classmethod
    def create(
        cls,
        new: NewJob,
        now: datetime,
        history: tuple[HistoryEntry, ...] = (),
        *,
        shards: int = 1,
    ) -> Job:
        """A fresh deferred job from a validated NewJob, in its shard of `shards`."""
        return cls(
            job_id=new.job_id,
            action=new.action,
            subject=new.subject,
            params=dict(new.params),
            due_at=new.due_at,
            scheduled_due_at=new.due_at,
            state=State.DEFERRED,
            attempt=FIRST_ATTEMPT,
            max_attempts=new.max_attempts,
            idempotency_key=new.idempotency_key or derive_idempotency_key(new.action, new.job_id),
            created_at=now,
            updated_at=now,
            history=history,
            shard=shard_of(new.job_id, shards),
        )

    def replaced(self, **changes: Any) -> Job:
        """`dataclasses.replace(self, **changes)` in a tenth of its time: this dataclass has no
        `__post_init__` and no init-only field, so replace's generated `__init__` call only
        sets each attribute, which copying the instance's attributes does too. The scan and
        the worker make several such copies per job. An unknown name raises TypeError, as
        replace does."""
        unknown = changes.keys() - _JOB_FIELDS
        if unknown:
            raise TypeError(f"Job has no field(s) {sorted(unknown)}")
        new = object.__new__(Job)
        attributes = new.__dict__
        attributes.update(self.__dict__)
        attributes.update(changes)
        return new

    def to_document(self) -> dict[str, Any]:
        """The Firestore document (the job ID is the document ID, not a field)."""
        return {
            "schema_version": SCHEMA_VERSION,
            "action": self.action,
            "subject": self.subject,
            "params": dict(self.params),
            "due_at": self.due_at,
            "scheduled_due_at": self.scheduled_due_at,
            "state": self.state.value,
            "attempt": self.attempt,
            "max_attempts": self.max_attempts,
            "idempotency_key": self.idempotency_key,
            "claim": (
                {
                    "run_id": self.claim.run_id,
                    "claimed_at": self.claim.claimed_at,
                    "generation": self.claim.generation,
                }
                if self.claim
                else None
            ),
            "enqueued_at": self.enqueued_at,
            "message_id": self.message_id,
            "lease_until": self.lease_until,
            "lease_owner": self.lease_owner,
            "lease_token": self.lease_token,
            "producer": self.producer,
            "progress": dict(self.progress) if self.progress is not None else None,
            "cancel_requested": (
                {
                    "reason": self.cancel_requested.reason,
                    "by": self.cancel_requested.by,
                    "at": self.cancel_requested.at,
                }
                if self.cancel_requested
                else None
            ),
            "result": (
                {
                    "outcome": self.result.outcome,
                    "completed_at": self.result.completed_at,
                    "details": dict(self.result.details),
                }
                if self.result
                else None
            ),
            "last_error": (
                {
                    "code": self.last_error.code,
                    "message": self.last_error.message,
                    "at": self.last_error.at,
                }
                if self.last_error
                else None
            ),
            "history": [entry.to_document() for entry in self.history],
            "created_at": self.created_at,
            "updated_at": self.updated_at,
            "expire_at": self.expire_at,
            "shard": self.shard,
        }

    @classmethod
    def from_document(cls, job_id: str, data: Mapping[str, Any]) -> Job:
        """Parse a stored document; optional fields may be absent or null."""
        claim = _opt(data, "claim")
        cancel = _opt(data, "cancel_requested")
        result = _opt(data, "result")
        error = _opt(data, "last_error")
        action = str(data["action"])
        due_at = _as_utc(data["due_at"], "due_at")
        created_at = _as_utc(data["created_at"], "created_at")
        return cls(
            job_id=job_id,
            action=action,
            subject=str(data["subject"]),
            params=_map(_opt(data, "params") or {}, "params"),
            due_at=due_at,
            scheduled_due_at=_as_utc(_opt(data, "scheduled_due_at") or due_at, "scheduled_due_at"),
            state=State(data["state"]),
            # Records written with the earlier layout's 0 are in their first cycle too.
            attempt=max(int(_opt(data, "attempt") or FIRST_ATTEMPT), FIRST_ATTEMPT),
            max_attempts=int(_opt(data, "max_attempts") or DEFAULT_MAX_ATTEMPTS),
            idempotency_key=str(
                _opt(data, "idempotency_key") or derive_idempotency_key(action, job_id)
            ),
            created_at=created_at,
            updated_at=_as_utc(_opt(data, "updated_at") or created_at, "updated_at"),
            claim=(
                Claim(
                    run_id=str(claim.get("run_id", "")),
                    claimed_at=_as_utc(claim["claimed_at"], "claim.claimed_at"),
                    generation=int(claim.get("generation", 0)),
                )
                if claim
                else None
            ),
            enqueued_at=_maybe_utc(_opt(data, "enqueued_at"), "enqueued_at"),
            message_id=_opt_str(data, "message_id"),
            lease_until=_maybe_utc(_opt(data, "lease_until"), "lease_until"),
            lease_owner=_opt_str(data, "lease_owner"),
            lease_token=_opt_str(data, "lease_token"),
            producer=_opt_str(data, "producer"),
            progress=_opt_map(data, "progress"),
            shard=_shard(_opt(data, "shard")),
            cancel_requested=(
                CancelRequest(
                    reason=str(cancel.get("reason", "")),
                    by=str(cancel.get("by", "")),
                    at=_as_utc(cancel["at"], "cancel_requested.at"),
                )
                if cancel
                else None
            ),
            result=(
                Result(
                    outcome=str(result["outcome"]),
                    details=_map(result.get("details") or {}, "result.details"),
                    completed_at=_maybe_utc(result.get("completed_at"), "result.completed_at"),
                )
                if result
                else None
            ),
            last_error=(
                ErrorInfo(
                    code=str(error.get("code", "")),
                    message=str(error.get("message", "")),
                    at=_maybe_utc(error.get("at"), "last_error.at"),
                )
                if error
                else None
            ),
            history=tuple(HistoryEntry.from_document(e) for e in _list(data, "history")),
            expire_at=_maybe_utc(_opt(data, "expire_at"), "expire_at"),
        )


_JOB_FIELDS = frozenset(f.name for f in fields(Job))


def _maybe_utc(value: datetime | None, name: str = "a time") -> datetime | None:
    return _as_utc(value, name) if value is not None else None


def _map(value: object, name: str) -> dict[str, Any]:
    if not isinstance(value, Mapping):
        raise TypeError(f"{name} is a {type(value).__name__}, not a map")
    return dict(value)


def _opt_map(data: Mapping[str, Any], key: str) -> dict[str, Any] | None:
    value = data.get(key)
    return None if value is None else _map(value, key)


def _opt_str(data: Mapping[str, Any], key: str) -> str | None:
    value = data.get(key)
    if value is not None and not isinstance(value, str):
        raise TypeError(f"{key} is a {type(value).__name__}, not a string")
    return value


def _list(data: Mapping[str, Any], key: str) -> list[Any]:
    value = data.get(key) or []
    if not isinstance(value, list):
        raise TypeError(f"{key} is a {type(value).__name__}, not an array")
    return value


def decode_job(job_id: str, data: Mapping[str, Any] | None) -> Job:
    """`Job.from_document`, with every way a document can be malformed (a field missing or
    of the wrong type, an unknown state) raised as one InvalidRecord naming the problem."""
    try:
        if not isinstance(data, Mapping):
            raise TypeError("the document is empty")
        job = Job.from_document(job_id, data)
        if isinstance(data.get("attempt"), bool) or not isinstance(
            data.get("attempt", 1), int | float
        ):
            raise TypeError("attempt is not a number")
        if isinstance(data.get("max_attempts"), bool) or not isinstance(
            data.get("max_attempts", 1), int | float
        ):
            raise TypeError("max_attempts is not a number")
        return job
    except InvalidRecord:
        raise
    except (KeyError, TypeError, ValueError, AttributeError, OverflowError) as exc:
        what = f"missing field {exc}" if isinstance(exc, KeyError) else str(exc)
        raise InvalidRecord(job_id, what or type(exc).__name__) from exc


# --- values the store returns -------------------------------------------------------------


@dataclass(frozen=True)
class ScheduleResult:
    job: Job
    created: bool  # False: the same job already existed (idempotent no-op)


@dataclass(frozen=True)
class ClaimedJob:
    """One job a scan run claimed: publish `job_id` with `generation`."""

    job_id: str
    generation: int
    due_at: datetime
    claimed_at: datetime
    action: str


@dataclass(frozen=True)
class Reclaimed:
    """A claim or lease the reclaimer took back (to deferred, or failed when out of attempts)."""

    job_id: str
    from_state: State
    to_state: State
    generation: int
    # Why: claim_timeout, lease_expired, enqueued_timeout (a rescue), or cancel_requested.
    reason: str = ""


@dataclass(frozen=True, eq=False)
class ReclaimReport(Sequence[Reclaimed]):
    """What one `reclaim_expired` call did: every committed change, even when a later page
    failed, plus the records it could not handle (each with its own reason), and the error
    that stopped it early, if one did."""

    reclaimed: tuple[Reclaimed, ...] = ()
    quarantined: tuple[str, ...] = ()
    skipped: tuple[tuple[str, str], ...] = ()  # (job_id, why) left for a later run
    stopped_by: JobsError | None = None

    # A sequence of what was reclaimed, so callers that only count or iterate need not care.
    def __len__(self) -> int:
        return len(self.reclaimed)

    @overload
    def __getitem__(self, index: int) -> Reclaimed: ...

    @overload
    def __getitem__(self, index: slice) -> Sequence[Reclaimed]: ...

    def __getitem__(self, index: int | slice) -> Reclaimed | Sequence[Reclaimed]:
        return self.reclaimed[index]

    def __eq__(self, other: object) -> bool:
        if isinstance(other, ReclaimReport):
            return (self.reclaimed, self.quarantined, self.skipped) == (
                other.reclaimed,
                other.quarantined,
                other.skipped,
            )
        if isinstance(other, list | tuple):
            return list(self.reclaimed) == list(other)
        return NotImplemented

    def __hash__(self) -> int:
        return hash(self.reclaimed)


@dataclass(frozen=True)
class Page:
    jobs: tuple[Job, ...]
    next_cursor: str | None  # pass back as `cursor` for the next page; None: no more
    invalid: tuple[str, ...] = ()  # IDs on this page whose documents cannot be decoded


@dataclass(frozen=True)
class Stats:
    oldest_overdue_age_s: float | None  # None: nothing overdue
    due_count: int
    stuck_claims: int
    expired_leases: int
    per_state: Mapping[State, int]
    read_time: datetime | None = None  # the one snapshot every figure was read at


@dataclass(frozen=True)
class Backlog:
    """What the scan measures each run: count aggregations and limit-1 queries only, so its
    cost does not grow with the terminal records kept for retention."""

    oldest_overdue_age_s: float | None  # None: nothing overdue
    due_count: int
    stuck_claims: int  # claimed longer ago than the claim timeout
    stale_enqueued: int  # enqueued longer ago than the enqueued timeout: the message may be gone
    oldest_enqueued_age_s: float | None  # None: nothing enqueued


@dataclass(frozen=True)
class EnqueueMark:
    """The outcome of one item of `mark_enqueued_many`: the job as written, or why not."""

    job_id: str
    generation: int
    job: Job | None = None
    error: JobsError | None = None

    @property
    def ok(self) -> bool:
        return self.error is None


@dataclass(frozen=True)
class IdempotencyRecord:
    """The durable result of one logical side effect (collection `idempotency`)."""

    key: str
    job_id: str
    action: str
    subject: str
    outcome: str
    details: Mapping[str, Any]
    completed_at: datetime
    expire_at: datetime | None

    def to_document(self) -> dict[str, Any]:
        return {
            "job_id": self.job_id,
            "action": self.action,
            "subject": self.subject,
            "outcome": self.outcome,
            "details": dict(self.details),
            "completed_at": self.completed_at,
            "expire_at": self.expire_at,
        }

    @classmethod
    def from_document(cls, key: str, data: Mapping[str, Any]) -> IdempotencyRecord | None:
        """The completed record, or None for a document that only holds an in-progress
        marker (`holder`) of a shared key."""
        if "outcome" not in data:
            return None
        return cls(
            key=key,
            job_id=str(data["job_id"]),
            action=str(data.get("action", "")),
            subject=str(data.get("subject", "")),
            outcome=str(data["outcome"]),
            details=dict(data.get("details") or {}),
            completed_at=_as_utc(data["completed_at"]),
            expire_at=_maybe_utc(data.get("expire_at")),
        )
