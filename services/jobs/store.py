"""FirestoreJobStore: every read and change of job records, each change in a transaction.

Each transition re-reads the document inside a Firestore transaction, asks
`state.apply_transition` for the new record (the only place the rules live), and writes only
the fields that changed. A lost race raises; nothing is ever overwritten blindly. Queries are
built as `QuerySpec` values so a test can prove each one is served by a declared index.
"""

from __future__ import annotations

import base64
import binascii
import dataclasses
import json
import logging
import random
import time
from collections.abc import Callable, Collection, Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any, TypeVar

from google.api_core import exceptions as api_exceptions
from google.api_core import retry as api_retry
from google.cloud import firestore
from google.cloud.firestore_v1.base_query import FieldFilter

from services.jobs import schema
from services.jobs.clock import Clock
from services.jobs.control import Control
from services.jobs.errors import (
    AlreadyTerminal,
    AttemptsExhausted,
    InvalidTransition,
    JobNotFound,
    JobsError,
    LeaseHeld,
    LeaseLost,
    LostRace,
    ScheduleConflict,
    StaleGeneration,
    StoreUnavailable,
    ValidationError,
)
from services.jobs.model import (
    DEFAULT_ACTIONS,
    Backlog,
    CancelRequest,
    Claim,
    ClaimedJob,
    EnqueueMark,
    ErrorInfo,
    IdempotencyRecord,
    Job,
    NewJob,
    Page,
    Reclaimed,
    Result,
    ScheduleResult,
    Stats,
)
from services.jobs.state import (
    DEFAULT_HISTORY_LIMIT,
    HistoryEntry,
    Role,
    State,
    apply_transition,
)

logger = logging.getLogger(__name__)

T = TypeVar("T")

CLAIM_PAGE_SIZE = 100  # documents claimed per transaction
MARK_PAGE_SIZE = 100  # documents marked enqueued per transaction
DEFAULT_TERMINAL_RETENTION = timedelta(days=30)
# Without these the client waits up to 300 s for a read and 60 s for a commit when Firestore is
# unreachable; a scan run or a push must answer 503 long before Pub/Sub or the scheduler gives up.
DEFAULT_CALL_TIMEOUT_S = 10.0
_TRANSACTION_ATTEMPTS = 5  # the client's own retries of an ABORTED commit
_CONTENTION_ROUNDS = 8  # our retries, with jittered backoff, once the client gives up
_MAX_LIST_LIMIT = 500
# A decision's identity beyond its job ID (docs/job-record.md, "Scheduling twice"): the same
# values again are the same decision. The due time is not part of it: a retry of `--due +30d`
# computes a new instant for the same decision.
_SCHEDULE_COMPARED = ("action", "subject", "params", "max_attempts", "idempotency_key")
_MAX_SCHEDULE_BATCH = 500  # Firestore's writes per batched write
ScheduleOutcome = ScheduleResult | ValidationError | ScheduleConflict


def same_decision(requested: NewJob, existing: Job) -> ScheduleResult:
    """The existing job when `requested` is the same decision; else ScheduleConflict.

    The one decision-identity rule: every JobStore implementation (fakes included) calls it.
    """
    different = [
        name
        for field_name in _SCHEDULE_COMPARED
        for name in _differences(field_name, requested, existing)
    ]
    if different:
        raise ScheduleConflict(requested.job_id, different)
    return ScheduleResult(existing, created=False)


def _decision_outcome(requested: NewJob, existing: Job) -> ScheduleResult | ScheduleConflict:
    try:
        return same_decision(requested, existing)
    except ScheduleConflict as exc:
        return exc


def _differences(field_name: str, requested: NewJob, existing: Job) -> list[str]:
    """The names that differ: `params.<key>` per params key, else the field itself."""
    if field_name != "params":
        same = getattr(requested, field_name) == getattr(existing, field_name)
        return [] if same else [field_name]
    asked, stored = dict(requested.params), dict(existing.params)
    return [
        f"params.{key}"
        for key in sorted(set(asked) | set(stored))
        if key not in asked
        or key not in stored
        or _canonical(asked[key]) != _canonical(stored[key])
    ]


def _canonical(value: Any) -> str:
    # Tuples read back from Firestore as lists; JSON text compares the values, not containers.
    return json.dumps(value, sort_keys=True, separators=(",", ":"))


# --- queries as data ----------------------------------------------------------------------


@dataclass(frozen=True)
class QuerySpec:
    """One query the store runs: equalities, at most one range field, order, limit, cursor."""

    collection: str
    equals: tuple[tuple[str, Any], ...] = ()
    ranges: tuple[tuple[str, str, Any], ...] = ()  # (field, operator, value)
    order_by: tuple[str, ...] = ()  # ascending; the implicit __name__ tiebreak follows
    limit: int | None = None
    start_after: tuple[Any, ...] | None = None  # order_by values, then the document ID

    @property
    def shape(self) -> schema.QueryShape:
        ordered = list(self.order_by)
        ordered += [f for f, _, _ in self.ranges if f not in ordered]
        return schema.QueryShape(
            self.collection,
            frozenset(f for f, _ in self.equals),
            tuple(schema.IndexField(f) for f in ordered),
        )


def due_query(now: datetime, limit: int | None) -> QuerySpec:
    """Deferred jobs due at or before `now`, oldest due first."""
    return QuerySpec(
        schema.JOBS,
        equals=(("state", State.DEFERRED.value),),
        ranges=(("due_at", "<=", now),),
        order_by=("due_at",),
        limit=limit,
    )


def expired_claims_query(cutoff: datetime, limit: int | None) -> QuerySpec:
    """Claimed jobs whose claim was taken before `cutoff`, oldest first."""
    return QuerySpec(
        schema.JOBS,
        equals=(("state", State.CLAIMED.value),),
        ranges=(("claim.claimed_at", "<", cutoff),),
        order_by=("claim.claimed_at",),
        limit=limit,
    )


def expired_leases_query(now: datetime, limit: int | None) -> QuerySpec:
    """Running jobs whose lease ended before `now`, oldest first."""
    return QuerySpec(
        schema.JOBS,
        equals=(("state", State.RUNNING.value),),
        ranges=(("lease_until", "<", now),),
        order_by=("lease_until",),
        limit=limit,
    )


def enqueued_query(before: datetime | None, limit: int | None) -> QuerySpec:
    """Enqueued jobs (published before `before`, when given), oldest publish first."""
    ranges: tuple[tuple[str, str, Any], ...] = ()
    if before is not None:
        ranges = (("enqueued_at", "<", before),)
    return QuerySpec(
        schema.JOBS,
        equals=(("state", State.ENQUEUED.value),),
        ranges=ranges,
        order_by=("enqueued_at",),
        limit=limit,
    )


def state_query(state: State) -> QuerySpec:
    """Every job in `state` (counted, never streamed)."""
    return QuerySpec(schema.JOBS, equals=(("state", state.value),))


def list_query(
    *,
    state: State | None = None,
    due_before: datetime | None = None,
    overdue_at: datetime | None = None,
    claimed_before: datetime | None = None,
    limit: int = 50,
    after: tuple[Any, ...] | None = None,
) -> QuerySpec:
    """The operator's listing: one optional state, at most one time filter, in time order.

    `due_before`: due_at < T. `overdue_at`: deferred with due_at <= T. `claimed_before`:
    claimed with claim.claimed_at < T. Raises ValidationError for combinations no index serves.
    """
    if sum(x is not None for x in (due_before, overdue_at, claimed_before)) > 1:
        raise ValidationError("use at most one of due_before, overdue_at, claimed_before")
    equals: tuple[tuple[str, Any], ...] = (("state", state.value),) if state else ()
    ranges: tuple[tuple[str, str, Any], ...] = ()
    order = "due_at"
    if overdue_at is not None:
        if state not in (None, State.DEFERRED):
            raise ValidationError("overdue_at lists deferred jobs; drop the state filter")
        equals = (("state", State.DEFERRED.value),)
        ranges = (("due_at", "<=", overdue_at),)
    elif claimed_before is not None:
        if state not in (None, State.CLAIMED):
            raise ValidationError("claimed_before lists claimed jobs; drop the state filter")
        equals = (("state", State.CLAIMED.value),)
        ranges = (("claim.claimed_at", "<", claimed_before),)
        order = "claim.claimed_at"
    elif due_before is not None:
        ranges = (("due_at", "<", due_before),)
    return QuerySpec(
        schema.JOBS,
        equals=equals,
        ranges=ranges,
        order_by=(order,),
        limit=limit,
        start_after=after,
    )


def _encode_cursor(order_value: datetime, job_id: str) -> str:
    raw = json.dumps([order_value.astimezone(UTC).isoformat(), job_id]).encode()
    return base64.urlsafe_b64encode(raw).decode().rstrip("=")


def _decode_cursor(cursor: str) -> tuple[datetime, str]:
    try:
        padded = cursor + "=" * (-len(cursor) % 4)
        value, job_id = json.loads(base64.urlsafe_b64decode(padded.encode()))
        return datetime.fromisoformat(value), str(job_id)
    except (ValueError, TypeError, binascii.Error) as exc:
        raise ValidationError(f"cursor {cursor[:40]!r} is not one this store returned") from exc


# --- bounded calls --------------------------------------------------------------------------


def bounded_retry(deadline_s: float) -> api_retry.Retry:
    """Retry transient Firestore errors with backoff, giving up after `deadline_s` in all."""
    return api_retry.Retry(
        predicate=api_retry.if_exception_type(
            api_exceptions.ServiceUnavailable,
            api_exceptions.DeadlineExceeded,
            api_exceptions.InternalServerError,
            api_exceptions.ResourceExhausted,
        ),
        initial=0.1,
        maximum=2.0,
        multiplier=2.0,
        timeout=deadline_s,
    )


@dataclass(frozen=True)
class CallBounds:
    """The per-call timeout and the retry every Firestore request of a store gets.

    `retry` None means `bounded_retry(2 * timeout_s)`: a couple of attempts, then 503.
    """

    timeout_s: float = DEFAULT_CALL_TIMEOUT_S
    retry: api_retry.Retry | None = None

    def __post_init__(self) -> None:
        if not self.timeout_s > 0:
            raise ValueError("timeout_s must be positive")

    @property
    def kwargs(self) -> dict[str, Any]:
        """`retry=` and `timeout=` for a read (get, query, aggregation, get_all)."""
        return {"retry": self.retry or bounded_retry(2 * self.timeout_s), "timeout": self.timeout_s}

    @property
    def write_kwargs(self) -> dict[str, Any]:
        """For a single write: timeout only, since a retried create would answer AlreadyExists
        for its own first attempt."""
        return {"retry": None, "timeout": self.timeout_s}


class BoundedTransaction(firestore.Transaction):
    """A transaction whose begin, commit and rollback carry a timeout.

    The client's Transaction sends them with the generated defaults (60 s and its own retries)
    and takes no timeout argument, so these three calls are re-issued here with one.
    """

    def __init__(self, client: firestore.Client, bounds: CallBounds, max_attempts: int) -> None:
        super().__init__(client, max_attempts=max_attempts)
        self._bounds = bounds

    def _begin(self, retry_id: bytes | None = None) -> None:
        if self.in_progress:
            raise ValueError(f"transaction {self._id!r} already begun")
        response = self._client._firestore_api.begin_transaction(
            request={
                "database": self._client._database_string,
                "options": self._options_protobuf(retry_id),
            },
            metadata=self._client._rpc_metadata,
            **self._bounds.kwargs,
        )
        self._id = response.transaction

    def _rollback(self) -> None:
        # Called on any error in the body or commit. When begin itself failed there is
        # nothing to roll back, and a failed rollback must not hide the error that caused it:
        # Firestore expires an abandoned transaction on its own.
        if not self.in_progress:
            return
        try:
            self._client._firestore_api.rollback(
                request={"database": self._client._database_string, "transaction": self._id},
                metadata=self._client._rpc_metadata,
                **self._bounds.write_kwargs,
            )
        except (api_exceptions.GoogleAPICallError, api_exceptions.RetryError) as exc:
            logger.warning("transaction rollback failed: %s", type(exc).__name__)
        finally:
            self._clean_up()

    def _commit(self) -> list[Any]:
        if not self.in_progress:
            raise ValueError("no transaction in progress to commit")
        response = self._client._firestore_api.commit(
            request={
                "database": self._client._database_string,
                "writes": self._write_pbs,
                "transaction": self._id,
            },
            metadata=self._client._rpc_metadata,
            **self._bounds.write_kwargs,
        )
        self._clean_up()
        self.write_results = list(response.write_results)
        self.commit_time = response.commit_time
        return self.write_results


# --- the store ----------------------------------------------------------------------------


class FirestoreJobStore:
    """The jobs collection and its companions (idempotency, control) in Firestore."""

    def __init__(
        self,
        client: firestore.Client,
        clock: Clock,
        *,
        history_limit: int = DEFAULT_HISTORY_LIMIT,
        terminal_retention: timedelta = DEFAULT_TERMINAL_RETENTION,
        known_actions: Collection[str] = DEFAULT_ACTIONS,
        query_observer: Callable[[QuerySpec], None] | None = None,
        timeout_s: float = DEFAULT_CALL_TIMEOUT_S,
        retry: api_retry.Retry | None = None,
    ) -> None:
        if history_limit < 1:
            raise ValueError("history_limit must be at least 1")
        if terminal_retention <= timedelta(0):
            raise ValueError("terminal_retention must be positive")
        self._client = client
        self._clock = clock
        self._history_limit = history_limit
        self._retention = terminal_retention
        self._known_actions = frozenset(known_actions)
        self._observe = query_observer
        self._bounds = CallBounds(timeout_s, retry)

    @property
    def clock(self) -> Clock:
        return self._clock

    # -- application -----------------------------------------------------------------------

    def schedule(self, new_job: NewJob, *, by: str = "application") -> ScheduleResult:
        """Create a deferred job, idempotent by the decision's identity.

        The same decision again (job ID, action, subject, params, max_attempts, idempotency
        key; never the due time, so a retry of `+30d` matches) returns the existing job with
        created=False and writes nothing. A different value of one of those under the same
        ID raises ScheduleConflict naming each differing field. Invalid input (including
        params that do not fit the action's schema) raises ValidationError and writes
        nothing. Costs 1 write when new (no read), 1 read when it exists.
        """
        valid = new_job.validated(self._known_actions)
        job = self._new_record(valid, by)
        ref = self._jobs.document(valid.job_id)
        with _store_errors():
            try:
                ref.create(job.to_document(), **self._bounds.write_kwargs)
                logger.info("scheduled job %s due %s", job.job_id, job.due_at.isoformat())
                return ScheduleResult(job, created=True)
            except api_exceptions.AlreadyExists:
                snapshot = ref.get(**self._bounds.kwargs)
        if not snapshot.exists:  # deleted (TTL) between our create and read
            raise LostRace(f"job {valid.job_id!r} vanished while scheduling; retry")
        return same_decision(valid, Job.from_document(valid.job_id, snapshot.to_dict() or {}))

    def schedule_many(
        self, new_jobs: Sequence[NewJob], *, by: str = "application"
    ) -> list[ScheduleOutcome]:
        """`schedule` for up to 500 jobs in batched writes: each item's outcome, in order, is
        its ScheduleResult or the error refusing it (the others are still scheduled). Same
        identity rule as `schedule`; an ID twice in one call is compared with its first
        occurrence. Firestore errors raise StoreUnavailable.

        Costs 1 write per new job and no read when none exists yet (the batch of creates
        commits); when one does, that commit changes nothing and one batched read (1 read
        per job) settles which are new."""
        if len(new_jobs) > _MAX_SCHEDULE_BATCH:
            raise ValidationError(f"at most {_MAX_SCHEDULE_BATCH} jobs per call")
        outcomes: list[ScheduleOutcome | None] = [None] * len(new_jobs)
        valid: dict[int, NewJob] = {}
        for index, new_job in enumerate(new_jobs):
            try:
                valid[index] = new_job.validated(self._known_actions)
            except ValidationError as exc:
                outcomes[index] = exc
        if not self._create_batch(valid, {}, outcomes, by):
            refs = [self._jobs.document(v.job_id) for v in valid.values()]
            with _store_errors():
                found = {
                    s.id: Job.from_document(s.id, s.to_dict() or {})
                    for s in self._client.get_all(refs, **self._bounds.kwargs)
                    if s.exists
                }
            if not self._create_batch(valid, found, outcomes, by):
                # A writer created one of them since our read: settle each one on its own.
                for index, new in valid.items():
                    if new.job_id not in found:
                        outcomes[index] = self._schedule_outcome(new, by)
        return [outcome for outcome in outcomes if outcome is not None]

    def _create_batch(
        self,
        valid: Mapping[int, NewJob],
        existing: Mapping[str, Job],
        outcomes: list[ScheduleOutcome | None],
        by: str,
    ) -> bool:
        """Create, in one batched write, every job of `valid` not in `existing`, filling in
        each outcome; False when one already existed (a batched write is atomic: nothing was
        written, and the caller settles again)."""
        batch = self._client.batch()
        pending: dict[str, Job] = {}
        for index, new in valid.items():
            known = existing.get(new.job_id) or pending.get(new.job_id)
            if known is not None:
                outcomes[index] = _decision_outcome(new, known)
                continue
            job = self._new_record(new, by)
            batch.create(self._jobs.document(new.job_id), job.to_document())
            pending[new.job_id] = job
            outcomes[index] = ScheduleResult(job, created=True)
        if not pending:
            return True
        with _store_errors():
            try:
                batch.commit(**self._bounds.write_kwargs)
            except api_exceptions.AlreadyExists:
                return False
        logger.info("scheduled %d jobs in one batched write", len(pending))
        return True

    def _schedule_outcome(self, new: NewJob, by: str) -> ScheduleOutcome:
        try:
            return self.schedule(new, by=by)
        except ScheduleConflict as exc:
            return exc

    def _new_record(self, valid: NewJob, by: str) -> Job:
        now = self._clock.now()
        created = HistoryEntry(now, None, State.DEFERRED, f"{Role.APPLICATION}:{by}", "scheduled")
        return Job.create(valid, now, history=(created,))

    # -- operator --------------------------------------------------------------------------

    def cancel(self, job_id: str, reason: str, by: str) -> Job:
        """Cancel a job. Deferred, claimed or enqueued → cancelled. Running → records
        cancel_requested (the worker honours it; state stays running). Terminal →
        AlreadyTerminal, unchanged. Missing → JobNotFound."""
        _require_text(reason=reason, by=by)

        def change(job: Job, now: datetime) -> Job:
            if job.state is State.RUNNING:
                if job.cancel_requested is not None:
                    return job
                request = CancelRequest(reason=reason, by=f"{Role.OPERATOR}:{by}", at=now)
                return dataclasses.replace(job, cancel_requested=request, updated_at=now)
            return self._apply(
                job, State.CANCELLED, Role.OPERATOR, by, now, reason, expire_at=self._expiry(now)
            )

        return self._transition(job_id, change)

    def reschedule(self, job_id: str, due_at: datetime, reason: str, by: str) -> Job:
        """Move a deferred job's due_at (and so its claim time). Any other state →
        InvalidTransition. A failed job is re-scheduled as a new job ID instead."""
        _require_text(reason=reason, by=by)
        new_due = _require_aware(due_at, "due_at")

        def change(job: Job, now: datetime) -> Job:
            why = f"{reason} (due_at {job.due_at.isoformat()} → {new_due.isoformat()})"
            return self._apply(job, State.DEFERRED, Role.OPERATOR, by, now, why, due_at=new_due)

        return self._transition(job_id, change)

    def get(self, job_id: str) -> Job | None:
        """The job, or None. One read."""
        with _store_errors():
            snapshot = self._jobs.document(job_id).get(**self._bounds.kwargs)
        return Job.from_document(job_id, snapshot.to_dict() or {}) if snapshot.exists else None

    def list_jobs(
        self,
        *,
        state: State | None = None,
        due_before: datetime | None = None,
        overdue_at: datetime | None = None,
        claimed_before: datetime | None = None,
        limit: int = 50,
        cursor: str | None = None,
    ) -> Page:
        """One page of jobs in time order (due_at, or claim time with `claimed_before`).

        Pass the returned `next_cursor` back for the next page. Filters: see `list_query`.
        """
        if not 1 <= limit <= _MAX_LIST_LIMIT:
            raise ValidationError(f"limit must be from 1 to {_MAX_LIST_LIMIT}")
        for name, value in (
            ("due_before", due_before),
            ("overdue_at", overdue_at),
            ("claimed_before", claimed_before),
        ):
            if value is not None:
                _require_aware(value, name)
        after = _decode_cursor(cursor) if cursor else None
        spec = list_query(
            state=state,
            due_before=due_before,
            overdue_at=overdue_at,
            claimed_before=claimed_before,
            limit=limit + 1,  # one more tells whether another page exists
            after=after,
        )
        with _store_errors():
            jobs = [Job.from_document(s.id, s.to_dict() or {}) for s in self._stream(spec)]
        more = len(jobs) > limit
        jobs = jobs[:limit]
        next_cursor = None
        if more:
            last = jobs[-1]
            order_value = last.claim.claimed_at if claimed_before and last.claim else last.due_at
            next_cursor = _encode_cursor(order_value, last.job_id)
        return Page(tuple(jobs), next_cursor)

    def stats(self, now: datetime, claim_timeout: timedelta) -> Stats:
        """Backlog figures from count aggregations and one limit-1 query; never reads every
        document. Every figure is read at one snapshot: the first count's server read time,
        passed to the others (https://cloud.google.com/firestore/docs/reference/rpc/google.
        firestore.v1#runaggregationqueryrequest), so a job moving between states mid-way is
        counted once, in one state."""
        with _store_errors():
            first = self._query(state_query(State.DEFERRED)).count(alias="n")
            results = first.get(**self._bounds.kwargs)
            read_time = results[0][0].read_time if results and results[0] else None
            per_state = {State.DEFERRED: int(results[0][0].value) if results else 0}
            per_state |= {
                state: self._count(state_query(state), read_time=read_time)
                for state in State
                if state is not State.DEFERRED
            }
            oldest = list(self._stream(due_query(now, 1), read_time=read_time))
            due_count = self._count(due_query(now, None), read_time=read_time)
            stuck = self._count(
                expired_claims_query(now - claim_timeout, None), read_time=read_time
            )
            expired = self._count(expired_leases_query(now, None), read_time=read_time)
        age = None
        if oldest:
            due_at = Job.from_document(oldest[0].id, oldest[0].to_dict() or {}).due_at
            age = max((now - due_at).total_seconds(), 0.0)
        return Stats(
            oldest_overdue_age_s=age,
            due_count=due_count,
            stuck_claims=stuck,
            expired_leases=expired,
            per_state={state: per_state[state] for state in State},
            read_time=read_time,
        )

    def backlog(
        self, now: datetime, claim_timeout: timedelta, enqueued_timeout: timedelta
    ) -> Backlog:
        """What the scan measures every run: 3 count aggregations and 2 limit-1 queries.

        `stale_enqueued` counts jobs enqueued (published) before now - enqueued_timeout: their
        message may be gone (dead letter expired, subscription recreated), so nothing else
        would ever move them. Terminal states are never counted, so the cost stays flat as
        retention grows; `stats` (every state) is for the operator.
        """
        if claim_timeout <= timedelta(0) or enqueued_timeout <= timedelta(0):
            raise ValidationError("claim_timeout and enqueued_timeout must be positive")
        with _store_errors():
            oldest_due = list(self._stream(due_query(now, 1)))
            oldest_enqueued = list(self._stream(enqueued_query(None, 1)))
            due_count = self._count(due_query(now, None))
            stuck = self._count(expired_claims_query(now - claim_timeout, None))
            stale = self._count(enqueued_query(now - enqueued_timeout, None))
        return Backlog(
            oldest_overdue_age_s=_age(now, oldest_due, "due_at"),
            due_count=due_count,
            stuck_claims=stuck,
            stale_enqueued=stale,
            oldest_enqueued_age_s=_age(now, oldest_enqueued, "enqueued_at"),
        )

    def get_control(self) -> Control:
        """The operator's control settings; defaults when the document does not exist."""
        with _store_errors():
            snapshot = self._control_ref.get(**self._bounds.kwargs)
        return Control.from_document(snapshot.to_dict() if snapshot.exists else None)

    def update_control(self, by: str, reason: str, **changes: Any) -> Control:
        """Change control settings (paused, claim_budget, catch_up_rate, claim_timeout),
        validated and audited with who and why; ValidationError writes nothing."""
        Control().changed(by=by, reason=reason, at=self._clock.now(), **dict(changes))
        ref = self._control_ref

        def body(transaction: firestore.Transaction) -> Control:
            snapshot = self._get_in(transaction, ref)
            current = Control.from_document(snapshot.to_dict() if snapshot.exists else None)
            updated = current.changed(by=by, reason=reason, at=self._clock.now(), **dict(changes))
            transaction.set(ref, updated.to_document())
            return updated

        return self._run(body)

    # -- scan --------------------------------------------------------------------------------

    def claim_due(
        self, now: datetime, run_id: str, limit: int, *, page_size: int = CLAIM_PAGE_SIZE
    ) -> list[ClaimedJob]:
        """Claim up to `limit` deferred jobs due at or before `now`, oldest due first.

        Each page is one transaction that queries and claims (generation + 1), so overlapping
        callers never claim the same job: 1 read + 1 write per claimed job, 1 read when nothing
        is due. If contention persists after some pages were claimed, returns those (they are
        committed and must be published); with none claimed it raises LostRace.
        """
        _require_text(run_id=run_id)
        if limit < 0 or page_size < 1:
            raise ValidationError("limit must be >= 0 and page_size >= 1")
        claimed: list[ClaimedJob] = []
        while len(claimed) < limit:
            want = min(page_size, limit - len(claimed))
            try:
                page = self._run(self._claim_page, now, run_id, want)
            except LostRace:
                if not claimed:
                    raise
                logger.warning("claim_due %s stopped by contention after %d", run_id, len(claimed))
                break
            claimed.extend(page)
            if len(page) < want:
                break
        return claimed

    def _claim_page(
        self, transaction: firestore.Transaction, now: datetime, run_id: str, want: int
    ) -> list[ClaimedJob]:
        at = self._clock.now()
        claimed = []
        for snapshot in self._stream(due_query(now, want), transaction):
            job = Job.from_document(snapshot.id, snapshot.to_dict() or {})
            claim = Claim(run_id=run_id, claimed_at=at, generation=job.generation + 1)
            new = self._apply(
                job,
                State.CLAIMED,
                Role.SCAN,
                run_id,
                at,
                f"due at {job.due_at.isoformat()}",
                claim=claim,
            )
            transaction.update(snapshot.reference, _diff(job, new))
            claimed.append(ClaimedJob(job.job_id, claim.generation, job.due_at, at, job.action))
        return claimed

    def mark_enqueued(
        self, job_id: str, generation: int, message_id: str, at: datetime | None = None
    ) -> Job:
        """Claimed → enqueued with the message ID (publish acknowledged at `at`).

        Already enqueued, or the worker got the push first (running or terminal, same
        generation): only the message ID is recorded; the job never moves backwards.
        Another generation → StaleGeneration; deferred (e.g. reclaimed) → InvalidTransition.
        """
        _require_text(message_id=message_id)

        def change(job: Job, now: datetime) -> Job:
            return self._enqueued(job, generation, message_id, at or now, now)

        return self._transition(job_id, change)

    def mark_enqueued_many(
        self,
        items: Sequence[tuple[str, int, str]],
        at: datetime | None = None,
        *,
        page_size: int = MARK_PAGE_SIZE,
    ) -> list[EnqueueMark]:
        """`mark_enqueued` for many (job_id, generation, message_id), one transaction per page.

        Each item gets exactly mark_enqueued's outcome, as an EnqueueMark in input order: the
        job as written, or the error mark_enqueued would raise (StaleGeneration,
        InvalidTransition, JobNotFound, ValidationError). 1 read + 1 write per job. A page
        that cannot be written (contention, Firestore down) marks its items with that error.
        """
        if page_size < 1:
            raise ValidationError("page_size must be at least 1")
        marks: list[EnqueueMark] = []
        for start in range(0, len(items), page_size):
            page = list(items[start : start + page_size])
            try:
                marks.extend(self._run(self._mark_page, page, at))
            except (LostRace, StoreUnavailable) as exc:
                marks.extend(
                    EnqueueMark(job_id, generation, error=exc) for job_id, generation, _ in page
                )
        return marks

    def _mark_page(
        self,
        transaction: firestore.Transaction,
        page: list[tuple[str, int, str]],
        at: datetime | None,
    ) -> list[EnqueueMark]:
        now = self._clock.now()
        valid = {job_id for job_id, _, message_id in page if _text_ok(job_id, message_id)}
        refs = [self._jobs.document(job_id) for job_id in sorted(valid)]
        before: dict[str, Job] = {}
        if refs:
            for snapshot in transaction.get_all(refs, **self._bounds.kwargs):
                if snapshot.exists:
                    before[snapshot.id] = Job.from_document(snapshot.id, snapshot.to_dict() or {})
        current = dict(before)
        marks = []
        for job_id, generation, message_id in page:
            if job_id not in valid:
                error: JobsError = ValidationError(
                    "job_id and message_id must be non-empty strings"
                )
                marks.append(EnqueueMark(job_id, generation, error=error))
            elif job_id not in current:
                marks.append(EnqueueMark(job_id, generation, error=JobNotFound(job_id)))
            else:
                try:
                    job = self._enqueued(current[job_id], generation, message_id, at or now, now)
                except JobsError as exc:
                    marks.append(EnqueueMark(job_id, generation, error=exc))
                else:
                    current[job_id] = job
                    marks.append(EnqueueMark(job_id, generation, job=job))
        for job_id, job in current.items():
            diff = _diff(before[job_id], job)
            if diff:
                transaction.update(self._jobs.document(job_id), diff)
        return marks

    def _enqueued(
        self, job: Job, generation: int, message_id: str, at: datetime, now: datetime
    ) -> Job:
        """The job after its publish was acknowledged at `at`: the rules of mark_enqueued."""
        if job.claim is None:
            raise InvalidTransition(job.job_id, job.state, State.ENQUEUED, "never claimed")
        _require_generation(job, generation)
        if job.state not in (State.CLAIMED, State.DEFERRED):
            # Already enqueued, or the push reached a worker first: never move it
            # backwards; record the message ID at most (a repeat call is a no-op).
            if job.message_id == message_id:
                return job
            return dataclasses.replace(job, message_id=message_id, updated_at=now)
        return self._apply(
            job,
            State.ENQUEUED,
            Role.SCAN,
            _claimant(job),
            now,
            f"published as message {message_id}",
            enqueued_at=at,
            message_id=message_id,
        )

    # Alias carrying the precondition in its name (STYLE.md).
    mark_enqueued_if_claimed = mark_enqueued

    def mark_enqueue_failed(self, job_id: str, generation: int, error: ErrorInfo) -> Job:
        """Claimed → deferred after a failed publish, with last_error and an audit entry; the
        job stays due, so a later run publishes it again."""

        def change(job: Job, now: datetime) -> Job:
            _require_generation(job, generation)
            return self._apply(
                job,
                State.DEFERRED,
                Role.SCAN,
                _claimant(job),
                now,
                f"publish failed: {error.code}",
                last_error=_stamped(error, now),
            )

        return self._transition(job_id, change)

    def reclaim_expired(
        self, now: datetime, claim_timeout: timedelta, limit: int, run_id: str
    ) -> list[Reclaimed]:
        """Take back abandoned work, at most `limit` jobs, each audited by `reclaimer:<run_id>`.

        Claimed with claim.claimed_at older than now - claim_timeout → deferred (same
        generation; the next claim bumps it). Running whose lease_until < now (the worker
        crashed mid-action): that retry cycle is spent, so → deferred with attempt + 1 (due at
        once, as before), or failed when it was the last; a crash loop therefore ends. The query
        runs inside each transaction, so a fresh claim or a renewed lease is never touched.
        """
        _require_text(run_id=run_id)
        if claim_timeout <= timedelta(0):
            raise ValidationError("claim_timeout must be positive")
        reclaimed: list[Reclaimed] = []
        cutoff = now - claim_timeout
        for spec_for, step in (
            (lambda n: expired_claims_query(cutoff, n), self._reclaim_claim),
            (lambda n: expired_leases_query(now, n), self._reclaim_lease),
        ):
            while len(reclaimed) < limit:
                want = min(CLAIM_PAGE_SIZE, limit - len(reclaimed))
                page = self._run(self._reclaim_page, spec_for(want), step, run_id)
                reclaimed.extend(page)
                if len(page) < want:
                    break
        if reclaimed:
            logger.warning("reclaimed %d job(s) in run %s", len(reclaimed), run_id)
        return reclaimed

    def _reclaim_page(
        self,
        transaction: firestore.Transaction,
        spec: QuerySpec,
        step: Callable[[Job, datetime, str], Job],
        run_id: str,
    ) -> list[Reclaimed]:
        at = self._clock.now()
        page = []
        for snapshot in self._stream(spec, transaction):
            job = Job.from_document(snapshot.id, snapshot.to_dict() or {})
            new = step(job, at, run_id)
            transaction.update(snapshot.reference, _diff(job, new))
            page.append(Reclaimed(job.job_id, job.state, new.state, job.generation))
        return page

    def _reclaim_claim(self, job: Job, at: datetime, run_id: str) -> Job:
        claimed_at = job.claim.claimed_at.isoformat() if job.claim else "unknown"
        reason = f"claim by {_claimant(job)} at {claimed_at} exceeded the claim timeout"
        return self._apply(job, State.DEFERRED, Role.RECLAIMER, run_id, at, reason)

    def _reclaim_lease(self, job: Job, at: datetime, run_id: str) -> Job:
        until = job.lease_until.isoformat() if job.lease_until else "unknown"
        reason = f"lease of {job.lease_owner} expired at {until}"
        error = ErrorInfo("lease_expired", reason, at)
        if not _attempt_left(job):
            return self._apply(
                job,
                State.FAILED,
                Role.RECLAIMER,
                run_id,
                at,
                f"{reason}; attempt {job.attempt} of {job.max_attempts} was the last",
                last_error=error,
                expire_at=self._expiry(at),
                **_NO_LEASE,
            )
        return self._apply(
            job,
            State.DEFERRED,
            Role.RECLAIMER,
            run_id,
            at,
            f"{reason}; attempt {job.attempt + 1} of {job.max_attempts} next",
            attempt=job.attempt + 1,
            last_error=error,
            **_NO_LEASE,
        )

    # -- worker ----------------------------------------------------------------------------
    # cancel_running, release, complete, retry_later and fail need the caller's running lease
    # of this generation; without it they raise LeaseLost and change nothing.

    def start(self, job_id: str, generation: int, lease: timedelta, worker_id: str) -> Job:
        """Take the lease: enqueued or claimed (push before enqueue) → running.

        `attempt` is unchanged: a start (or a redelivery's restart) is part of the current retry
        cycle, so a job in a valid state can always be started. Refuses: terminal →
        AlreadyTerminal; another generation → StaleGeneration; a live lease → LeaseHeld;
        deferred → InvalidTransition. An expired lease of the same generation is taken over.
        The returned job shows `cancel_requested`, which the worker must honour with
        `cancel_running`.
        """
        _require_text(worker_id=worker_id)
        if lease <= timedelta(0):
            raise ValidationError("lease must be positive")

        def change(job: Job, now: datetime) -> Job:
            if job.state.terminal:
                raise AlreadyTerminal(job.job_id, job.state, State.RUNNING)
            _require_generation(job, generation)
            reason = f"attempt {job.attempt} of {job.max_attempts}"
            if job.state is State.RUNNING:
                if job.lease_live(now):
                    raise LeaseHeld(job.job_id, job.lease_owner, job.lease_until)
                reason += f"; took over the expired lease of {job.lease_owner}"
            return self._apply(
                job,
                State.RUNNING,
                Role.WORKER,
                worker_id,
                now,
                reason,
                lease_until=now + lease,
                lease_owner=worker_id,
            )

        return self._transition(job_id, change)

    def cancel_running(self, job_id: str, generation: int, *, worker_id: str) -> Job:
        """Running → cancelled, when the operator asked (cancel_requested) and the worker
        honours it before acting."""

        def change(job: Job, now: datetime) -> Job:
            self._require_lease(job, generation, worker_id)
            if job.cancel_requested is None:
                raise InvalidTransition(
                    job.job_id, job.state, State.CANCELLED, "no cancel was requested"
                )
            reason = job.cancel_requested.reason if job.cancel_requested else ""
            return self._apply(
                job,
                State.CANCELLED,
                Role.WORKER,
                worker_id,
                now,
                f"cancel honoured: {reason}",
                expire_at=self._expiry(now),
                **_NO_LEASE,
            )

        return self._transition(job_id, change)

    def release(self, job_id: str, generation: int, error: ErrorInfo, *, worker_id: str) -> Job:
        """Running → enqueued after a transient error, so Pub/Sub's redelivery starts it
        again. `attempt` is unchanged: Pub/Sub's deliveryAttempt counts these quick retries,
        and the worker turns them into `retry_later` at its threshold."""

        def change(job: Job, now: datetime) -> Job:
            self._require_lease(job, generation, worker_id)
            return self._apply(
                job,
                State.ENQUEUED,
                Role.WORKER,
                worker_id,
                now,
                f"released after {error.code}",
                last_error=_stamped(error, now),
                **_NO_LEASE,
            )

        return self._transition(job_id, change)

    def complete(self, job_id: str, generation: int, result: Result, *, worker_id: str) -> Job:
        """Running → completed with the result, and the idempotency document written in the
        same transaction. Sets expire_at = now + terminal retention on both."""

        def body(transaction: firestore.Transaction) -> Job:
            ref = self._jobs.document(job_id)
            job = self._load(transaction, ref, job_id)
            now = self._clock.now()
            self._require_lease(job, generation, worker_id)
            stamped = dataclasses.replace(result, completed_at=now)
            new = self._apply(
                job,
                State.COMPLETED,
                Role.WORKER,
                worker_id,
                now,
                f"outcome {result.outcome}",
                result=stamped,
                expire_at=self._expiry(now),
                **_NO_LEASE,
            )
            record = IdempotencyRecord(
                key=job.idempotency_key,
                job_id=job.job_id,
                action=job.action,
                subject=job.subject,
                outcome=result.outcome,
                details=dict(result.details),
                completed_at=now,
                expire_at=new.expire_at,
            )
            transaction.update(ref, _diff(job, new))
            transaction.set(self._idempotency.document(record.key), record.to_document())
            return new

        return self._run(body)

    complete_if_running = complete

    def retry_later(
        self, job_id: str, generation: int, due_at: datetime, error: ErrorInfo, *, worker_id: str
    ) -> Job:
        """Running → deferred with a new due_at, last_error and attempt + 1 (the next retry
        cycle); the next claim publishes it again. When the current attempt is the last
        (attempt == max_attempts) it raises AttemptsExhausted and changes nothing: the worker
        calls `fail` instead."""
        new_due = _require_aware(due_at, "due_at")

        def change(job: Job, now: datetime) -> Job:
            self._require_lease(job, generation, worker_id)
            if not _attempt_left(job):
                raise AttemptsExhausted(job.job_id, job.attempt, job.max_attempts)
            return self._apply(
                job,
                State.DEFERRED,
                Role.WORKER,
                worker_id,
                now,
                f"retry at {new_due.isoformat()} after {error.code}; "
                f"attempt {job.attempt + 1} of {job.max_attempts} next",
                attempt=job.attempt + 1,
                due_at=new_due,
                last_error=_stamped(error, now),
                **_NO_LEASE,
            )

        return self._transition(job_id, change)

    def fail(self, job_id: str, generation: int, error: ErrorInfo, *, worker_id: str) -> Job:
        """Running → failed (terminal) with last_error and expire_at."""

        def change(job: Job, now: datetime) -> Job:
            self._require_lease(job, generation, worker_id)
            return self._apply(
                job,
                State.FAILED,
                Role.WORKER,
                worker_id,
                now,
                f"failed: {error.code}",
                last_error=_stamped(error, now),
                expire_at=self._expiry(now),
                **_NO_LEASE,
            )

        return self._transition(job_id, change)

    def get_idempotency(self, key: str) -> IdempotencyRecord | None:
        """The recorded result of the side effect with this key, or None. One read."""
        with _store_errors():
            snapshot = self._idempotency.document(key).get(**self._bounds.kwargs)
        if not snapshot.exists:
            return None
        return IdempotencyRecord.from_document(key, snapshot.to_dict() or {})

    # The short name the design uses; defined after every annotation that says `list[...]`.
    list = list_jobs

    # -- internals -------------------------------------------------------------------------

    @property
    def _jobs(self) -> Any:
        return self._client.collection(schema.JOBS)

    @property
    def _idempotency(self) -> Any:
        return self._client.collection(schema.IDEMPOTENCY)

    @property
    def _control_ref(self) -> Any:
        return self._client.collection(schema.CONTROL).document(schema.CONTROL_DOCUMENT)

    def _expiry(self, now: datetime) -> datetime:
        return now + self._retention

    def _apply(
        self, job: Job, to: State, role: Role, by: str, at: datetime, reason: str, **changes: Any
    ) -> Job:
        return apply_transition(
            job,
            to,
            role=role,
            by=by,
            at=at,
            reason=reason,
            history_limit=self._history_limit,
            **changes,
        )

    def _require_lease(self, job: Job, generation: int, worker_id: str) -> None:
        """LeaseLost unless `worker_id` holds the running lease of this generation.

        Whatever happened meanwhile (the lease lapsed and was reclaimed to deferred or failed,
        taken over, the job re-claimed under a newer generation, or finished by another
        delivery), the caller's result is no longer wanted: one error for all of it.
        """
        if job.state is not State.RUNNING:
            detail = f"the job is {job.state.value}"
        elif job.generation != generation:
            detail = f"generation {generation} is stale; the job is at {job.generation}"
        elif job.lease_owner != worker_id:
            detail = "another delivery took the lease over"
        else:
            return
        raise LeaseLost(job.job_id, worker_id, job.lease_owner, detail)

    def _get_in(self, transaction: firestore.Transaction, ref: Any) -> Any:
        return next(iter(transaction.get(ref, **self._bounds.kwargs)))

    def _load(self, transaction: firestore.Transaction, ref: Any, job_id: str) -> Job:
        snapshot = self._get_in(transaction, ref)
        if not snapshot.exists:
            raise JobNotFound(job_id)
        return Job.from_document(job_id, snapshot.to_dict() or {})

    def _transition(self, job_id: str, change: Callable[[Job, datetime], Job]) -> Job:
        """Re-read the job in a transaction, compute its new value, write only what changed."""
        ref = self._jobs.document(job_id)

        def body(transaction: firestore.Transaction) -> Job:
            job = self._load(transaction, ref, job_id)
            new = change(job, self._clock.now())
            diff = _diff(job, new)
            if diff:
                transaction.update(ref, diff)
            return new

        return self._run(body)

    def _run(self, body: Callable[..., T], *args: Any) -> T:
        """Run `body(transaction, *args)` transactionally, retrying contention with jittered
        backoff; persistent contention raises LostRace, Firestore errors StoreUnavailable."""
        for round_ in range(_CONTENTION_ROUNDS):
            transaction = BoundedTransaction(self._client, self._bounds, _TRANSACTION_ATTEMPTS)
            try:
                with _store_errors():
                    return firestore.transactional(body)(transaction, *args)
            except _Contention:
                time.sleep(random.uniform(0, min(0.5, 0.01 * 2**round_)))
        raise LostRace("gave up after repeated transaction contention; retry later")

    def _stream(
        self, spec: QuerySpec, transaction: Any = None, read_time: datetime | None = None
    ) -> Iterator[Any]:
        snapshot = {"read_time": read_time} if read_time is not None else {}
        return self._query(spec).stream(transaction=transaction, **self._bounds.kwargs, **snapshot)

    def _count(self, spec: QuerySpec, read_time: datetime | None = None) -> int:
        snapshot = {"read_time": read_time} if read_time is not None else {}
        results = self._query(spec).count(alias="n").get(**self._bounds.kwargs, **snapshot)
        return int(results[0][0].value) if results and results[0] else 0

    def _query(self, spec: QuerySpec) -> Any:
        if self._observe is not None:
            self._observe(spec)
        query: Any = self._client.collection(spec.collection)
        for field_path, value in spec.equals:
            query = query.where(filter=FieldFilter(field_path, "==", value))
        for field_path, op, value in spec.ranges:
            query = query.where(filter=FieldFilter(field_path, op, value))
        if spec.order_by:
            for field_path in spec.order_by:
                query = query.order_by(field_path)
            if spec.start_after is not None:
                query = query.order_by("__name__").start_after(list(spec.start_after))
        if spec.limit is not None:
            query = query.limit(spec.limit)
        return query


_NO_LEASE: Mapping[str, Any] = {"lease_until": None, "lease_owner": None}


class _Contention(Exception):
    """A transaction lost to concurrent writers more often than the client retries."""


@contextmanager
def _store_errors() -> Iterator[None]:
    """Translate the client's errors: contention to _Contention, the rest to
    StoreUnavailable; our own JobsError passes through."""
    try:
        yield
    except JobsError:
        raise
    except api_exceptions.Aborted as exc:
        raise _Contention() from exc
    except ValueError as exc:
        if isinstance(exc.__cause__, api_exceptions.Aborted):
            raise _Contention() from exc
        raise
    except (api_exceptions.GoogleAPICallError, api_exceptions.RetryError) as exc:
        raise StoreUnavailable(f"Firestore: {exc}") from exc


def _diff(old: Job, new: Job) -> dict[str, Any]:
    before, after = old.to_document(), new.to_document()
    return {k: v for k, v in after.items() if before.get(k) != v}


def _age(now: datetime, snapshots: list[Any], field: str) -> float | None:
    """Seconds since `field` of the first snapshot (never negative), or None when empty."""
    if not snapshots:
        return None
    value = (snapshots[0].to_dict() or {}).get(field)
    if not isinstance(value, datetime):
        return None
    return max((now - value.astimezone(UTC)).total_seconds(), 0.0)


def _text_ok(*values: object) -> bool:
    return all(isinstance(value, str) and value for value in values)


def _claimant(job: Job) -> str:
    return job.claim.run_id if job.claim else "unknown"


def _stamped(error: ErrorInfo, now: datetime) -> ErrorInfo:
    return dataclasses.replace(error, at=error.at or now)


def _require_generation(job: Job, generation: int) -> None:
    if job.generation != generation:
        raise StaleGeneration(job.job_id, generation, job.generation)


def _attempt_left(job: Job) -> bool:
    """Whether another retry cycle may follow the current one."""
    return job.attempt < job.max_attempts


def _require_aware(value: datetime, name: str) -> datetime:
    if not isinstance(value, datetime) or value.tzinfo is None or value.utcoffset() is None:
        raise ValidationError(f"{name} must be a timezone-aware datetime")
    return value.astimezone(UTC)


def _require_text(**values: str) -> None:
    empty = [name for name, value in values.items() if not isinstance(value, str) or not value]
    if empty:
        raise ValidationError([f"{name} must be a non-empty string" for name in empty])
