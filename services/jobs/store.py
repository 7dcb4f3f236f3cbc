"""FirestoreJobStore: every read and change of job records, each change in a transaction.

The thin store: each operation loads the document inside a Firestore transaction, asks
`transitions.Transitions` for the new record (which asks `state.apply_transition`: the only
place the rules live), and writes only the fields that changed. A lost race raises; nothing is
ever overwritten blindly. The query shapes live in `queries.py` (as `QuerySpec` values a test
proves are served by a declared index), the transaction plumbing over the client's private
internals in `transactions.py`.
"""

from __future__ import annotations

import dataclasses
import heapq
import itertools
import json
import logging
import threading
import uuid
from collections.abc import Callable, Collection, Iterator, Mapping, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any, TypeVar

from google.api_core import exceptions as api_exceptions
from google.api_core import retry as api_retry
from google.cloud import firestore
from google.cloud.firestore_v1.base_query import FieldFilter
from google.cloud.firestore_v1.bulk_batch import BulkWriteBatch

from services.jobs import metrics, schema
from services.jobs.clock import Clock
from services.jobs.control import HOUSEKEEPING_FIELD, Control, HousekeepingMark
from services.jobs.decoding import decode_fields, update_time
from services.jobs.errors import (
    InvalidRecord,
    InvalidTransition,
    JobNotFound,
    JobsError,
    LeaseHeld,
    LeaseLost,
    LostRace,
    ScheduleConflict,
    StoreMisconfigured,
    StoreRejected,
    StoreUnavailable,
    ValidationError,
)
from services.jobs.horizon import due_at_problem
from services.jobs.limits import (
    MAX_REASON_BYTES,
)
from services.jobs.model import (
    DEFAULT_ACTIONS,
    Backlog,
    ClaimedJob,
    EnqueueMark,
    ErrorInfo,
    IdempotencyRecord,
    Job,
    Lease,
    NewJob,
    Page,
    Reclaimed,
    ReclaimReport,
    Result,
    ScheduleResult,
    Stats,
    decode_job,
)
from services.jobs.queries import (
    QuerySpec,
    decode_cursor,
    due_probe_query,
    due_query,
    encode_cursor,
    enqueued_query,
    expired_claims_query,
    expired_leases_query,
    list_query,
    misfiled_due_queries,
    state_query,
)
from services.jobs.shard import (
    Part,
    fan_out,
    read_parts,
    require_shards,
    shard_groups,
    spend_over_shards,
)
from services.jobs.state import (
    DEFAULT_HISTORY_LIMIT,
    HistoryEntry,
    Role,
    State,
)
from services.jobs.transactions import (
    DEFAULT_CALL_TIMEOUT_S,
    CallBounds,
    TransactionRunner,
    add_update,
    as_datetime,
    store_errors,
)
from services.jobs.transitions import (
    DEFAULT_TERMINAL_RETENTION,
    Transitions,
    reclaimed,
)
from services.jobs.written import WrittenRecords

logger = logging.getLogger(__name__)

T = TypeVar("T")

CLAIM_PAGE_SIZE = 100  # documents claimed per transaction
MARK_PAGE_SIZE = 100  # documents marked enqueued per transaction
_MAX_LIST_LIMIT = 500
# Deferred records per run the due_at type check inspects (each query bills >= 1 read).
MISFILED_CHECK_LIMIT = 20
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


_BATCH_WRITE_LIMIT = 500  # writes per BatchWrite request
_HISTORY = "history"  # the audit trail's key in Job.to_document


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
        shards: int = 1,
    ) -> None:
        self._shards = require_shards(shards)
        self._read_parts = read_parts(self._shards)  # [None] with one shard
        self._rules = Transitions(history_limit, terminal_retention)
        self._client = client
        self._clock = clock
        self._known_actions = frozenset(known_actions)
        self._observe = query_observer
        self._bounds = CallBounds(timeout_s, retry)
        self._tx = TransactionRunner(client, self._bounds)
        # Claims this process wrote, so their enqueue mark can be one write conditioned on the
        # claim commit's update_time instead of a read and a write (services/jobs/written.py).
        self._written = WrittenRecords()
        self._pending = threading.local()

    @property
    def clock(self) -> Clock:
        return self._clock

    # -- application -----------------------------------------------------------------------

    def schedule(
        self, new_job: NewJob, *, by: str = "application", producer: str | None = None
    ) -> ScheduleResult:
        """Create a deferred job, idempotent by the decision's identity.

        The same decision again (job ID, action, subject, params, max_attempts, idempotency
        key; never the due time, so a retry of `+30d` matches) returns the existing job with
        created=False and writes nothing. A different value of one of those under the same
        ID raises ScheduleConflict naming each differing field. Invalid input (including
        params that do not fit the action's schema) raises ValidationError and writes
        nothing. Costs 1 write when new (no read), 1 read when it exists.
        """
        valid = new_job.validated(self._known_actions)
        _require_due_in_horizon(valid.due_at, self._clock.now())
        job = self._new_record(valid, by).replaced(producer=producer)
        ref = self._jobs.document(valid.job_id)
        with store_errors():
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
                _require_due_in_horizon(valid[index].due_at, self._clock.now())
            except ValidationError as exc:
                valid.pop(index, None)
                outcomes[index] = exc
        if not self._create_batch(valid, {}, outcomes, by):
            refs = [self._jobs.document(v.job_id) for v in valid.values()]
            with store_errors():
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
        with store_errors():
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
        return Job.create(valid, now, history=(created,), shards=self._shards)

    # -- operator --------------------------------------------------------------------------

    def cancel(self, job_id: str, reason: str, by: str) -> Job:
        """Cancel a job. Deferred, claimed or enqueued → cancelled. Running → records
        cancel_requested (the worker honours it; state stays running). Terminal →
        AlreadyTerminal, unchanged. Missing → JobNotFound. A reason over MAX_REASON_BYTES
        → ValidationError."""
        _require_text(reason=reason, by=by)
        _require_short(reason=reason, by=by)

        def change(job: Job, now: datetime) -> Job:
            return self._rules.cancel(job, reason, by, now)

        return self._transition(job_id, change)

    def reschedule(self, job_id: str, due_at: datetime, reason: str, by: str) -> Job:
        """Move a deferred job's due_at (and so its claim time). Any other state →
        InvalidTransition. A failed job is re-scheduled as a new job ID instead."""
        _require_text(reason=reason, by=by)
        _require_short(reason=reason, by=by)
        new_due = _require_aware(due_at, "due_at")
        _require_due_in_horizon(new_due, self._clock.now())

        def change(job: Job, now: datetime) -> Job:
            return self._rules.reschedule(job, new_due, reason, by, now)

        return self._transition(job_id, change)

    def get(self, job_id: str) -> Job | None:
        """The job, or None. One read. InvalidRecord when the document cannot be decoded
        (`raw` shows it as stored)."""
        with store_errors():
            snapshot = self._jobs.document(job_id).get(**self._bounds.kwargs)
        return _decoded(snapshot) if snapshot.exists else None

    def raw(self, job_id: str) -> dict[str, Any] | None:
        """The job document exactly as stored (for records `get` cannot decode), or None."""
        with store_errors():
            snapshot = self._jobs.document(job_id).get(**self._bounds.kwargs)
        return snapshot.to_dict() if snapshot.exists else None

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
        after = decode_cursor(cursor) if cursor else None
        order_field = "claim.claimed_at" if claimed_before else "due_at"

        def page(shard: Part) -> list[Any]:
            spec = list_query(
                state=state,
                due_before=due_before,
                overdue_at=overdue_at,
                claimed_before=claimed_before,
                limit=limit + 1,  # one more tells whether another page exists
                after=after,
                shard=shard,
            )
            return list(self._stream(spec))

        with store_errors():
            # With N > 1 each shard's page is in (order field, ID) order from the same cursor:
            # their merge is the global order, and its first limit + 1 the global page.
            snapshots = _merged(fan_out(self._read_parts, page), order_field, limit + 1)
        more = len(snapshots) > limit
        snapshots = snapshots[:limit]
        jobs: list[Job] = []
        invalid: list[str] = []
        for snapshot in snapshots:
            try:
                jobs.append(_decoded(snapshot))
            except InvalidRecord:
                invalid.append(snapshot.id)  # listed by ID; `raw` shows it, a scan moves it
        next_cursor = None
        if more:
            last = snapshots[-1]
            next_cursor = encode_cursor(last.get(order_field), last.id)
        return Page(tuple(jobs), next_cursor, tuple(invalid))

    def stats(self, now: datetime, claim_timeout: timedelta) -> Stats:
        """Backlog figures from count aggregations and one limit-1 query; never reads every
        document. Every figure is read at one snapshot: the first count's server read time,
        passed to the others (https://cloud.google.com/firestore/docs/reference/rpc/google.
        firestore.v1#runaggregationqueryrequest), so a job moving between states mid-way is
        counted once, in one state."""
        with store_errors():
            first = self._query(state_query(State.DEFERRED)).count(alias="n")
            results = first.get(**self._bounds.kwargs)
            read_time = results[0][0].read_time if results and results[0] else None
            per_state = {State.DEFERRED: int(results[0][0].value) if results else 0}
            per_state |= {
                state: self._count(state_query(state), read_time=read_time)
                for state in State
                if state is not State.DEFERRED
            }

            def figures(shard: Part) -> tuple[list[Any], int, int, int]:
                return (
                    list(self._stream(due_query(now, 1, shard), read_time=read_time)),
                    self._count(due_query(now, None, shard), read_time=read_time),
                    self._count(
                        expired_claims_query(now - claim_timeout, None, shard), read_time=read_time
                    ),
                    self._count(expired_leases_query(now, None, shard), read_time=read_time),
                )

            # With N > 1, one set of queries per shard at the same read time: counts add up,
            # the oldest is the oldest of the shards' oldest.
            parts = fan_out(self._read_parts, figures)
        oldest = _merged([p[0] for p in parts], "due_at", 1)
        due_count = sum(p[1] for p in parts)
        stuck = sum(p[2] for p in parts)
        expired = sum(p[3] for p in parts)
        return Stats(
            oldest_overdue_age_s=_age(now, oldest, "due_at"),
            due_count=due_count,
            stuck_claims=stuck,
            expired_leases=expired,
            per_state={state: per_state[state] for state in State},
            read_time=read_time,
        )

    def backlog(
        self, now: datetime, claim_timeout: timedelta, enqueued_timeout: timedelta
    ) -> Backlog:
        """What the scan measures every run: 3 count aggregations and 2 limit-1 queries (per
        shard with JOBS_SHARDS > 1).

        `stale_enqueued` counts jobs enqueued (published) before now - enqueued_timeout: their
        message may be gone (dead letter expired, subscription recreated), so nothing else
        would ever move them. Terminal states are never counted, so the cost stays flat as
        retention grows; `stats` (every state) is for the operator.
        """
        if claim_timeout <= timedelta(0) or enqueued_timeout <= timedelta(0):
            raise ValidationError("claim_timeout and enqueued_timeout must be positive")

        def figures(shard: Part) -> tuple[list[Any], list[Any], int, int, int]:
            return (
                list(self._stream(due_query(now, 1, shard))),
                list(self._stream(enqueued_query(None, 1, shard))),
                self._count(due_query(now, None, shard)),
                self._count(expired_claims_query(now - claim_timeout, None, shard)),
                self._count(enqueued_query(now - enqueued_timeout, None, shard)),
            )

        with store_errors():
            # One set per shard with N > 1: 5 queries each, counts summed, oldest of oldest.
            parts = fan_out(self._read_parts, figures)
        oldest_due = _merged([p[0] for p in parts], "due_at", 1)
        oldest_enqueued = _merged([p[1] for p in parts], "enqueued_at", 1)
        due_count = sum(p[2] for p in parts)
        stuck = sum(p[3] for p in parts)
        stale = sum(p[4] for p in parts)
        return Backlog(
            oldest_overdue_age_s=_age(now, oldest_due, "due_at"),
            due_count=due_count,
            stuck_claims=stuck,
            stale_enqueued=stale,
            oldest_enqueued_age_s=_age(now, oldest_enqueued, "enqueued_at"),
        )

    def get_control(self) -> Control:
        """The operator's control settings; defaults when the document does not exist."""
        with store_errors():
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

        return self._tx.run(body)

    def record_housekeeping(self, mark: HousekeepingMark) -> None:
        """Store the scan's housekeeping mark in the control document: one write, replacing
        only that map (operator settings and their history are left as they are)."""
        with store_errors():
            self._control_ref.set(
                {HOUSEKEEPING_FIELD: mark.to_document()},
                merge=[HOUSEKEEPING_FIELD],
                **self._bounds.kwargs,
            )

    # -- scan --------------------------------------------------------------------------------

    def claim_due(
        self,
        now: datetime,
        run_id: str,
        limit: int,
        *,
        page_size: int = CLAIM_PAGE_SIZE,
        on_quarantine: Callable[[str], None] | None = None,
    ) -> list[ClaimedJob]:
        """Claim up to `limit` deferred jobs due at or before `now`, oldest due first.

        Each page is one transaction that queries and claims (generation + 1), so overlapping
        callers never claim the same job: 1 read + 1 write per claimed job, 1 read when nothing
        is due. Each document is decoded on its own: one that cannot be is left out of the
        page, quarantined after it (`on_quarantine(job_id)`), and claiming goes on. If
        contention persists after some pages were claimed, returns those (they are committed
        and must be published); with none claimed it raises LostRace.
        """
        _require_text(run_id=run_id)
        if limit < 0 or page_size < 1:
            raise ValidationError("limit must be >= 0 and page_size >= 1")
        if self._shards == 1:
            # One unsharded query, as before the field existed: records without `shard`
            # are claimed too.
            return self._claim_shard(now, run_id, limit, page_size, on_quarantine, None)
        return self._claim_sharded(now, run_id, limit, page_size, on_quarantine)

    def _claim_sharded(
        self,
        now: datetime,
        run_id: str,
        limit: int,
        page_size: int,
        on_quarantine: Callable[[str], None] | None,
    ) -> list[ClaimedJob]:
        """`limit` split evenly over the shards still holding due jobs, each shard claimed in
        its own due order on a bounded pool; a shard that returns less than its share is
        drained, and what it left over goes to the others in the next round. First one probe
        per 30 shards (`shard in [...]`, 1 read when empty), so a run with nothing due bills
        about what N = 1 does, not one read per shard."""
        if not self._anything_due(now):
            return []

        def take(shard: int, share: int) -> list[ClaimedJob]:
            return self._claim_shard(now, run_id, share, page_size, on_quarantine, shard)

        shards = range(self._shards)
        claimed, errors_seen = spend_over_shards(limit, shards, take, (LostRace,))
        if not claimed and errors_seen:
            raise errors_seen[0]
        return claimed

    def _anything_due(self, now: datetime) -> bool:
        with store_errors():
            return any(
                list(self._stream(due_probe_query(now, group)))
                for group in shard_groups(self._shards)  # what read_parts has with N > 1
            )

    def _claim_shard(
        self,
        now: datetime,
        run_id: str,
        limit: int,
        page_size: int,
        on_quarantine: Callable[[str], None] | None,
        shard: int | None,
    ) -> list[ClaimedJob]:
        claimed: list[ClaimedJob] = []
        while len(claimed) < limit:
            want = min(page_size, limit - len(claimed))
            try:
                page, invalid = self._claim_remembering(now, run_id, want, shard)
            except LostRace:
                if not claimed:
                    raise
                logger.warning("claim_due %s stopped by contention after %d", run_id, len(claimed))
                break
            claimed.extend(page)
            moved = [job_id for job_id in invalid if self._quarantine(job_id, Role.SCAN, run_id)]
            for job_id in moved:
                if on_quarantine is not None:
                    on_quarantine(job_id)
            # A page that only met records it could not move aside would come back the same.
            if len(page) + len(invalid) < want or not (page or moved):
                break
        return claimed

    def _claim_page(
        self,
        transaction: firestore.Transaction,
        now: datetime,
        run_id: str,
        want: int,
        shard: int | None,
    ) -> tuple[list[ClaimedJob], list[str]]:
        at = self._clock.now()
        claimed = []
        invalid = []
        query = self._query(due_query(now, want, shard))
        jobs = self._jobs
        for job_id, document in self._tx.query_in(transaction, query):
            try:
                job = self._decoded_raw(job_id, document)
            except InvalidRecord:
                invalid.append(job_id)
                continue
            new = self._rules.claim(job, run_id, at)
            _write(transaction, jobs.document(job_id), job, new)
            claimed.append(ClaimedJob(job.job_id, new.generation, job.due_at, at, job.action))
            self._pending.jobs.append(new)
        return claimed, invalid

    def _claim_remembering(
        self, now: datetime, run_id: str, want: int, shard: int | None
    ) -> tuple[list[ClaimedJob], list[str]]:
        """A claim page; each claimed job is remembered with the update_time its write got."""

        def attempt(
            transaction: firestore.Transaction, *args: Any
        ) -> tuple[list[ClaimedJob], list[str]]:
            self._pending.jobs = []
            self._pending.transaction = transaction
            return self._claim_page(transaction, *args)

        result = self._tx.run(attempt, now, run_id, want, shard)
        transaction = self._pending.transaction
        names = getattr(transaction, "written_names", [])
        written = getattr(transaction, "write_results", None) or []
        in_jobs = f"/{schema.JOBS}/"
        # Read from the raw results: the same time the proto-plus field gives, without its
        # wrapper per result.
        stamped = (
            (name, update_time(result._pb))
            for name, result in zip(names, written, strict=False)
            if in_jobs in name
        )
        stamps = {name.rsplit("/", 1)[-1]: at for name, at in stamped if at is not None}
        for job in self._pending.jobs:
            if job.job_id in stamps:
                remembered = job.replaced(update_time=as_datetime(stamps[job.job_id]))
                self._written.put(("claim", job.job_id, job.generation), remembered)
        return result

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
            return self._rules.enqueued(job, generation, message_id, at or now, now)

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
        InvalidTransition, JobNotFound, ValidationError). A job this store claimed (and nothing
        changed since) costs 1 write: its mark is conditioned on the claim commit's
        update_time, no read. Any other costs 1 read + 1 write in a transaction per page, as
        does a job whose conditional write was refused (the worker started it first, say). A
        page that cannot be written (contention, Firestore down) marks its items with that
        error.
        """
        if page_size < 1:
            raise ValidationError("page_size must be at least 1")
        marks: list[EnqueueMark | None] = self._mark_remembered(items, at)
        rest = [n for n, mark in enumerate(marks) if mark is None]
        if rest:
            read = self._mark_reading([items[n] for n in rest], at, page_size)
            for n, mark in zip(rest, read, strict=True):
                marks[n] = mark
        return [mark for mark in marks if mark is not None]

    def _mark_remembered(
        self, items: Sequence[tuple[str, int, str]], at: datetime | None
    ) -> list[EnqueueMark | None]:
        """Per item, its mark when it is a claim this store remembers, written as one write
        conditioned on the claim's update_time (BatchWrite: each write applied or refused on
        its own); None for the items left to the reading path."""
        now = self._clock.now()
        marks: list[EnqueueMark | None] = [None] * len(items)
        planned: list[tuple[int, Job, Job]] = []
        for n, (job_id, generation, message_id) in enumerate(items):
            claimed = self._written.take(("claim", job_id, generation))
            if claimed is None or not _text_ok(job_id, message_id):
                continue
            try:
                new = self._rules.enqueued(claimed, generation, message_id, at or now, now)
            except JobsError:
                continue
            planned.append((n, claimed, new))
        for first in range(0, len(planned), _BATCH_WRITE_LIMIT):
            page = planned[first : first + _BATCH_WRITE_LIMIT]
            applied = self._write_conditionally([(old, new) for _, old, new in page])
            for (n, _, new), stamp in zip(page, applied, strict=True):
                if stamp is not None:
                    job = new.replaced(update_time=stamp)
                    marks[n] = EnqueueMark(job.job_id, items[n][1], job=job)
        return marks

    def _write_conditionally(self, changes: Sequence[tuple[Job, Job]]) -> list[datetime | None]:
        """Write each `new` over its `old` (only the fields that differ), each on condition
        that the document is still at old.update_time
        (https://cloud.google.com/firestore/docs/reference/rpc/google.firestore.v1#precondition),
        in one BatchWrite request; per change the new update_time, or None when it was refused
        or could not be sent (the caller falls back to a transaction, which sorts it out)."""
        batch = BulkWriteBatch(self._client)
        jobs = self._jobs
        for old, new in changes:
            add_update(batch, jobs.document(old.job_id), _diff(old, new), old.update_time)
        try:
            response = batch.commit(**self._bounds.write_kwargs)
        except (api_exceptions.GoogleAPICallError, api_exceptions.RetryError) as exc:
            logger.warning("conditional batch write failed, falling back: %s", exc)
            return [None] * len(changes)
        raw = response._pb  # the raw results: no proto-plus wrapper per write
        stamps = [update_time(result) for result in raw.write_results]
        return [
            as_datetime(stamp) if status.code == 0 and stamp is not None else None
            for stamp, status in zip(stamps, raw.status, strict=True)
        ]

    def _mark_reading(
        self, items: Sequence[tuple[str, int, str]], at: datetime | None, page_size: int
    ) -> list[EnqueueMark]:
        marks: list[EnqueueMark] = []
        for start in range(0, len(items), page_size):
            page = list(items[start : start + page_size])
            try:
                done = self._tx.run(self._mark_page, page, at)
            except (LostRace, StoreUnavailable, StoreRejected) as exc:
                marks.extend(
                    EnqueueMark(job_id, generation, error=exc) for job_id, generation, _ in page
                )
                continue
            marks.extend(done)
            for mark in done:
                if isinstance(mark.error, InvalidRecord):
                    self._quarantine(mark.job_id, Role.SCAN, "mark_enqueued")
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
        broken: dict[str, InvalidRecord] = {}
        if refs:
            for snapshot in transaction.get_all(refs, **self._bounds.kwargs):
                if snapshot.exists:
                    try:
                        before[snapshot.id] = _decoded(snapshot)
                    except InvalidRecord as exc:
                        broken[snapshot.id] = exc
        current = dict(before)
        marks = []
        for job_id, generation, message_id in page:
            if job_id not in valid:
                error: JobsError = ValidationError(
                    "job_id and message_id must be non-empty strings"
                )
                marks.append(EnqueueMark(job_id, generation, error=error))
            elif job_id in broken:
                marks.append(EnqueueMark(job_id, generation, error=broken[job_id]))
            elif job_id not in current:
                marks.append(EnqueueMark(job_id, generation, error=JobNotFound(job_id)))
            else:
                try:
                    job = self._rules.enqueued(
                        current[job_id], generation, message_id, at or now, now
                    )
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

    # Alias carrying the precondition in its name (STYLE.md).
    mark_enqueued_if_claimed = mark_enqueued

    def mark_enqueue_failed(self, job_id: str, generation: int, error: ErrorInfo) -> Job:
        """Claimed → deferred after a failed publish, with last_error and an audit entry; the
        job stays due, so a later run publishes it again."""

        def change(job: Job, now: datetime) -> Job:
            return self._rules.enqueue_failed(job, generation, error, now)

        return self._transition(job_id, change)

    def reclaim_expired(
        self,
        now: datetime,
        claim_timeout: timedelta,
        limit: int,
        run_id: str,
        *,
        enqueued_timeout: timedelta | None = None,
    ) -> ReclaimReport:
        """The rescuer: take back abandoned work, at most `limit` jobs, each audited by
        `reclaimer:<run_id>`, and quarantine records nothing else could move.

        - Claimed with claim.claimed_at older than now - claim_timeout → deferred (same
          generation; the next claim bumps it).
        - Running whose lease_until < now (the worker crashed or stopped heartbeating): the
          rule of `Transitions.lapse_end`, the same `start` applies — cancelled when a cancel was
          requested, failed in the last attempt, else deferred with attempt + 1, due at once.
        - With `enqueued_timeout`: enqueued with enqueued_at older than now - it (no start
          since the publish or release: the message is lost) → deferred; the next claim
          publishes it under generation + 1, which fences the old message.
        - Deferred jobs whose due_at is not a timestamp (no due query can see them) and any
          undecodable document met on the way are quarantined (`quarantined`).

        Each page is one transaction that queries and changes; a page that fails (a locked
        record, contention, an error) is retried one record at a time, and a record that
        still fails is `skipped` with its reason: one record never stops the rest. Results of
        committed pages are always returned; `stopped_by` says what ended a step early.
        """
        _require_text(run_id=run_id)
        if claim_timeout <= timedelta(0):
            raise ValidationError("claim_timeout must be positive")
        if enqueued_timeout is not None and enqueued_timeout <= timedelta(0):
            raise ValidationError("enqueued_timeout must be positive")
        cutoff = now - claim_timeout
        steps: list[_ReclaimStep] = [
            _ReclaimStep(
                "claim_timeout",
                lambda n, shard: expired_claims_query(cutoff, n, shard),
                lambda j: (
                    j.state is State.CLAIMED and j.claim is not None and j.claim.claimed_at < cutoff
                ),
                self._rules.reclaim_claim,
            ),
            _ReclaimStep(
                "lease_expired",
                lambda n, shard: expired_leases_query(now, n, shard),
                lambda j: j.state is State.RUNNING and not j.lease_live(now),
                self._rules.reclaim_lease,
            ),
        ]
        if enqueued_timeout is not None:
            before = now - enqueued_timeout
            steps.append(
                _ReclaimStep(
                    "enqueued_timeout",
                    lambda n, shard: enqueued_query(before, n, shard),
                    lambda j: (
                        j.state is State.ENQUEUED
                        and j.enqueued_at is not None
                        and j.enqueued_at < before
                    ),
                    self._rules.rescue_enqueued,
                )
            )
        tally = _ReclaimTally(run_id)
        try:
            for step in steps:
                self._reclaim_step(step, limit, tally)
            self._quarantine_misfiled_due(run_id, tally)
        except StoreUnavailable as exc:
            # Firestore itself is out of reach: nothing more can be done this run. With
            # nothing committed that is the caller's error; otherwise keep what was done.
            if not (tally.reclaimed or tally.quarantined):
                raise
            tally.stopped_by = exc
        report = tally.report()
        if report.reclaimed:
            logger.warning("reclaimed %d job(s) in run %s", len(report.reclaimed), run_id)
        return report

    def _reclaim_step(self, step: _ReclaimStep, limit: int, tally: _ReclaimTally) -> None:
        """One step up to `limit` reclaimed in all: the unsharded query with N = 1, else the
        budget left spent over the shards (each shard's query in its own time order)."""
        if self._shards == 1:
            self._reclaim_shard(step, limit, tally, None)
            return

        def take(shard: Part, share: int) -> list[Reclaimed]:
            part = _ReclaimTally(tally.run_id)
            try:
                self._reclaim_shard(step, share, part, shard)
            finally:
                tally.absorb(part)  # committed changes are reported even when one shard fails
            return part.reclaimed

        spend_over_shards(limit - len(tally.reclaimed), self._read_parts, take)

    def _reclaim_shard(
        self, step: _ReclaimStep, limit: int, tally: _ReclaimTally, shard: Part
    ) -> None:
        while len(tally.reclaimed) < limit:
            want = min(CLAIM_PAGE_SIZE, limit - len(tally.reclaimed))
            spec = step.spec(want, shard)
            try:
                page, invalid = self._tx.run(self._reclaim_page, spec, step, tally.run_id)
            except StoreUnavailable:
                raise
            except JobsError as exc:
                logger.warning("reclaim page (%s) failed, going one by one: %s", step.name, exc)
                if not self._reclaim_each(spec, step, tally):
                    return
                continue
            tally.reclaimed.extend(page)
            moved = self._quarantine_all(invalid, tally)
            if len(page) + len(invalid) < want or not (page or moved):
                return

    def _reclaim_page(
        self,
        transaction: firestore.Transaction,
        spec: QuerySpec,
        step: _ReclaimStep,
        run_id: str,
    ) -> tuple[list[Reclaimed], list[str]]:
        at = self._clock.now()
        page = []
        invalid = []
        for snapshot in self._stream(spec, transaction):
            try:
                job = _decoded(snapshot)
            except InvalidRecord:
                invalid.append(snapshot.id)
                continue
            new = step.change(job, at, run_id)
            _write(transaction, snapshot.reference, job, new)
            page.append(reclaimed(job, new, step.name))
        return page, invalid

    def _reclaim_each(self, spec: QuerySpec, step: _ReclaimStep, tally: _ReclaimTally) -> bool:
        """The page again, one transaction per record; False when the step should stop."""
        try:
            with store_errors():
                ids = [snapshot.id for snapshot in self._stream(spec)]
        except StoreUnavailable:
            raise
        except JobsError as exc:
            tally.stopped_by = exc
            return False
        progressed = False
        for job_id in ids:
            ref = self._jobs.document(job_id)

            def body(transaction: firestore.Transaction, ref: Any = ref) -> Reclaimed | None:
                job = self._load(transaction, ref, ref.id)
                if not step.applies(job):
                    return None  # moved on meanwhile: nothing to do
                at = self._clock.now()
                new = step.change(job, at, tally.run_id)
                _write(transaction, ref, job, new)
                return reclaimed(job, new, step.name)

            try:
                done = self._tx.run(body)
            except InvalidRecord:
                self._quarantine_all([job_id], tally)
                progressed = True
                continue
            except (JobNotFound, InvalidTransition):
                continue
            except StoreUnavailable:
                raise
            except JobsError as exc:
                tally.skipped.append((job_id, f"{step.name}: {type(exc).__name__}: {exc}"))
                logger.warning(
                    "reclaim skipped job %s: %s",
                    job_id,
                    exc,
                    extra={"fields": {"job_id": job_id, "reason": f"reclaim_{step.name}"}},
                )
                continue
            if done is not None:
                tally.reclaimed.append(done)
                progressed = True
        # Stop the step when nothing moved: the records left are the skipped ones.
        return progressed and len(ids) == spec.limit

    def _quarantine_all(self, job_ids: Sequence[str], tally: _ReclaimTally) -> int:
        moved = [j for j in job_ids if self._quarantine(j, Role.RECLAIMER, tally.run_id)]
        tally.quarantined.extend(moved)
        return len(moved)

    def _quarantine_misfiled_due(self, run_id: str, tally: _ReclaimTally) -> None:
        """The periodic check for a deferred job whose due_at is not a timestamp: Firestore
        range filters match only values of the operand's type and order types null < bool <
        number < timestamp < string (https://firebase.google.com/docs/firestore/manage-data/
        data-types#value_type_ordering), so no due query ever returns it. Two limit queries
        on the (state, due_at) index find the common mistakes: a null, boolean or number sorts
        before every timestamp, a string (an ISO date) after. 1 read each when none exist."""
        found = fan_out(self._read_parts, lambda shard: self._misfiled_due(shard, tally))
        self._quarantine_all([job_id for part in found for job_id in part], tally)

    def _misfiled_due(self, shard: Part, tally: _ReclaimTally) -> list[str]:
        """The IDs of one shard's deferred jobs whose due_at is not a timestamp (all of them
        with shard None)."""
        misfiled: list[str] = []
        try:
            with store_errors():
                for spec in misfiled_due_queries(MISFILED_CHECK_LIMIT, shard):
                    # Look at the first record alone (1 read); only when it is misfiled is the
                    # page worth its reads: with many future jobs the first query would
                    # otherwise bill MISFILED_CHECK_LIMIT reads every run.
                    first = list(self._stream(dataclasses.replace(spec, limit=1)))
                    if not first or isinstance(first[0].get("due_at"), datetime):
                        continue
                    for snapshot in self._stream(spec):
                        if isinstance(snapshot.get("due_at"), datetime):
                            break  # timestamps from here on
                        misfiled.append(snapshot.id)
        except StoreRejected as exc:
            tally.stopped_by = tally.stopped_by or exc
        return misfiled

    # -- worker ----------------------------------------------------------------------------
    # cancel_running, extend_lease, release, complete, retry_later and fail take the `Lease`
    # that `start` returned (job.lease). Its token is new on every start, so any delivery
    # but the one holding the running lease (a stale one in the same process included) is
    # refused with LeaseLost and changes nothing.

    def start(self, job_id: str, generation: int, lease: timedelta, worker_id: str) -> Job:
        """Take the lease: enqueued or claimed (push before enqueue) → running, with a new
        lease token (per delivery) that every later worker transition must present.

        Refuses: terminal → AlreadyTerminal; another generation → StaleGeneration; a live
        lease → LeaseHeld (also when another job holds the job's shared idempotency key);
        deferred → InvalidTransition; an undecodable document → InvalidRecord (quarantined
        first). An expired lease of the same generation is taken over, and that costs the
        crashed cycle an attempt exactly as when the reclaimer finds it: attempt + 1, or
        `failed` when it was the last (the returned job is then failed, with no lease).
        `attempt` is otherwise unchanged. The returned job shows `cancel_requested`, which the
        worker must honour with `cancel_running`.
        """
        _require_text(worker_id=worker_id)
        if lease <= timedelta(0):
            raise ValidationError("lease must be positive")
        ref = self._jobs.document(job_id)
        try:
            started = self._start_unlocked(ref, job_id, generation, lease, worker_id)
        except InvalidRecord:
            self._quarantine(job_id, Role.WORKER, worker_id)
            raise
        if started is not None:
            return started

        def body(transaction: firestore.Transaction) -> Job:
            job = self._load(transaction, ref, job_id)
            now = self._clock.now()
            token = uuid.uuid4().hex
            new = self._rules.start(job, generation, now, lease, worker_id, token)
            if new.state is State.RUNNING and job.explicit_key:
                self._hold_key(transaction, job, token, now + lease, now)
            _write(transaction, ref, job, new)
            return new

        try:
            return self._tx.run(body)
        except InvalidRecord:
            self._quarantine(job_id, Role.WORKER, worker_id)
            raise

    def _start_unlocked(
        self, ref: Any, job_id: str, generation: int, lease: timedelta, worker_id: str
    ) -> Job | None:
        """`start` as one read and one write conditioned on the read's update_time: the same
        compare-and-set a transaction would make for one document, in 2 RPCs instead of 3
        (begin, read, commit). A refusal needs no write: the read is a consistent snapshot of
        the document, so it says what the transaction's read would. None leaves the decision
        to the transaction: a shared idempotency key (its hold is a second document), a
        NOT_FOUND (an unknown job or a missing database; the transaction's read tells them
        apart), or a document that changed after the read (the write was refused).
        """
        with store_errors():
            snapshot = self._tx.get_document(ref)
        if snapshot is None:
            return None
        job = _decoded(snapshot)
        # Appending to the stored history is only the same as rewriting it when the stored
        # array is exactly the decoded one (an entry an older version wrote may not be). Only
        # that field is copied out of the snapshot (to_dict copies the whole document).
        try:
            as_read = snapshot.get(_HISTORY)
        except KeyError:
            as_read = None
        exact = as_read == job.to_document()[_HISTORY]
        if job.explicit_key:
            return self._start_holding_key(ref, job, generation, lease, worker_id, exact)
        now = self._clock.now()
        new = self._rules.start(job, generation, now, lease, worker_id, uuid.uuid4().hex)
        stamp = self._update_unchanged(ref, job, new, append_history=exact)
        return None if stamp is None else new.replaced(update_time=stamp)

    def _start_holding_key(
        self, ref: Any, job: Job, generation: int, lease: timedelta, worker_id: str, exact: bool
    ) -> Job | None:
        """`start` for a job with a shared key, on the record already read: a transaction that
        reads (and locks) only the key's document and writes the job on condition that it is
        still at the read's update_time, so it bills what the whole transaction would (the job
        and the key read, both written). None when the job changed since (the condition
        failed): the transaction then decides from a fresh read."""

        def body(transaction: firestore.Transaction) -> Job:
            now = self._clock.now()
            token = uuid.uuid4().hex
            new = self._rules.start(job, generation, now, lease, worker_id, token)
            if new.state is State.RUNNING:
                self._hold_key(transaction, job, token, now + lease, now)
            diff = _appended(job, new) if exact else _diff(job, new)
            if diff:
                add_update(transaction, ref, diff, job.update_time)
            return new

        try:
            return self._tx.run(body)
        except StoreMisconfigured as exc:
            if isinstance(exc.__cause__, api_exceptions.FailedPrecondition):
                return None
            raise

    def _update_unchanged(
        self, ref: Any, old: Job, new: Job, *, append_history: bool = True
    ) -> datetime | None:
        """Write the fields `new` changed over `old`, on condition that the document is still
        at old.update_time
        (https://cloud.google.com/firestore/docs/reference/rpc/google.firestore.v1#precondition):
        the new update_time, or None when Firestore refused because it changed since.

        The condition guarantees the stored history is old's, so history entries `new`
        appended are sent alone, as an array union (`_appended`), not the whole array again:
        encoding the request is most of the client's CPU for a write. The Write itself is
        built by `add_update` (`encoding`), what `ref.update` sends without the client's
        per-value encoder, in the one-write batch `ref.update` commits."""
        assert old.update_time is not None
        diff = _appended(old, new) if append_history else _diff(old, new)
        if not diff:
            return old.update_time  # Firestore refuses an empty update; nothing to write
        batch = self._client.batch()
        add_update(batch, ref, diff, old.update_time)
        with store_errors():
            try:
                results = batch.commit(**self._bounds.write_kwargs)
            except api_exceptions.FailedPrecondition:
                return None
        stamp = getattr(results[0], "update_time", None) if results else None
        return as_datetime(stamp) if stamp else old.update_time

    def extend_lease(self, lease: Lease, duration: timedelta) -> Job:
        """The heartbeat: move the holder's lease_until to now + `duration` (a compare-and-set
        on the lease token; LeaseLost when it is no longer the holder's). The returned job
        shows a `cancel_requested` that arrived meanwhile."""
        if duration <= timedelta(0):
            raise ValidationError("duration must be positive")
        ref = self._jobs.document(lease.job_id)

        def body(transaction: firestore.Transaction) -> Job:
            job = self._load(transaction, ref, lease.job_id)
            now = self._clock.now()
            new = self._rules.extend(job, lease, now, duration)
            if job.explicit_key:
                assert new.lease_until is not None
                self._hold_key(transaction, job, lease.token, new.lease_until, now)
            _write(transaction, ref, job, new)
            return new

        return self._tx.run(body)

    def cancel_running(self, lease: Lease, *, progress: Mapping[str, Any] | None = None) -> Job:
        """Running → cancelled, when the operator asked (cancel_requested) and the worker
        honours it: before acting, or at a deadline check between units of work (`progress`
        says what was already done)."""

        def change(job: Job, now: datetime) -> Job:
            return self._rules.cancel_running(job, lease, now, progress)

        return self._worker_transition(lease, change)

    def release(
        self,
        lease: Lease,
        error: ErrorInfo,
        *,
        progress: Mapping[str, Any] | None = None,
        message_id: str | None = None,
    ) -> Job:
        """Running → enqueued after a transient error or an interrupted action, so Pub/Sub's
        redelivery (`message_id`) starts it again; `progress` is kept for that delivery.
        `enqueued_at` is set now, so the stale-enqueued gauge and the rescuer measure from
        this release. `attempt` is unchanged: Pub/Sub's deliveryAttempt counts these quick
        retries. With a cancel request the job is cancelled instead."""

        def change(job: Job, now: datetime) -> Job:
            return self._rules.release(
                job, lease, error, now, progress=progress, message_id=message_id
            )

        return self._worker_transition(lease, change)

    def complete(self, lease: Lease, result: Result, *, basis: Job | None = None) -> Job:
        """Running → completed with the result (details bounded). For a supplied (explicit,
        possibly shared) idempotency key, the key's document gets the result in the same
        transaction, and the key must still be held by this lease. Sets expire_at = now +
        terminal retention on both.

        `basis`: the job as the caller's delivery last wrote it (what `start` or its latest
        heartbeat returned). For a derived key, when its update_time is the lease's, the
        completion is one write conditioned on that update_time (a compare-and-set, no read);
        if the document changed since (a cancel request, a take-over, a reclaim), Firestore
        refuses it and the completion is decided in a transaction as without `basis`.
        """
        if basis is not None:
            done = self._complete_unread(lease, result, basis)
            if done is not None:
                return done
        ref = self._jobs.document(lease.job_id)

        def body(transaction: firestore.Transaction) -> Job:
            job = self._load(transaction, ref, lease.job_id)
            now = self._clock.now()
            new = self._rules.complete(job, lease, result, now)
            key_ref = self._idempotency.document(job.idempotency_key)
            # A derived key belongs to this job alone, and the job's own result (same
            # expire_at) already records the side effect: no second document for it.
            record_key = job.explicit_key and self._require_key(transaction, job, lease)
            stamped = new.result
            assert stamped is not None
            record = IdempotencyRecord(
                key=job.idempotency_key,
                job_id=job.job_id,
                action=job.action,
                subject=job.subject,
                outcome=stamped.outcome,
                details=dict(stamped.details),
                completed_at=now,
                expire_at=new.expire_at,
            )
            _write(transaction, ref, job, new)
            if record_key:
                transaction.set(key_ref, record.to_document())
            return new

        return self._tx.run(body)

    complete_if_running = complete

    def _complete_unread(self, lease: Lease, result: Result, basis: Job) -> Job | None:
        """The compare-and-set completion, or None when it does not apply or was refused."""
        if basis.explicit_key or basis.update_time is None:
            return None
        if lease.update_time is None or basis.update_time != lease.update_time:
            return None
        new = self._rules.complete(basis, lease, result, self._clock.now())
        stamp = self._update_unchanged(self._jobs.document(lease.job_id), basis, new)
        if stamp is None:
            return None  # changed since: the transaction decides
        return new.replaced(update_time=stamp)

    def retry_later(
        self,
        lease: Lease,
        due_at: datetime,
        error: ErrorInfo,
        *,
        progress: Mapping[str, Any] | None = None,
    ) -> Job:
        """Running → deferred with a new due_at, last_error and attempt + 1 (the next retry
        cycle); the next claim publishes it again. When the current attempt is the last
        (attempt == max_attempts) it raises AttemptsExhausted and changes nothing: the worker
        calls `fail` instead. With a cancel request the job is cancelled instead."""
        new_due = _require_aware(due_at, "due_at")

        def change(job: Job, now: datetime) -> Job:
            return self._rules.retry_later(job, lease, new_due, error, now, progress=progress)

        return self._worker_transition(lease, change)

    def fail(self, lease: Lease, error: ErrorInfo) -> Job:
        """Running → failed (terminal) with last_error and expire_at; with a cancel request,
        → cancelled (the operator's decision stands), last_error kept."""

        def change(job: Job, now: datetime) -> Job:
            return self._rules.fail(job, lease, error, now)

        return self._worker_transition(lease, change)

    def get_idempotency(self, key: str) -> IdempotencyRecord | None:
        """The recorded result of the side effect with this key, or None. One read."""
        with store_errors():
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

    def _worker_transition(self, lease: Lease, change: Callable[[Job, datetime], Job]) -> Job:
        """A lease holder's transition out of running: re-read, check the lease, apply; a
        shared idempotency key this lease held is freed in the same transaction."""
        ref = self._jobs.document(lease.job_id)

        def body(transaction: firestore.Transaction) -> Job:
            job = self._load(transaction, ref, lease.job_id)
            new = change(job, self._clock.now())
            key_ref = self._idempotency.document(job.idempotency_key)
            held = None
            if job.explicit_key and new.state is not State.RUNNING:
                held = self._get_in(transaction, key_ref)
            diff = _diff(job, new)
            if diff:
                transaction.update(ref, diff)
            if held is not None and held.exists:
                holder = (held.to_dict() or {}).get("holder") or {}
                if "outcome" not in (held.to_dict() or {}) and holder.get("token") == lease.token:
                    transaction.delete(key_ref)
            return new

        return self._tx.run(body)

    def _hold_key(
        self,
        transaction: firestore.Transaction,
        job: Job,
        token: str,
        until: datetime,
        now: datetime,
    ) -> None:
        """Take (or renew) a shared idempotency key for this lease inside its transaction:
        a live hold by another lease is refused like a held lease; a completed record is left
        alone (the worker reuses its result)."""
        key_ref = self._idempotency.document(job.idempotency_key)
        snapshot = self._get_in(transaction, key_ref)
        data = (snapshot.to_dict() or {}) if snapshot.exists else {}
        if "outcome" in data:
            return
        holder = data.get("holder") or {}
        held_until = holder.get("until")
        if (
            holder.get("token") not in (None, token)
            and isinstance(held_until, datetime)
            and held_until > now
        ):
            raise LeaseHeld(
                job.job_id, f"job {holder.get('job_id')!r} (shared idempotency key)", held_until
            )
        transaction.set(
            key_ref,
            {
                "holder": {"job_id": job.job_id, "token": token, "until": until},
                schema.EXPIRE_AT: until + self._rules.retention,
            },
        )

    def _require_key(self, transaction: firestore.Transaction, job: Job, lease: Lease) -> bool:
        """Whether to record the result under the job's shared key: yes while this lease
        holds it, no when a result is already recorded (the worker is completing with that
        result, which is never overwritten); LeaseLost when another lease took it over."""
        snapshot = self._get_in(transaction, self._idempotency.document(job.idempotency_key))
        data = (snapshot.to_dict() or {}) if snapshot.exists else {}
        if "outcome" in data:
            return False
        holder = data.get("holder") or {}
        if snapshot.exists and holder.get("token") != lease.token:
            detail = f"job {holder.get('job_id')!r} took the shared idempotency key over"
            raise LeaseLost(job.job_id, lease.owner, job.lease_owner, detail)
        return True

    def _quarantine(self, job_id: str, role: Role, by: str) -> bool:
        """Move an undecodable job document aside: one conditional raw update (in a
        transaction that re-reads it) to state failed, last_error.code invalid_record, the
        decode error and an audit entry. False when it decodes after all or is gone. Logged
        with its own event; never raises for the document's content."""
        ref = self._jobs.document(job_id)

        def body(transaction: firestore.Transaction) -> str | None:
            snapshot = self._get_in(transaction, ref)
            if not snapshot.exists:
                return None
            raw = snapshot.to_dict() or {}
            try:
                decode_job(job_id, raw)
            except InvalidRecord as exc:
                problem = exc.problem
            else:
                return None
            now = self._clock.now()
            transaction.update(
                ref, self._rules.quarantine_fields(raw, problem, now, f"{role}:{by}")
            )
            return problem

        try:
            problem = self._tx.run(body)
        except JobsError as exc:
            logger.error("could not quarantine job %s: %s", job_id, exc)
            return False
        if problem is None:
            return False
        logger.error(
            "job %s quarantined: %s",
            job_id,
            problem,
            extra={
                "fields": {
                    metrics.LOG_EVENT: metrics.EVENT_JOB_QUARANTINED,
                    "job_id": job_id,
                    "problem": problem,
                    "by": f"{role}:{by}",
                }
            },
        )
        return True

    def _decoded_raw(self, job_id: str, document: Any) -> Job:
        """`_decoded` for a raw `Document` protobuf (`TransactionRunner.query_in`)."""
        job = decode_job(job_id, decode_fields(document.fields, self._client))
        stamp = update_time(document)
        return job.replaced(update_time=as_datetime(stamp)) if stamp else job

    def _get_in(self, transaction: firestore.Transaction, ref: Any) -> Any:
        return self._tx.get_in(transaction, ref)

    def _load(self, transaction: firestore.Transaction, ref: Any, job_id: str) -> Job:
        snapshot = self._get_in(transaction, ref)
        if not snapshot.exists:
            raise JobNotFound(job_id)
        return _decoded(snapshot)

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

        return self._tx.run(body)

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
            if isinstance(value, tuple):  # one of several values (due_probe_query's shards)
                query = query.where(filter=FieldFilter(field_path, "in", list(value)))
            else:
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


@dataclass(frozen=True)
class _ReclaimStep:
    """One kind of abandoned work: its query, the condition re-checked per record, the
    change, and the reason name logged and reported for it."""

    name: str
    spec: Callable[[int, Part], QuerySpec]  # (limit, shards or None for all)
    applies: Callable[[Job], bool]
    change: Callable[[Job, datetime, str], Job]


@dataclass
class _ReclaimTally:
    run_id: str
    reclaimed: list[Reclaimed] = dataclasses.field(default_factory=list)
    quarantined: list[str] = dataclasses.field(default_factory=list)
    skipped: list[tuple[str, str]] = dataclasses.field(default_factory=list)
    stopped_by: JobsError | None = None
    _lock: threading.Lock = dataclasses.field(default_factory=threading.Lock, repr=False)

    def absorb(self, part: _ReclaimTally) -> None:
        """Add what one shard's part did (called from the shards' threads)."""
        with self._lock:
            self.reclaimed.extend(part.reclaimed)
            self.quarantined.extend(part.quarantined)
            self.skipped.extend(part.skipped)
            self.stopped_by = self.stopped_by or part.stopped_by

    def report(self) -> ReclaimReport:
        return ReclaimReport(
            tuple(self.reclaimed), tuple(self.quarantined), tuple(self.skipped), self.stopped_by
        )


def _decoded(snapshot: Any) -> Job:
    """The job in `snapshot` with its update_time; InvalidRecord when it cannot be decoded."""
    job = decode_job(snapshot.id, snapshot.to_dict())
    stamp = getattr(snapshot, "update_time", None)
    return dataclasses.replace(job, update_time=as_datetime(stamp)) if stamp else job


def _write(transaction: firestore.Transaction, ref: Any, old: Job, new: Job) -> None:
    """Write the fields `new` changed, if any (Firestore refuses an empty update)."""
    diff = _diff(old, new)
    if diff:
        add_update(transaction, ref, diff)


def _diff(old: Job, new: Job) -> dict[str, Any]:
    before, after = old.to_document(), new.to_document()
    return {k: v for k, v in after.items() if before.get(k) != v}


# Firestore's order of value types: null < boolean < number < timestamp < string < bytes <
# reference < geo point < array < map
# (https://firebase.google.com/docs/firestore/manage-data/data-types#value_type_ordering).
_TYPE_RANK: tuple[tuple[type, int], ...] = (
    (bool, 1),  # before int: a bool is an int in Python
    (int, 2),
    (float, 2),
    (datetime, 3),
    (str, 4),
    (bytes, 5),
)


def _order_key(snapshot: Any, field_path: str) -> tuple[int, Any, str]:
    """`snapshot`'s place in `order by field_path, __name__`, as Firestore orders it (values of
    kinds this store never orders by sort after, by their text)."""
    try:
        value = snapshot.get(field_path)
    except KeyError:
        value = None
    if value is None:
        return (0, 0, snapshot.id)
    for kind, rank in _TYPE_RANK:
        if isinstance(value, kind):
            if isinstance(value, datetime):
                value = value.astimezone(UTC)
            return (rank, value, snapshot.id)
    return (6, repr(value), snapshot.id)


def _merged(pages: Sequence[list[Any]], field_path: str, limit: int) -> list[Any]:
    """The first `limit` of the shards' pages, each in (field_path, ID) order, merged into
    that order: the k-way merge that makes N per-shard queries one ordered answer."""
    if len(pages) == 1:
        return pages[0][:limit]
    merged = heapq.merge(*pages, key=lambda snapshot: _order_key(snapshot, field_path))
    return list(itertools.islice(merged, limit))


def _appended(old: Job, new: Job) -> dict[str, Any]:
    """`_diff`, with a history that only grew by new, distinct entries written as
    `ArrayUnion` of those entries: Firestore appends each element not already in the array
    (https://cloud.google.com/firestore/docs/manage-data/add-data#update_elements_in_an_array),
    which for entries equal to none of the stored ones is exactly the new array. A history
    the bound trimmed is rewritten whole."""
    diff = _diff(old, new)
    grown = diff.get(_HISTORY)
    before = [entry.to_document() for entry in old.history]
    if grown is None or len(grown) <= len(before) or grown[: len(before)] != before:
        return diff
    added = grown[len(before) :]
    distinct = all(entry not in before and added.count(entry) == 1 for entry in added)
    if distinct:
        diff[_HISTORY] = firestore.ArrayUnion(added)
    return diff


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


def _require_aware(value: datetime, name: str) -> datetime:
    if not isinstance(value, datetime) or value.tzinfo is None or value.utcoffset() is None:
        raise ValidationError(f"{name} must be a timezone-aware datetime")
    return value.astimezone(UTC)


def _require_short(**values: str) -> None:
    long = [
        f"{name} is longer than {MAX_REASON_BYTES} bytes"
        for name, value in values.items()
        if len(value.encode("utf-8", "replace")) > MAX_REASON_BYTES
    ]
    if long:
        raise ValidationError(long)


def _require_text(**values: str) -> None:
    empty = [name for name, value in values.items() if not isinstance(value, str) or not value]
    if empty:
        raise ValidationError([f"{name} must be a non-empty string" for name in empty])


def _require_due_in_horizon(due_at: datetime, now: datetime) -> None:
    """horizon.py's one rule on due times, as a ValidationError."""
    problem = due_at_problem(due_at, now)
    if problem is not None:
        raise ValidationError([problem])
