"""The values the store returns: results of scheduling, claims, reclaims, listings, the
backlog figures, enqueue marks and idempotency records."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any, overload

from services.jobs.errors import JobsError
from services.jobs.layout import ShardCensus
from services.jobs.record import Job, as_utc, maybe_utc
from services.jobs.state import State


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
    # Why: claim_timeout, lease_expired, enqueued_timeout (a reclaim), or cancel_requested.
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
    # Non-terminal records the shard queries miss (JOBS_SHARDS > 1; exact, at read_time).
    shard_census: ShardCensus | None = None


@dataclass(frozen=True)
class NewerRecords:
    """Job documents written by a newer version, as counts can see them (a state unknown in
    one history entry only is not countable; the worker and the scan log those when met)."""

    newer_schema: int  # schema_version above this code's
    unknown_state: int  # a state that is none of this code's (or not a string, or missing)


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
            completed_at=as_utc(data["completed_at"]),
            expire_at=maybe_utc(data.get("expire_at")),
        )
