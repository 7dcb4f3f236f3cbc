"""What a scan run depends on, as protocols: the store, the publisher and the run log.

`FirestoreJobStore`, `services.edge.publisher.Publisher` and `services.store.runs.ScanRunLog`
provide them; the unit tests pass hand-written fakes.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from concurrent import futures
from datetime import datetime, timedelta
from typing import Any, Protocol

from services.jobs.control import Control, HousekeepingMark
from services.jobs.layout import ShardCensus, ShardLayout
from services.jobs.parts import ErrorInfo
from services.jobs.results import Backlog as StoreBacklog
from services.jobs.results import ClaimedJob, EnqueueMark, ReclaimReport
from services.store.partition_leases import PartitionLease, PartitionLeaseRefused
from services.store.runs import ScanRun


class ScanStore(Protocol):
    """The store operations a scan run uses (FirestoreJobStore provides them)."""

    def get_control(self) -> Control: ...

    def record_housekeeping(self, mark: HousekeepingMark) -> None: ...

    def shard_census(self, *, exact: bool) -> ShardCensus: ...

    def adopt_shard_layout(self, layout: ShardLayout) -> ShardLayout: ...

    def anything_due(self, now: datetime, shards: Sequence[int] | None = None) -> bool: ...

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
    ) -> ReclaimReport: ...

    def claim_due(
        self,
        now: datetime,
        run_id: str,
        limit: int,
        *,
        page_size: int,
        on_quarantine: Callable[[str], None] | None = None,
        shards: Sequence[int] | None = None,
    ) -> Sequence[ClaimedJob]: ...

    def mark_enqueued_many(
        self, items: Sequence[tuple[str, int, str]], at: datetime | None = None
    ) -> Sequence[EnqueueMark]: ...

    def mark_enqueue_failed(self, job_id: str, generation: int, error: ErrorInfo) -> Any: ...

    def backlog(
        self, now: datetime, claim_timeout: timedelta, enqueued_timeout: timedelta
    ) -> StoreBacklog: ...


class LeaseKeeper(Protocol):
    """The partitions' leases (leases.PartitionLeases keeps them in Firestore)."""

    def acquire(
        self,
        partition: int,
        run_id: str,
        now: datetime,
        hold: timedelta,
        execution: str | None = None,
    ) -> PartitionLease | PartitionLeaseRefused: ...

    def release(self, lease: PartitionLease, now: datetime, *, finished: bool) -> bool: ...


class JobPublisher(Protocol):
    """Publishes one job ID; the future resolves to the message ID."""

    timeout_s: float

    def publish(self, job_id: str, generation: int, run_id: str) -> futures.Future[str]: ...


class RunRecorder(Protocol):
    """Keeps the record of each run (runs.ScanRunLog writes `scan_runs`)."""

    def record(self, run: ScanRun) -> None: ...
