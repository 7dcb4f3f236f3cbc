"""Scan leases: at most one scan run claims for a partition at a time, and a scheduled
execution is run once.

Cloud Scheduler never starts execution n + 1 of a job before execution n has finished, but its
delivery is at least once: a run that outlasts the attempt deadline is retried while it still
runs, a lost acknowledgement repeats a request, and an operator can force a run at any time
(https://cloud.google.com/scheduler/docs/configuring/deduplicate-job-requests). Each of those
would start a second run claiming at the catch-up rate beside the first, doubling the rate the
operator set. So a run that is going to claim first takes its partition's lease: one document
per partition, `control/lease-<k>` (the `control` collection already holds the operator's
document; no new collection, index or TTL policy). A run that finds the lease held by another
live run claims nothing ("overlap"); a request whose scheduled execution (job name + schedule
time) is already running or finished claims nothing either ("duplicate").

The lease expires by itself at `until` (the run's time budget + publish timeout + slack), so a
run that dies never blocks the partition for longer than a run could last. Acquiring is one
transaction (1 read, 1 write); releasing is one write conditioned on the acquire's commit time
(a compare-and-set, no read), so a lease taken over after expiry is never released by its old
holder.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any, Literal

from google.api_core import exceptions as api_exceptions
from google.cloud import firestore

from services.jobs import schema
from services.jobs.errors import JobsError
from services.store.bounds import CallBounds
from services.store.gateway import Gateway
from services.store.transactions import Transaction, TransactionRunner, as_datetime, store_errors

logger = logging.getLogger(__name__)

# The executions a lease document remembers as finished (for duplicates that arrive after the
# first attempt answered: a lost acknowledgement). Cloud Scheduler repeats the latest one.
REMEMBERED_EXECUTIONS = 10

Refusal = Literal["overlap", "duplicate"]


def lease_document_id(partition: int) -> str:
    """`lease-<k>` in the control collection."""
    if partition < 0:
        raise ValueError(f"partition must be >= 0, got {partition}")
    return f"lease-{partition}"


@dataclass(frozen=True)
class PartitionLease:
    """A partition's lease, held by `run_id` until `until`."""

    partition: int
    run_id: str
    until: datetime
    execution: str | None
    acquired_at: datetime
    # The commit time of the acquire: the release is conditioned on it.
    update_time: datetime | None = None


@dataclass(frozen=True)
class PartitionLeaseRefused:
    """Why a run may not claim: another live run holds the partition (`overlap`), or this
    scheduled execution already ran or is running (`duplicate`)."""

    reason: Refusal
    partition: int
    holder: str | None
    until: datetime | None
    execution: str | None

    def describe(self) -> str:
        if self.reason == "duplicate":
            return (
                f"scheduled execution {self.execution} of partition {self.partition} already "
                f"ran or is running (run {self.holder})"
            )
        until = f"{self.until:%Y-%m-%dT%H:%M:%SZ}" if self.until else "?"
        return f"partition {self.partition} is leased by run {self.holder} until {until}"


def _commit_time(transaction: Any) -> datetime | None:
    """The update_time the committed transaction's one write got (what the release
    conditions on), or None when the runner did not record it (then the release is a plain
    write)."""
    results = getattr(transaction, "write_results", None) or []
    stamp = results[0].update_time if results else None
    return as_datetime(stamp) if stamp is not None else None


def decide(
    data: Mapping[str, Any] | None, now: datetime, execution: str | None
) -> PartitionLeaseRefused | None:
    """The lease rules on the stored document: None when a run may take it."""
    data = data or {}
    partition = int(data.get("partition", 0))
    holder = data.get("holder")
    until = data.get("until")
    until = until.astimezone(UTC) if isinstance(until, datetime) else None
    held = bool(holder) and until is not None and until > now
    if execution is not None:
        if held and data.get("execution") == execution:
            return PartitionLeaseRefused("duplicate", partition, holder, until, execution)
        if execution in (data.get("finished") or ()):
            return PartitionLeaseRefused(
                "duplicate", partition, data.get("finished_by"), None, execution
            )
    if held:
        return PartitionLeaseRefused("overlap", partition, holder, until, execution)
    return None


class PartitionLeases:
    """The partitions' lease documents in Firestore."""

    def __init__(
        self, client: firestore.Client, *, timeout_s: float = 10.0, database: str | None = None
    ) -> None:
        self._client = client
        self._bounds = CallBounds(timeout_s)
        # Transactions through the public GAPIC client, as the store's (services/store/gateway).
        self._tx = TransactionRunner(Gateway(client, database, self._bounds))

    def _ref(self, partition: int) -> Any:
        return self._client.collection(schema.CONTROL).document(lease_document_id(partition))

    def acquire(
        self,
        partition: int,
        run_id: str,
        now: datetime,
        hold: timedelta,
        execution: str | None = None,
    ) -> PartitionLease | PartitionLeaseRefused:
        """Take the partition's lease for `hold`, or say why not (overlap or duplicate)."""
        ref = self._ref(partition)
        used: list[Any] = []

        def body(transaction: Transaction) -> PartitionLease | PartitionLeaseRefused:
            used[:] = [transaction]
            snapshot = self._tx.get_in(transaction, ref)
            data = snapshot.to_dict() if snapshot.exists else None
            refused = decide(data, now, execution)
            if refused is not None:
                return refused
            transaction.set(
                ref,
                {
                    "partition": partition,
                    "holder": run_id,
                    "until": now + hold,
                    "acquired_at": now,
                    "execution": execution,
                    "finished": list((data or {}).get("finished") or ())[-REMEMBERED_EXECUTIONS:],
                    "finished_by": (data or {}).get("finished_by"),
                },
            )
            return PartitionLease(partition, run_id, now + hold, execution, now)

        result = self._tx.run(body)
        if isinstance(result, PartitionLeaseRefused):
            return result
        return PartitionLease(
            result.partition,
            result.run_id,
            result.until,
            result.execution,
            result.acquired_at,
            _commit_time(used[0] if used else None),
        )

    def release(self, lease: PartitionLease, now: datetime, *, finished: bool) -> bool:
        """Give the lease back; when `finished`, remember its execution as done (a later
        duplicate does nothing). False when the lease had moved on (taken over after expiry):
        then nothing is written."""
        ref = self._ref(lease.partition)
        update: dict[str, Any] = {"holder": None, "until": now, "released_at": now}
        if finished and lease.execution is not None:
            update["finished"] = firestore.ArrayUnion([lease.execution])
            update["finished_by"] = lease.run_id
        option = (
            self._client.write_option(last_update_time=lease.update_time)
            if lease.update_time is not None
            else None
        )
        try:
            with store_errors():
                if option is not None:
                    ref.update(update, option=option, **self._bounds.write_kwargs)
                else:
                    ref.update(update, **self._bounds.write_kwargs)
        except JobsError as exc:
            if isinstance(exc.__cause__, api_exceptions.FailedPrecondition):
                logger.warning(
                    "scan lease of partition %d moved on before run %s released it",
                    lease.partition,
                    lease.run_id,
                    extra={"fields": {"reason": "lease_moved_on"}},
                )
                return False
            raise
        return True

    def get(self, partition: int) -> Mapping[str, Any] | None:
        """The stored lease document (for jobsctl watch), or None."""
        with store_errors():
            snapshot = self._ref(partition).get(**self._bounds.kwargs)
        return snapshot.to_dict() if snapshot.exists else None
