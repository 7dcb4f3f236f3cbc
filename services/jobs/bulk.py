"""Actions over a filter: cancel, reschedule or replay every job a filter matches, safely.

The operator names a filter (state, action, subject prefix, due range, producer); the store
counts what it matches (`count_matching`, at a read time) and pages through exactly that set
at the same read time (`matching_page`), so the jobs acted on are the jobs the preview
counted, however the collection changes meanwhile. Each job is changed by the store's own
single-job operation (`cancel`, `reschedule`, `schedule` for a replay), each in its own
transaction that re-reads the job and checks its state (`services/jobs/transitions.py` owns
the rules): a job is either changed whole or left as it was, so stopping between two jobs, or
killing the process anywhere, leaves nothing half-done. A job that moved on since the preview
(completed meanwhile, say) is skipped with the state machine's reason, never overwritten.

A batch is bounded (`MAX_BATCH` jobs, a page of the filter); the caller runs batches until the
cursor is exhausted or the operator stops: the console's browser asks for one batch per
request, `jobsctl bulk` loops. Standard library only; the store and the test fake both satisfy
`BulkStore`.
"""

from __future__ import annotations

import hashlib
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from enum import StrEnum
from typing import Any, Protocol

from services.jobs.durations import parse_duration
from services.jobs.errors import (
    InvalidTransition,
    JobNotFound,
    ScheduleConflict,
    ValidationError,
)
from services.jobs.ids import MAX_ID_BYTES
from services.jobs.model import NewJob
from services.jobs.record import Job
from services.jobs.results import ScheduleResult
from services.jobs.state import State

# Jobs per batch: one page of the filter and as many single-job transactions; small enough
# that one request of the console answers in seconds.
DEFAULT_BATCH = 200
MAX_BATCH = 500
# Above this many jobs the operator types the exact count back before anything runs (the
# console's form and `jobsctl bulk --confirm`).
DEFAULT_CONFIRM_OVER = 100
# A read time is usable for about an hour (Firestore reads "within the past one hour" without
# point-in-time recovery: https://cloud.google.com/firestore/docs/reference/rpc/google.
# firestore.v1#runqueryrequest); an operation older than this is previewed again.
MAX_OPERATION_AGE = timedelta(minutes=55)


class BulkKind(StrEnum):
    CANCEL = "cancel"  # deferred, claimed, enqueued → cancelled; running → cancel requested
    RESCHEDULE = "reschedule"  # deferred → deferred with a new due_at
    REPLAY = "replay"  # failed → a new deferred job with the same action, subject and params


# The states each kind may run over: what the state machine lets the operator move out of.
KIND_STATES: Mapping[BulkKind, frozenset[State]] = {
    BulkKind.CANCEL: frozenset({State.DEFERRED, State.CLAIMED, State.ENQUEUED, State.RUNNING}),
    BulkKind.RESCHEDULE: frozenset({State.DEFERRED}),
    BulkKind.REPLAY: frozenset({State.FAILED}),
}

FILTER_FIELDS = ("state", "action", "subject_prefix", "due_from", "due_before", "producer")


@dataclass(frozen=True)
class JobFilter:
    """Which jobs: a state (required: every listing query is led by it), and optionally an
    action, a subject prefix, a due range [due_from, due_before) and a producer. State, action
    and due range are the query's (served by the (state, action, due_at) index); subject
    prefix and producer are checked on each document read."""

    state: State
    action: str | None = None
    subject_prefix: str | None = None
    due_from: datetime | None = None
    due_before: datetime | None = None
    producer: str | None = None

    @classmethod
    def parse(cls, fields: Mapping[str, str]) -> JobFilter:
        """From text fields (a URL's query, a CLI's options); ValidationError naming every bad
        field. Times are ISO 8601 with an offset (a trailing Z for UTC)."""
        problems: list[str] = []
        text = {k: (fields.get(k) or "").strip() for k in FILTER_FIELDS}
        state: State | None = None
        if not text["state"]:
            problems.append("state: required (one of " + ", ".join(s.value for s in State) + ")")
        else:
            try:
                state = State(text["state"])
            except ValueError:
                problems.append(f"state: {text['state'][:40]!r} is not a state")
        times: dict[str, datetime | None] = {}
        for name in ("due_from", "due_before"):
            times[name] = None
            if text[name]:
                try:
                    times[name] = parse_instant(text[name])
                except ValueError as exc:
                    problems.append(f"{name}: {exc}")
        if times["due_from"] and times["due_before"] and times["due_from"] >= times["due_before"]:
            problems.append("due_before: must be after due_from")
        if problems or state is None:
            raise ValidationError(problems)
        return cls(
            state=state,
            action=text["action"] or None,
            subject_prefix=text["subject_prefix"] or None,
            due_from=times["due_from"],
            due_before=times["due_before"],
            producer=text["producer"] or None,
        )

    def as_fields(self) -> dict[str, str]:
        """The filter as text fields (what `parse` reads back): for URLs and forms."""
        values: dict[str, Any] = {
            "state": self.state.value,
            "action": self.action,
            "subject_prefix": self.subject_prefix,
            "due_from": self.due_from and self.due_from.isoformat(),
            "due_before": self.due_before and self.due_before.isoformat(),
            "producer": self.producer,
        }
        return {k: str(v) for k, v in values.items() if v}

    @property
    def queried_only(self) -> bool:
        """True when the query alone decides (a count aggregation can preview it)."""
        return self.subject_prefix is None and self.producer is None

    def matches(self, job: Job) -> bool:
        """Whether `job` passes every part of the filter (the query's and the read-side's)."""
        return (
            job.state is self.state
            and (self.action is None or job.action == self.action)
            and (self.subject_prefix is None or job.subject.startswith(self.subject_prefix))
            and (self.producer is None or job.producer == self.producer)
            and (self.due_from is None or job.due_at >= self.due_from)
            and (self.due_before is None or job.due_at < self.due_before)
        )

    def describe(self) -> str:
        return ", ".join(f"{k}={v}" for k, v in self.as_fields().items())


def parse_instant(value: str) -> datetime:
    """An ISO 8601 time with an offset, in UTC; ValueError saying what is wrong."""
    try:
        parsed = datetime.fromisoformat(value)
    except ValueError:
        raise ValueError(f"{value[:40]!r} is not an ISO 8601 time") from None
    if parsed.tzinfo is None:
        raise ValueError(f"{value[:40]!r} has no offset (add Z for UTC)")
    return parsed.astimezone(UTC)


@dataclass(frozen=True)
class Change:
    """What to do to each matching job, and the words written into its history."""

    kind: BulkKind
    reason: str
    # A reschedule: to this time, or by this offset from each job's due_at.
    to: datetime | None = None
    offset: timedelta | None = None

    def __post_init__(self) -> None:
        if self.kind is BulkKind.RESCHEDULE and (self.to is None) == (self.offset is None):
            raise ValidationError("reschedule: give exactly one of a time (to) or an offset")

    @classmethod
    def parse(cls, kind: str, reason: str, to: str = "", offset: str = "") -> Change:
        """From text fields; ValidationError naming the field."""
        bulk_kind = parse_kind(kind)
        if not reason.strip():
            raise ValidationError("reason: required (it is written into each job's history)")
        if bulk_kind is not BulkKind.RESCHEDULE:
            return cls(bulk_kind, reason.strip())
        problems: list[str] = []
        when: datetime | None = None
        by: timedelta | None = None
        if to.strip():
            try:
                when = parse_instant(to.strip())
            except ValueError as exc:
                problems.append(f"to: {exc}")
        if offset.strip():
            try:
                by = signed_duration(offset.strip())
            except ValueError as exc:
                problems.append(f"offset: {exc}")
        if problems:
            raise ValidationError(problems)
        return cls(bulk_kind, reason.strip(), when, by)

    def require_state(self, state: State) -> None:
        require_kind_state(self.kind, state)

    def describe(self) -> str:
        if self.kind is BulkKind.RESCHEDULE:
            target = self.to.isoformat() if self.to else f"by {self.offset}"
            return f"reschedule ({target})"
        return self.kind.value


def parse_kind(kind: str) -> BulkKind:
    """A kind from text; ValidationError naming the field."""
    try:
        return BulkKind(kind)
    except ValueError:
        raise ValidationError(
            f"kind: {kind[:40]!r} is not one of {', '.join(k.value for k in BulkKind)}"
        ) from None


def require_kind_state(kind: BulkKind, state: State) -> None:
    """ValidationError naming `state` when `kind` cannot move a job out of it."""
    allowed = KIND_STATES[kind]
    if state not in allowed:
        names = ", ".join(sorted(s.value for s in allowed))
        raise ValidationError(f"state: {kind.value} runs over {names}, not {state.value}")


def signed_duration(value: str) -> timedelta:
    """`+2h`, `-30m`, `1d`: an offset, either way (services/jobs/durations.py's units)."""
    sign = -1 if value.startswith("-") else 1
    return sign * parse_duration(value.lstrip("+-"))


def replay_id(job_id: str, operation: str) -> str:
    """The new job a replay schedules: derived from the failed job and the operation, so a
    batch run twice schedules it once; ValidationError when it would not fit a document ID."""
    new = f"{job_id}.replay-{operation}"
    if len(new.encode()) > MAX_ID_BYTES:
        raise ValidationError(f"job_id: {job_id[:40]!r}… is too long to derive a replay ID")
    return new


def operation_id(by: str, at: datetime, fields: Mapping[str, str], change: Change) -> str:
    """A short, stable name for one operation (its replay IDs carry it)."""
    text = "|".join([by, at.isoformat(), repr(sorted(fields.items())), change.describe()])
    return hashlib.sha256(text.encode()).hexdigest()[:12]


@dataclass(frozen=True)
class MatchPage:
    """One page of the filter at a read time: the matching jobs, the cursor after each, and
    the cursor after everything read (None when the filter is exhausted)."""

    jobs: tuple[Job, ...]
    cursors: tuple[str, ...]
    next_cursor: str | None
    scanned: int  # documents read (billed) for this page


class BulkStore(Protocol):
    """What a bulk operation needs of the store (FirestoreJobStore; the test fake)."""

    def count_matching(self, job_filter: JobFilter) -> tuple[int, datetime]: ...

    def matching_page(
        self, job_filter: JobFilter, *, read_time: datetime | None, cursor: str | None, limit: int
    ) -> MatchPage: ...

    def cancel(self, job_id: str, reason: str, by: str) -> Job: ...

    def reschedule(self, job_id: str, due_at: datetime, reason: str, by: str) -> Job: ...

    def schedule(
        self, new_job: NewJob, *, by: str = ..., producer: str | None = ...
    ) -> ScheduleResult: ...


@dataclass(frozen=True)
class Batch:
    """What one batch did: the jobs changed, those skipped (with the state machine's reason),
    and where the next batch starts (None: done)."""

    changed: tuple[str, ...] = ()
    skipped: tuple[tuple[str, str], ...] = ()
    next_cursor: str | None = None
    scanned: int = 0
    stopped: bool = False  # the operator's stop came before the page was done

    @property
    def done(self) -> bool:
        return self.next_cursor is None and not self.stopped


# The errors that are about one job and leave it unchanged: skip it and go on.
_JOB_REFUSALS = (InvalidTransition, JobNotFound, ValidationError, ScheduleConflict)


def run_batch(
    store: BulkStore,
    job_filter: JobFilter,
    change: Change,
    *,
    by: str,
    operation: str,
    read_time: datetime,
    cursor: str | None,
    limit: int = DEFAULT_BATCH,
    now: datetime,
    stop: Callable[[], bool] = lambda: False,
) -> Batch:
    """Apply `change` to the next `limit` jobs of `job_filter` at `read_time` after `cursor`,
    one single-job operation each, writing `by` (the operator) into each job's history. `stop`
    is asked before each job: when it answers True the batch ends there, its cursor after the
    last job handled. A store outage (StoreUnavailable) propagates: every job before it was
    changed whole, and the caller resumes from the last cursor it saw."""
    if not 1 <= limit <= MAX_BATCH:
        raise ValidationError(f"limit: must be from 1 to {MAX_BATCH}")
    change.require_state(job_filter.state)
    if now - read_time > MAX_OPERATION_AGE:
        raise ValidationError(
            "read_time: the preview is older than "
            f"{int(MAX_OPERATION_AGE.total_seconds() // 60)} minutes; preview it again"
        )
    page = store.matching_page(job_filter, read_time=read_time, cursor=cursor, limit=limit)
    changed: list[str] = []
    skipped: list[tuple[str, str]] = []
    for job, after in zip(page.jobs, page.cursors, strict=True):
        if stop():
            return Batch(tuple(changed), tuple(skipped), cursor, page.scanned, stopped=True)
        try:
            _apply(store, job, change, by=by, operation=operation, now=now)
            changed.append(job.job_id)
        except _JOB_REFUSALS as exc:
            skipped.append((job.job_id, str(exc)))
        cursor = after
    return Batch(tuple(changed), tuple(skipped), page.next_cursor, page.scanned)


def _apply(
    store: BulkStore, job: Job, change: Change, *, by: str, operation: str, now: datetime
) -> None:
    reason = f"{change.reason} (bulk {change.kind.value} {operation})"
    if change.kind is BulkKind.CANCEL:
        store.cancel(job.job_id, reason, by)
    elif change.kind is BulkKind.RESCHEDULE:
        due_at = change.to if change.to is not None else job.due_at + (change.offset or ZERO)
        store.reschedule(job.job_id, due_at, reason, by)
    else:
        replay = NewJob(
            job_id=replay_id(job.job_id, operation),
            action=job.action,
            subject=job.subject,
            due_at=now,
            params=dict(job.params),
            max_attempts=job.max_attempts,
        )
        store.schedule(replay, by=f"{by}: {reason}; replay of {job.job_id}", producer=job.producer)


ZERO = timedelta(0)


@dataclass
class Progress:
    """A running total over batches (the console's page and `jobsctl bulk` print it)."""

    expected: int
    changed: int = 0
    skipped: int = 0
    batches: int = 0
    scanned: int = 0
    skipped_examples: list[tuple[str, str]] = field(default_factory=list)

    def add(self, batch: Batch) -> None:
        self.changed += len(batch.changed)
        self.skipped += len(batch.skipped)
        self.batches += 1
        self.scanned += batch.scanned
        room = 10 - len(self.skipped_examples)
        self.skipped_examples.extend(batch.skipped[: max(room, 0)])

    @property
    def handled(self) -> int:
        return self.changed + self.skipped


def check_preview(count: int, typed: str, threshold: int) -> None:
    """A typed confirmation above `threshold`: the operator types the exact count."""
    if count > threshold and typed.strip().replace(",", "") != str(count):
        raise ValidationError(
            f"confirm: type the number of jobs ({count}) to act on more than {threshold}"
        )


def examples(items: Sequence[tuple[str, str]]) -> str:
    return "; ".join(f"{job_id}: {why}" for job_id, why in items)
