"""Documents: the plumbing every role of the store shares.

The collections' references, the transaction runner and call bounds, a job's load, the
read-modify-write `transition`, the queries (`stream`, `count`, `query` from a `QuerySpec`),
the quarantine of an undecodable record, and the conditional writes (one document at its
read's update_time, or many in one BatchWrite). The roles (`scheduling`, `reads`, `claims`,
`reclaims`, `leases`) each hold one `Documents` and never each other.
"""

from __future__ import annotations

import dataclasses
import logging
from collections.abc import Callable, Iterator, Mapping, Sequence
from datetime import UTC, datetime, timedelta
from typing import Any

from google.api_core import exceptions as api_exceptions
from google.api_core import retry as api_retry
from google.cloud import firestore

from services.jobs import schema
from services.jobs.clock import Clock, clock_offset
from services.jobs.errors import (
    ClockSkewed,
    InvalidRecord,
    JobNotFound,
    JobsError,
    NewerRecord,
    StoreRejected,
    ValidationError,
)
from services.jobs.horizon import due_at_problem
from services.jobs.limits import MAX_REASON_BYTES, life_headroom_problem
from services.jobs.record import Job, decode_job
from services.jobs.shard import read_parts, require_shards
from services.jobs.state import Role
from services.jobs.transitions import Transitions
from services.store.bounds import CallBounds
from services.store.decoding import decode_fields, update_time
from services.store.gateway import Gateway
from services.store.queries import QuerySpec
from services.store.transactions import Transaction, TransactionRunner, as_datetime, store_errors
from services.telemetry import metrics

logger = logging.getLogger(__name__)

HISTORY = "history"  # the audit trail's key in Job.to_document
CLAIM_PAGE_SIZE = 100  # documents claimed (or reclaimed) per transaction


class Documents:
    """The client, clock, rules and call bounds one store's roles share, and what they do
    with documents alike."""

    def __init__(
        self,
        client: firestore.Client,
        clock: Clock,
        *,
        history_limit: int,
        terminal_retention: timedelta,
        query_observer: Callable[[QuerySpec], None] | None,
        timeout_s: float,
        retry: api_retry.Retry | None,
        shards: int,
        database: str | None = None,
        max_clock_skew: timedelta | None = None,
    ) -> None:
        self.shards = require_shards(shards)
        self.max_clock_skew = max_clock_skew
        self.read_parts = read_parts(self.shards)  # [None] with one shard
        self.rules = Transitions(history_limit, terminal_retention)
        self.client = client
        self.clock = clock
        self._observe = query_observer
        self.bounds = CallBounds(timeout_s, retry)
        # Every RPC through the public GAPIC client (`gateway`); `client`, the high-level
        # client of the same database, builds document references and sends nothing.
        self.gateway = Gateway(client, database, self.bounds)
        self.tx = TransactionRunner(self.gateway)

    @property
    def jobs(self) -> Any:
        return self.client.collection(schema.JOBS)

    @property
    def idempotency(self) -> Any:
        return self.client.collection(schema.IDEMPOTENCY)

    @property
    def control_ref(self) -> Any:
        return self.client.collection(schema.CONTROL).document(schema.CONTROL_DOCUMENT)

    def quarantine(self, job_id: str, role: Role, by: str, *, headroom: bool = False) -> bool:
        """Move an undecodable job document aside (with `headroom`, also one too large to move
        through its life: `unclaimable`): one conditional raw update (in a transaction that
        re-reads it) to state failed, last_error.code invalid_record, the problem and an audit
        entry; when Firestore refuses that as too large, the state alone (`Transitions.
        quarantine`, bare). False when it is fine after all or is gone. Logged with its own
        event; never raises for the document's content."""
        ref = self.jobs.document(job_id)

        def body(transaction: Transaction, bare: bool) -> str | None:
            snapshot = self.get_in(transaction, ref)
            if not snapshot.exists:
                return None
            raw = snapshot.to_dict() or {}
            problem = unclaimable(job_id, raw) if headroom else undecodable(job_id, raw)
            if problem is None:
                return None
            now = self.clock.now()
            quarantine = self.rules.quarantine(raw, problem, now, f"{role}:{by}", bare=bare)
            entry = quarantine.history_entry
            if entry is None:
                transaction.update(ref, quarantine.fields)
            else:
                append = quarantine.append_to_history
                history = firestore.ArrayUnion([entry]) if append else [entry]
                transaction.update(ref, {**quarantine.fields, HISTORY: history})
            return problem

        try:
            try:
                problem = self.tx.run(body, False)
            except StoreRejected:
                if not headroom:
                    raise
                # The full quarantine would pass the size limit: the state alone fits.
                problem = self.tx.run(body, True)
        except NewerRecord as exc:
            # Written by a newer version: left exactly as found, counted and alerted.
            logger.error(
                "job %s left untouched: written by a newer version (%s)",
                job_id,
                exc.problem,
                extra={
                    "fields": {
                        metrics.LOG_EVENT: metrics.EVENT_JOB_FROM_NEWER_VERSION,
                        "job_id": job_id,
                        "problem": exc.problem,
                        "by": f"{role}:{by}",
                    }
                },
            )
            return False
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

    def check_clock(self, before: datetime, read_time: Any, after: datetime, what: str) -> None:
        """Refuse `what` with ClockSkewed when this store's clock, read at `before` and `after`
        around a read Firestore answered at `read_time`, is further from Firestore's time than
        `max_clock_skew` (issue 33, finding 8). Every `now` that fences (a claim's due time, a
        lease's expiry, a claim timeout) is this clock's; Firestore's read_time is the one time
        every instance shares. No check without a tolerance or a read_time."""
        if self.max_clock_skew is None or read_time is None:
            return
        offset = clock_offset(before, as_datetime(read_time), after)
        if abs(offset) <= self.max_clock_skew:
            return
        error = ClockSkewed(offset, self.max_clock_skew, what)
        logger.error(
            "%s",
            error,
            extra={
                "fields": {
                    metrics.LOG_EVENT: metrics.EVENT_CLOCK_SKEW,
                    "offset_s": offset.total_seconds(),
                    "tolerance_s": self.max_clock_skew.total_seconds(),
                    "refused": what,
                }
            },
        )
        raise error

    def decoded_raw(self, job_id: str, document: Any) -> Job:
        """`decoded` for a raw `Document` protobuf (`TransactionRunner.query_in`)."""
        return self.decoded_fields(job_id, document)[0]

    def decoded_fields(self, job_id: str, document: Any) -> tuple[Job, dict[str, Any]]:
        """`decoded_raw`, and the decoded fields it was read from (not copied: the caller
        only reads them)."""
        fields = decode_fields(document.fields, self.client)
        job = decode_job(job_id, fields)
        stamp = update_time(document)
        return (job.replaced(update_time=as_datetime(stamp)) if stamp else job), fields

    def get_in(self, transaction: Transaction, ref: Any) -> Any:
        return self.tx.get_in(transaction, ref)

    def load(self, transaction: Transaction, ref: Any, job_id: str) -> Job:
        snapshot = self.get_in(transaction, ref)
        if not snapshot.exists:
            raise JobNotFound(job_id)
        return decoded(snapshot)

    def transition(self, job_id: str, change: Callable[[Job, datetime], Job]) -> Job:
        """Re-read the job in a transaction, compute its new value, write only what changed."""
        ref = self.jobs.document(job_id)

        def body(transaction: Transaction) -> Job:
            job = self.load(transaction, ref, job_id)
            new = change(job, self.clock.now())
            diff = changed_fields(job, new)
            if diff:
                transaction.update(ref, diff)
            return new

        return self.tx.run(body)

    def stream(
        self, spec: QuerySpec, transaction: Transaction | None = None, read_time: Any = None
    ) -> Iterator[Any]:
        """The snapshots `spec` matches (in `transaction`, or at `read_time`, when given)."""
        spec = self.query(spec)
        if transaction is not None:
            return transaction.stream(spec)
        return self.gateway.stream(spec, read_time=read_time)

    def count(self, spec: QuerySpec, read_time: Any = None) -> int:
        count, _ = self.gateway.count(self.query(spec), read_time)
        return count

    def count_at(self, spec: QuerySpec) -> tuple[int, Any]:
        """`count`, and the read time Firestore answered at (for the counts that follow)."""
        return self.gateway.count(self.query(spec))

    def query(self, spec: QuerySpec) -> QuerySpec:
        """`spec`, once the query observer saw it: what every query of the store goes through."""
        if self._observe is not None:
            self._observe(spec)
        return spec

    def update_if_unchanged(
        self, ref: Any, old: Job, new: Job, *, append_history: bool = True
    ) -> datetime | None:
        """Write the fields `new` changed over `old`, on condition that the document is still
        at old.update_time
        (https://cloud.google.com/firestore/docs/reference/rpc/google.firestore.v1#precondition):
        the new update_time, or None when Firestore refused because it changed since.

        The condition guarantees the stored history is old's, so history entries `new`
        appended are sent alone, as an array union (`appended_fields`), not the whole array
        again: encoding the request is most of the client's CPU for a write. The Write is
        built by `encoding` on the raw protobufs and sent as a one-write Commit."""
        assert old.update_time is not None
        diff = appended_fields(old, new) if append_history else changed_fields(old, new)
        if not diff:
            return old.update_time  # Firestore refuses an empty update; nothing to write
        batch = self.gateway.writes()
        batch.update(ref, diff, old.update_time)
        with store_errors():
            try:
                results = self.gateway.commit(batch).write_results
            except api_exceptions.FailedPrecondition:
                return None
            except api_exceptions.Aborted as exc:
                # Contention on a write outside a transaction (issue 33, finding 5): settled
                # as a refused condition, by the caller's transaction, which reads the record
                # back (and finds this write if it applied after all) and retries ABORTED.
                logger.info(
                    "conditional write of %s aborted, deciding in a transaction: %s", ref.id, exc
                )
                return None
        stamp = update_time(results[0]) if results else None
        return as_datetime(stamp) if stamp else old.update_time

    def write_conditionally(self, changes: Sequence[tuple[Job, Job]]) -> list[datetime | None]:
        """Write each `new` over its `old` (only the fields that differ), each on condition
        that the document is still at old.update_time
        (https://cloud.google.com/firestore/docs/reference/rpc/google.firestore.v1#precondition),
        in one BatchWrite request; per change the new update_time, or None when it was refused
        or could not be sent (the caller falls back to a transaction, which sorts it out)."""
        batch = self.gateway.writes()
        jobs = self.jobs
        for old, new in changes:
            batch.update(jobs.document(old.job_id), changed_fields(old, new), old.update_time)
        try:
            raw = self.gateway.batch_write(batch)  # raw results: no proto-plus wrapper each
        except (api_exceptions.GoogleAPICallError, api_exceptions.RetryError) as exc:
            logger.warning("conditional batch write failed, falling back: %s", exc)
            return [None] * len(changes)
        stamps = [update_time(result) for result in raw.write_results]
        return [
            as_datetime(stamp) if status.code == 0 and stamp is not None else None
            for stamp, status in zip(stamps, raw.status, strict=True)
        ]


def undecodable(job_id: str, raw: Mapping[str, Any]) -> str | None:
    """Why `raw` is not a job record (None when it decodes); NewerRecord raises."""
    try:
        decode_job(job_id, raw)
    except NewerRecord:
        raise
    except InvalidRecord as exc:
        return exc.problem
    return None


def unclaimable(job_id: str, raw: Mapping[str, Any]) -> str | None:
    """Why `raw` cannot be claimed: it is undecodable, or too large to move through its life
    (`life_headroom_problem`: the claim, history, a result would pass Firestore's 1 MiB limit
    at some later write, leaving the job stuck there; issue 33, finding 2). None when fine."""
    return undecodable(job_id, raw) or life_headroom_problem(schema.JOBS, job_id, raw)


def decoded(snapshot: Any) -> Job:
    """The job in `snapshot` with its update_time; InvalidRecord when it cannot be decoded."""
    job = decode_job(snapshot.id, snapshot.to_dict())
    stamp = getattr(snapshot, "update_time", None)
    return dataclasses.replace(job, update_time=as_datetime(stamp)) if stamp else job


def write_changes(transaction: Transaction, ref: Any, old: Job, new: Job) -> None:
    """Write the fields `new` changed, if any (Firestore refuses an empty update)."""
    diff = changed_fields(old, new)
    if diff:
        transaction.update(ref, diff)


def changed_fields(old: Job, new: Job) -> dict[str, Any]:
    before, after = old.to_document(), new.to_document()
    return {k: v for k, v in after.items() if before.get(k) != v}


def appended_fields(old: Job, new: Job) -> dict[str, Any]:
    """`changed_fields`, with a history that only grew by new, distinct entries written as
    `ArrayUnion` of those entries: Firestore appends each element not already in the array
    (https://cloud.google.com/firestore/docs/manage-data/add-data#update_elements_in_an_array),
    which for entries equal to none of the stored ones is exactly the new array. A history
    the bound trimmed is rewritten whole."""
    diff = changed_fields(old, new)
    grown = diff.get(HISTORY)
    before = [entry.to_document() for entry in old.history]
    if grown is None or len(grown) <= len(before) or grown[: len(before)] != before:
        return diff
    added = grown[len(before) :]
    distinct = all(entry not in before and added.count(entry) == 1 for entry in added)
    if distinct:
        diff[HISTORY] = firestore.ArrayUnion(added)
    return diff


def text_ok(*values: object) -> bool:
    return all(isinstance(value, str) and value for value in values)


def require_aware(value: datetime, name: str) -> datetime:
    if not isinstance(value, datetime) or value.tzinfo is None or value.utcoffset() is None:
        raise ValidationError(f"{name} must be a timezone-aware datetime")
    return value.astimezone(UTC)


def require_short(**values: str) -> None:
    long = [
        f"{name} is longer than {MAX_REASON_BYTES} bytes"
        for name, value in values.items()
        if len(value.encode("utf-8", "replace")) > MAX_REASON_BYTES
    ]
    if long:
        raise ValidationError(long)


def require_text(**values: str) -> None:
    empty = [name for name, value in values.items() if not isinstance(value, str) or not value]
    if empty:
        raise ValidationError([f"{name} must be a non-empty string" for name in empty])


def require_due_in_horizon(due_at: datetime, now: datetime) -> None:
    """horizon.py's one rule on due times, as a ValidationError."""
    problem = due_at_problem(due_at, now)
    if problem is not None:
        raise ValidationError([problem])
