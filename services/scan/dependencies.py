"""What a scan run depends on besides the store, as protocols: the partition leases, the
publisher and the run log.

`services.store.partition_leases.PartitionLeases`, `services.edge.publisher.Publisher` and
`services.store.runs.ScanRunLog` provide them; the unit tests pass hand-written fakes.
"""

from __future__ import annotations

from concurrent import futures
from datetime import datetime, timedelta
from typing import Protocol

from services.store.partition_leases import PartitionLease, PartitionLeaseRefused
from services.store.runs import ScanRun


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
