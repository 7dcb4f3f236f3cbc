"""FirestoreJobStore: every read and change of job records, each change in a transaction.

The thin store: each operation loads the document inside a Firestore transaction, asks
`transitions.Transitions` for the new record (which asks `state.apply_transition`: the only
place the rules live), and writes only the fields that changed. The query shapes live in
`queries.py` (as `QuerySpec` values a test proves are served by a declared index), the
transaction plumbing in `transactions.py`.

This class only delegates, one line per operation, to the role that owns it; each role's
method documents its contract (docs/job-record.md, "Where things are"):
`scheduling.Scheduling`, `reads.Reads`, `claims.Claims`, `reclaims.Reclaims`,
`leases.Leases` and `shared_keys`, all on the shared `documents.Documents`.
"""

from __future__ import annotations

from collections.abc import Callable, Collection, Mapping, Sequence
from datetime import datetime, timedelta
from typing import Any

from google.api_core import retry as api_retry
from google.cloud import firestore

from services.jobs.catalogue import Catalogue
from services.jobs.clock import Clock
from services.jobs.control import Control, HousekeepingMark
from services.jobs.layout import ShardCensus, ShardLayout
from services.jobs.model import NewJob
from services.jobs.parts import ErrorInfo, Lease, Result
from services.jobs.record import Job
from services.jobs.results import (
    Backlog,
    ClaimedJob,
    EnqueueMark,
    IdempotencyRecord,
    NewerRecords,
    Page,
    ReclaimReport,
    ScheduleResult,
    Stats,
)
from services.jobs.state import DEFAULT_HISTORY_LIMIT, State
from services.jobs.transitions import DEFAULT_TERMINAL_RETENTION
from services.store import shared_keys
from services.store.bounds import DEFAULT_CALL_TIMEOUT_S
from services.store.claims import MARK_PAGE_SIZE, Claims
from services.store.documents import CLAIM_PAGE_SIZE, Documents
from services.store.leases import Leases
from services.store.queries import QuerySpec
from services.store.reads import Reads
from services.store.reclaims import Reclaims
from services.store.scheduling import ScheduleOutcome, Scheduling


class FirestoreJobStore:
    """The jobs collection and its companions (idempotency, control) in Firestore."""

    def __init__(
        self,
        client: firestore.Client,
        clock: Clock,
        *,
        history_limit: int = DEFAULT_HISTORY_LIMIT,
        terminal_retention: timedelta = DEFAULT_TERMINAL_RETENTION,
        known_actions: Catalogue | Collection[str] | None = None,
        query_observer: Callable[[QuerySpec], None] | None = None,
        timeout_s: float = DEFAULT_CALL_TIMEOUT_S,
        retry: api_retry.Retry | None = None,
        shards: int = 1,
        database: str | None = None,
    ) -> None:
        """`client` is the high-level client of the database the store keeps its records in;
        `database` names that database when it is not the default one (the store sends its
        RPCs through its own GAPIC client, and the high-level client keeps the name private)."""
        self._documents = Documents(
            client,
            clock,
            history_limit=history_limit,
            terminal_retention=terminal_retention,
            query_observer=query_observer,
            timeout_s=timeout_s,
            retry=retry,
            shards=shards,
            database=database,
        )
        self._scheduling = Scheduling(self._documents, known_actions)
        self._reads = Reads(self._documents)
        self._claims = Claims(self._documents)
        self._reclaims = Reclaims(self._documents)
        self._leases = Leases(self._documents)

    @property
    def clock(self) -> Clock:
        return self._documents.clock

    # -- application: scheduling.py ------------------------------------------------------------

    def schedule(
        self, new_job: NewJob, *, by: str = "application", producer: str | None = None
    ) -> ScheduleResult:
        return self._scheduling.schedule(new_job, by=by, producer=producer)

    def schedule_many(
        self, new_jobs: Sequence[NewJob], *, by: str = "application"
    ) -> list[ScheduleOutcome]:
        return self._scheduling.schedule_many(new_jobs, by=by)

    # -- operator: reads.py --------------------------------------------------------------------

    def cancel(self, job_id: str, reason: str, by: str) -> Job:
        return self._reads.cancel(job_id, reason, by)

    def reschedule(self, job_id: str, due_at: datetime, reason: str, by: str) -> Job:
        return self._reads.reschedule(job_id, due_at, reason, by)

    def get(self, job_id: str) -> Job | None:
        return self._reads.get(job_id)

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
        return self._reads.list_jobs(
            state=state,
            due_before=due_before,
            overdue_at=overdue_at,
            claimed_before=claimed_before,
            limit=limit,
            cursor=cursor,
        )

    def stats(self, now: datetime, claim_timeout: timedelta, *, shard_census: bool = True) -> Stats:
        return self._reads.stats(now, claim_timeout, shard_census=shard_census)

    def newer_records(self, stats: Stats) -> NewerRecords:
        return self._reads.newer_records(stats)

    def pending_by_action(self, actions: Sequence[str]) -> dict[str, int]:
        return self._reads.pending_by_action(actions)

    def backlog(
        self, now: datetime, claim_timeout: timedelta, enqueued_timeout: timedelta
    ) -> Backlog:
        return self._reads.backlog(now, claim_timeout, enqueued_timeout)

    def get_control(self) -> Control:
        return self._reads.get_control()

    def update_control(self, by: str, reason: str, **changes: Any) -> Control:
        return self._reads.update_control(by, reason, **changes)

    def record_housekeeping(self, mark: HousekeepingMark) -> None:
        self._reads.record_housekeeping(mark)

    @property
    def shards(self) -> int:
        """JOBS_SHARDS as this store queries with it."""
        return self._documents.shards

    def shard_census(self, *, exact: bool) -> ShardCensus:
        return self._reads.shard_census(exact=exact)

    def adopt_shard_layout(self, layout: ShardLayout) -> ShardLayout:
        return self._reads.adopt_shard_layout(layout)

    # -- scan: claims.py and reclaims.py -------------------------------------------------------

    def claim_due(
        self,
        now: datetime,
        run_id: str,
        limit: int,
        *,
        page_size: int = CLAIM_PAGE_SIZE,
        on_quarantine: Callable[[str], None] | None = None,
        shards: Sequence[int] | None = None,
    ) -> list[ClaimedJob]:
        return self._claims.claim_due(
            now, run_id, limit, page_size=page_size, on_quarantine=on_quarantine, shards=shards
        )

    def anything_due(self, now: datetime, shards: Sequence[int] | None = None) -> bool:
        return self._claims.anything_due(now, shards)

    def mark_enqueued_many(
        self,
        items: Sequence[tuple[str, int, str]],
        at: datetime | None = None,
        *,
        page_size: int = MARK_PAGE_SIZE,
    ) -> list[EnqueueMark]:
        return self._claims.mark_enqueued_many(items, at, page_size=page_size)

    def mark_enqueue_failed(self, job_id: str, generation: int, error: ErrorInfo) -> Job:
        return self._claims.mark_enqueue_failed(job_id, generation, error)

    def reclaim_expired(
        self,
        now: datetime,
        claim_timeout: timedelta,
        limit: int,
        run_id: str,
        *,
        enqueued_timeout: timedelta | None = None,
        unacked_since: datetime | None = None,
        quick: bool = False,
    ) -> ReclaimReport:
        return self._reclaims.reclaim_expired(
            now,
            claim_timeout,
            limit,
            run_id,
            enqueued_timeout=enqueued_timeout,
            unacked_since=unacked_since,
            quick=quick,
        )

    # -- worker: leases.py and shared_keys.py --------------------------------------------------

    def start(self, job_id: str, generation: int, lease: timedelta, worker_id: str) -> Job:
        return self._leases.start(job_id, generation, lease, worker_id)

    def extend_lease(self, lease: Lease, duration: timedelta) -> Job:
        return self._leases.extend_lease(lease, duration)

    def cancel_running(self, lease: Lease, *, progress: Mapping[str, Any] | None = None) -> Job:
        return self._leases.cancel_running(lease, progress=progress)

    def release(
        self,
        lease: Lease,
        error: ErrorInfo,
        *,
        progress: Mapping[str, Any] | None = None,
        message_id: str | None = None,
    ) -> Job:
        return self._leases.release(lease, error, progress=progress, message_id=message_id)

    def complete(self, lease: Lease, result: Result, *, basis: Job | None = None) -> Job:
        return self._leases.complete(lease, result, basis=basis)

    def retry_later(
        self,
        lease: Lease,
        due_at: datetime,
        error: ErrorInfo,
        *,
        progress: Mapping[str, Any] | None = None,
        count_attempt: bool = True,
    ) -> Job:
        return self._leases.retry_later(
            lease, due_at, error, progress=progress, count_attempt=count_attempt
        )

    def fail(self, lease: Lease, error: ErrorInfo) -> Job:
        return self._leases.fail(lease, error)

    def get_idempotency(self, key: str) -> IdempotencyRecord | None:
        return shared_keys.get_idempotency(self._documents, key)
