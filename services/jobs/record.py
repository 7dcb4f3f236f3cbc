"""The job record: what Firestore holds (`Job` and its parts) and its one codec here.

`docs/job-record.md` documents the same schema for writers in other languages;
`Job.to_document` / `Job.from_document` are its implementation, `decode_job` the decoder that
names what is wrong with a malformed document.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field, fields
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any

from services.jobs.errors import InvalidRecord, NewerRecord
from services.jobs.ids import derive_idempotency_key, job_id_problems
from services.jobs.parts import CancelRequest, Claim, ErrorInfo, Lease, Result
from services.jobs.shard import shard_of
from services.jobs.state import HistoryEntry, State

if TYPE_CHECKING:
    from services.jobs.model import NewJob

SCHEMA_VERSION = 1
DEFAULT_MAX_ATTEMPTS = 5
FIRST_ATTEMPT = 1  # a new job is in its first retry cycle


def as_utc(value: datetime, name: str = "a time") -> datetime:
    if not isinstance(value, datetime):
        raise TypeError(f"{name} is a {type(value).__name__}, not a timestamp")
    return value.astimezone(UTC)


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
    # The token of the last lease a worker's own transition out of running ended (complete,
    # fail, release, retry_later, cancel_running): how a delivery whose write's answer was
    # lost tells "my outcome applied" from "someone else moved the job".
    ended_lease_token: str | None = None
    # Who scheduled it through the API (the caller's email); None when scheduled otherwise
    # (jobsctl, a Python producer). Set once, never changed; the API's ownership rule reads it.
    producer: str | None = None
    # What an interrupted action finished (media: the objects already handled), so the next
    # delivery resumes with what is left; cleared on completion.
    progress: Mapping[str, Any] | None = None
    # Which slice of the due index holds this job (`shard_of`); records written before the
    # field existed read as shard 0.
    shard: int = 0
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
            "ended_lease_token": self.ended_lease_token,
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
        due_at = as_utc(data["due_at"], "due_at")
        created_at = as_utc(data["created_at"], "created_at")
        return cls(
            job_id=job_id,
            action=action,
            subject=str(data["subject"]),
            params=_map(_opt(data, "params") or {}, "params"),
            due_at=due_at,
            scheduled_due_at=as_utc(_opt(data, "scheduled_due_at") or due_at, "scheduled_due_at"),
            state=State(data["state"]),
            # Records written with the earlier layout's 0 are in their first cycle too.
            attempt=max(int(_opt(data, "attempt") or FIRST_ATTEMPT), FIRST_ATTEMPT),
            max_attempts=int(_opt(data, "max_attempts") or DEFAULT_MAX_ATTEMPTS),
            idempotency_key=str(
                _opt(data, "idempotency_key") or derive_idempotency_key(action, job_id)
            ),
            created_at=created_at,
            updated_at=as_utc(_opt(data, "updated_at") or created_at, "updated_at"),
            claim=(
                Claim(
                    run_id=str(claim.get("run_id", "")),
                    claimed_at=as_utc(claim["claimed_at"], "claim.claimed_at"),
                    generation=int(claim.get("generation", 0)),
                )
                if claim
                else None
            ),
            enqueued_at=maybe_utc(_opt(data, "enqueued_at"), "enqueued_at"),
            message_id=_opt_str(data, "message_id"),
            lease_until=maybe_utc(_opt(data, "lease_until"), "lease_until"),
            lease_owner=_opt_str(data, "lease_owner"),
            lease_token=_opt_str(data, "lease_token"),
            ended_lease_token=_opt_str(data, "ended_lease_token"),
            producer=_opt_str(data, "producer"),
            progress=_opt_map(data, "progress"),
            shard=_shard(_opt(data, "shard")),
            cancel_requested=(
                CancelRequest(
                    reason=str(cancel.get("reason", "")),
                    by=str(cancel.get("by", "")),
                    at=as_utc(cancel["at"], "cancel_requested.at"),
                )
                if cancel
                else None
            ),
            result=(
                Result(
                    outcome=str(result["outcome"]),
                    details=_map(result.get("details") or {}, "result.details"),
                    completed_at=maybe_utc(result.get("completed_at"), "result.completed_at"),
                )
                if result
                else None
            ),
            last_error=(
                ErrorInfo(
                    code=str(error.get("code", "")),
                    message=str(error.get("message", "")),
                    at=maybe_utc(error.get("at"), "last_error.at"),
                )
                if error
                else None
            ),
            history=tuple(HistoryEntry.from_document(e) for e in _list(data, "history")),
            expire_at=maybe_utc(_opt(data, "expire_at"), "expire_at"),
        )


_JOB_FIELDS = frozenset(f.name for f in fields(Job))


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
        newer = newer_version_problem(data)
        if newer is not None:
            raise NewerRecord(job_id, newer)
        # The ID is checked where every reader meets the record, as `schedule` checks it: a
        # record written past `schedule` (by hand, another language, a migration) with an ID
        # the worker's envelope refuses would otherwise be claimed, published, acknowledged as
        # bad_job_id and rescued back to the queue forever (issue 33, finding 3). As an
        # InvalidRecord it is quarantined by whoever reads it (the scan's claim first).
        bad_id = job_id_problems(job_id)
        if bad_id:
            raise InvalidRecord(job_id, "; ".join(bad_id))
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


def maybe_utc(value: datetime | None, name: str = "a time") -> datetime | None:
    return as_utc(value, name) if value is not None else None


_KNOWN_STATES = frozenset(state.value for state in State)


def newer_version_problem(data: Mapping[str, Any]) -> str | None:
    """Why `data` looks written by a newer version, or None: a `schema_version` above
    SCHEMA_VERSION, or a state this code does not know (a non-empty string, as a newer
    version would write; any other type is malformed) in the record or in a history entry.
    Such a record is left untouched, never quarantined: the runbook's rollback (deploy the
    previous revision) must not destroy what the newer revision wrote."""
    version = data.get("schema_version")
    if isinstance(version, int) and not isinstance(version, bool) and version > SCHEMA_VERSION:
        return f"schema_version {version} is newer than this code's {SCHEMA_VERSION}"
    if _unknown_state(data.get("state")):
        return f"state {data.get('state')!r} is unknown to this version"
    history = data.get("history")
    if isinstance(history, list):
        for entry in history:
            if not isinstance(entry, Mapping):
                continue
            for key in ("from", "to"):
                if _unknown_state(entry.get(key)):
                    return f"history state {entry.get(key)!r} is unknown to this version"
    return None


def _unknown_state(value: object) -> bool:
    return isinstance(value, str) and bool(value) and value not in _KNOWN_STATES
