"""Leases: the worker's side of the store, from start to a terminal state.

`start` takes the lease; `extend_lease` (the heartbeat), `save_progress` (an action's
write-ahead), `cancel_running`, `release`, `complete`, `retry_later` and `fail` take the
`Lease` that `start` returned (job.lease). Its token is new on every start, so any delivery
but the one holding the running lease (a stale one in the same process included) is refused
with LeaseLost and changes nothing.
"""

from __future__ import annotations

import uuid
from collections.abc import Callable, Mapping
from datetime import datetime, timedelta
from typing import Any

from google.api_core import exceptions as api_exceptions

from services.jobs.errors import (
    ClockSkewed,
    InvalidRecord,
    JobNotFound,
    NewerRecord,
    OutcomeUnknown,
    StoreMisconfigured,
    StoreUnavailable,
    ValidationError,
)
from services.jobs.parts import ErrorInfo, Lease, Result
from services.jobs.record import Job
from services.jobs.results import IdempotencyRecord
from services.jobs.state import Role, State
from services.store.documents import (
    HISTORY,
    Documents,
    appended_fields,
    changed_fields,
    decoded,
    require_aware,
    require_text,
    write_changes,
)
from services.store.key_holds import hold_key, require_key
from services.store.transactions import Transaction, store_errors

# A start whose answer was lost is tried once more with the same token (see `start`).
START_ATTEMPTS = 2


def _started_by(job: Job, token: str) -> bool:
    """Whether `job` is running under the lease `token` names (a start of ours applied)."""
    return job.state is State.RUNNING and job.lease_token == token


class Leases:
    """Starts jobs under a lease and ends them for the lease's holder."""

    def __init__(self, docs: Documents) -> None:
        self._docs = docs

    def start(self, job_id: str, generation: int, lease: timedelta, worker_id: str) -> Job:
        """Take the lease: enqueued or claimed (push before enqueue) → running, with a new
        lease token (per delivery) that every later worker transition must present.

        Refuses: terminal → AlreadyTerminal; another generation → StaleGeneration; a live
        lease → LeaseHeld (also when another job holds the job's shared idempotency key);
        deferred → InvalidTransition; an undecodable document → InvalidRecord (quarantined
        first), or NewerRecord for one written by a newer version (left untouched). An
        expired lease of the same generation is taken over, and that costs the crashed cycle
        an attempt exactly as when the reclaimer finds it: attempt + 1, or `failed` when it
        was the last (the returned job is then failed, with no lease). `attempt` is otherwise
        unchanged. The returned job shows `cancel_requested`, which the
        worker must honour with `cancel_running`.
        """
        require_text(worker_id=worker_id)
        if lease <= timedelta(0):
            raise ValidationError("lease must be positive")
        # One token for every attempt: a write whose answer was lost (it may have applied)
        # is settled by the next attempt's read finding this token running, not refused as
        # a live lease held by "someone else", which would cost a max_attempts=1 job its run.
        token = uuid.uuid4().hex
        for attempt in range(START_ATTEMPTS):
            try:
                return self._start_once(job_id, generation, lease, worker_id, token)
            except ClockSkewed:
                raise  # the same clock again: nothing a retry here changes
            except (StoreUnavailable, OutcomeUnknown):
                if attempt + 1 >= START_ATTEMPTS:
                    raise
        raise AssertionError("unreachable")

    def _start_once(
        self, job_id: str, generation: int, lease: timedelta, worker_id: str, token: str
    ) -> Job:
        ref = self._docs.jobs.document(job_id)
        try:
            started = self._start_by_compare_and_set(
                ref, job_id, generation, lease, worker_id, token
            )
        except NewerRecord:
            raise  # left exactly as found: not even the quarantine's read (the worker logs it)
        except InvalidRecord:
            self._docs.quarantine(job_id, Role.WORKER, worker_id)
            raise
        if started is not None:
            return started

        def body(transaction: Transaction) -> Job:
            before = self._docs.clock.now()
            snapshot = self._docs.get_in(transaction, ref)
            now = self._docs.clock.now()
            if not snapshot.exists:
                raise JobNotFound(job_id)
            job = decoded(snapshot)
            if _started_by(job, token):
                return job
            # The transaction's read carries its read_time: every start here is checked.
            self._docs.check_clock(before, snapshot.read_time, now, "start")
            new = self._docs.rules.start(job, generation, now, lease, worker_id, token)
            if new.state is State.RUNNING and job.explicit_key:
                hold_key(self._docs, transaction, job, token, now + lease, now)
            write_changes(transaction, ref, job, new)
            return new

        try:
            return self._docs.tx.run(body)
        except NewerRecord:
            raise
        except InvalidRecord:
            self._docs.quarantine(job_id, Role.WORKER, worker_id)
            raise

    def _start_by_compare_and_set(
        self, ref: Any, job_id: str, generation: int, lease: timedelta, worker_id: str, token: str
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
            document = self._docs.tx.get_document(ref)
            if document is None:
                return None
            # Decoded straight from the raw answer, as the claim's reads are: no snapshot.
            job, fields = self._docs.decoded_fields(job_id, document)
        if _started_by(job, token):
            return job  # an earlier attempt's write applied; its answer was lost
        # Appending to the stored history is only the same as rewriting it when the stored
        # array is exactly the decoded one (an entry an older version wrote may not be).
        exact = fields.get(HISTORY) == job.to_document()[HISTORY]
        self._check_clock_before_take_over(ref, job)
        if job.explicit_key:
            return self._start_holding_key(ref, job, generation, lease, worker_id, exact, token)
        now = self._docs.clock.now()
        new = self._docs.rules.start(job, generation, now, lease, worker_id, token)
        stamp = self._docs.update_if_unchanged(ref, job, new, append_history=exact)
        if stamp is None:
            return None
        started = new.replaced(update_time=stamp)
        self._check_clock_after_start(now, stamp, started)
        return started

    def _check_clock_before_take_over(self, ref: Any, job: Job) -> None:
        """Before a take-over (running, its lease lapsed by this clock), this clock against
        Firestore's: a clock ahead would take over a live lease (issue 33, finding 8). The
        GetDocument answer carries no read_time, so a take-over, which is rare, costs one read
        more: BatchGetDocuments answers with its read_time."""
        if self._docs.max_clock_skew is None or job.state is not State.RUNNING:
            return
        if job.lease_live(self._docs.clock.now()):
            return  # refused as LeaseHeld: nothing is taken
        before = self._docs.clock.now()
        with store_errors():
            snapshot = self._docs.gateway.get(ref)
        self._docs.check_clock(before, snapshot.read_time, self._docs.clock.now(), "take-over")

    def _check_clock_after_start(self, now: datetime, committed: datetime, job: Job) -> None:
        """After a start, its commit time against the clock that set the lease: a clock
        behind writes a lease that ends early in Firestore's time, so another delivery could
        take over while this one acts. Such a start is given back (release: enqueued, same
        attempt, for Pub/Sub's redelivery) and refused with ClockSkewed; a clock ahead only
        made the lease longer (the take-over check guards the other side)."""
        if self._docs.max_clock_skew is None or job.lease is None:
            return
        try:
            self._docs.check_clock(now, committed, self._docs.clock.now(), "start")
        except ClockSkewed as exc:
            if exc.offset > timedelta(0):
                return  # ahead: the lease is only longer; the take-over check guards the rest
            self.release(job.lease, ErrorInfo("clock_skew", str(exc)))
            raise

    def _start_holding_key(
        self,
        ref: Any,
        job: Job,
        generation: int,
        lease: timedelta,
        worker_id: str,
        exact: bool,
        token: str,
    ) -> Job | None:
        """`start` for a job with a shared key, on the record already read: a transaction that
        reads (and locks) only the key's document and writes the job on condition that it is
        still at the read's update_time, so it bills what the whole transaction would (the job
        and the key read, both written). None when the job changed since (the condition
        failed): the transaction then decides from a fresh read."""

        def body(transaction: Transaction) -> Job:
            now = self._docs.clock.now()
            new = self._docs.rules.start(job, generation, now, lease, worker_id, token)
            if new.state is State.RUNNING:
                hold_key(self._docs, transaction, job, token, now + lease, now)
            diff = appended_fields(job, new) if exact else changed_fields(job, new)
            if diff:
                transaction.update(ref, diff, job.update_time)
            return new

        try:
            return self._docs.tx.run(body)
        except StoreMisconfigured as exc:
            if isinstance(exc.__cause__, api_exceptions.FailedPrecondition):
                return None
            raise

    def extend_lease(self, lease: Lease, duration: timedelta) -> Job:
        """The heartbeat: move the holder's lease_until to now + `duration` (a compare-and-set
        on the lease token; LeaseLost when it is no longer the holder's). The returned job
        shows a `cancel_requested` that arrived meanwhile."""
        if duration <= timedelta(0):
            raise ValidationError("duration must be positive")
        ref = self._docs.jobs.document(lease.job_id)

        def body(transaction: Transaction) -> Job:
            job = self._docs.load(transaction, ref, lease.job_id)
            now = self._docs.clock.now()
            new = self._docs.rules.extend(job, lease, now, duration)
            if job.explicit_key:
                assert new.lease_until is not None
                hold_key(self._docs, transaction, job, lease.token, new.lease_until, now)
            write_changes(transaction, ref, job, new)
            return new

        return self._docs.tx.run(body)

    def save_progress(
        self, lease: Lease, progress: Mapping[str, Any], *, basis: Job | None = None
    ) -> Job:
        """Write `progress` (what the action is about to act on) while the delivery goes on:
        the job stays running under the same lease, nothing else changes but updated_at. It
        is the write-ahead of a side effect, so it is fenced like every lease holder's write:
        LeaseLost when `lease` is no longer the running one (token and generation), and
        nothing is written; ValidationError when `progress` would not be kept whole.

        `basis`: the job as this delivery last wrote it. When its update_time is the lease's,
        the write is one commit conditioned on that update_time (a compare-and-set, no read,
        one billed write); otherwise, or when the document changed since, a transaction
        re-reads it and checks the lease. The returned job (its lease's update_time the new
        commit's) is the basis of the delivery's next write.
        """
        kept = dict(progress)
        if (
            basis is not None
            and basis.update_time is not None
            and lease.update_time is not None
            and basis.update_time == lease.update_time
        ):
            new = self._docs.rules.save_progress(basis, lease, kept, self._docs.clock.now())
            ref = self._docs.jobs.document(lease.job_id)
            stamp = self._docs.update_if_unchanged(ref, basis, new)
            if stamp is not None:
                return new.replaced(update_time=stamp)
        ref = self._docs.jobs.document(lease.job_id)

        def body(transaction: Transaction) -> Job:
            job = self._docs.load(transaction, ref, lease.job_id)
            new = self._docs.rules.save_progress(job, lease, kept, self._docs.clock.now())
            write_changes(transaction, ref, job, new)
            return new

        return self._docs.tx.run(body)

    def cancel_running(self, lease: Lease, *, progress: Mapping[str, Any] | None = None) -> Job:
        """Running → cancelled, when the operator asked (cancel_requested) and the worker
        honours it: before acting, or at a deadline check between units of work (`progress`
        says what was already done)."""

        def change(job: Job, now: datetime) -> Job:
            return self._docs.rules.cancel_running(job, lease, now, progress)

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
        `enqueued_at` is set now, so the stale-enqueued gauge and the reclaimer measure from
        this release. `attempt` is unchanged: Pub/Sub's deliveryAttempt counts these quick
        retries. With a cancel request the job is cancelled instead."""

        def change(job: Job, now: datetime) -> Job:
            return self._docs.rules.release(
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
            done = self._complete_by_compare_and_set(lease, result, basis)
            if done is not None:
                return done
        ref = self._docs.jobs.document(lease.job_id)

        def body(transaction: Transaction) -> Job:
            job = self._docs.load(transaction, ref, lease.job_id)
            now = self._docs.clock.now()
            new = self._docs.rules.complete(job, lease, result, now)
            key_ref = self._docs.idempotency.document(job.idempotency_key)
            # A derived key belongs to this job alone, and the job's own result (same
            # expire_at) already records the side effect: no second document for it.
            record_key = job.explicit_key and require_key(self._docs, transaction, job, lease)
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
            write_changes(transaction, ref, job, new)
            if record_key:
                transaction.set(key_ref, record.to_document())
            return new

        return self._docs.tx.run(body)

    def _complete_by_compare_and_set(self, lease: Lease, result: Result, basis: Job) -> Job | None:
        """The compare-and-set completion, or None when it does not apply or was refused."""
        if basis.explicit_key or basis.update_time is None:
            return None
        if lease.update_time is None or basis.update_time != lease.update_time:
            return None
        new = self._docs.rules.complete(basis, lease, result, self._docs.clock.now())
        stamp = self._docs.update_if_unchanged(self._docs.jobs.document(lease.job_id), basis, new)
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
        count_attempt: bool = True,
    ) -> Job:
        """Running → deferred with a new due_at, last_error and attempt + 1 (the next retry
        cycle); the next claim publishes it again. When the current attempt is the last
        (attempt == max_attempts) it raises AttemptsExhausted and changes nothing: the worker
        calls `fail` instead. With a cancel request the job is cancelled instead.
        `count_attempt` False keeps the attempt and never raises AttemptsExhausted: the job
        did not run (its action is unknown to this worker)."""
        new_due = require_aware(due_at, "due_at")

        def change(job: Job, now: datetime) -> Job:
            return self._docs.rules.retry_later(
                job, lease, new_due, error, now, progress=progress, count_attempt=count_attempt
            )

        return self._worker_transition(lease, change)

    def fail(self, lease: Lease, error: ErrorInfo) -> Job:
        """Running → failed (terminal) with last_error and expire_at; with a cancel request,
        → cancelled (the operator's decision stands), last_error kept."""

        def change(job: Job, now: datetime) -> Job:
            return self._docs.rules.fail(job, lease, error, now)

        return self._worker_transition(lease, change)

    def _worker_transition(self, lease: Lease, change: Callable[[Job, datetime], Job]) -> Job:
        """A lease holder's transition out of running: re-read, check the lease, apply; a
        shared idempotency key this lease held is freed in the same transaction."""
        ref = self._docs.jobs.document(lease.job_id)

        def body(transaction: Transaction) -> Job:
            job = self._docs.load(transaction, ref, lease.job_id)
            new = change(job, self._docs.clock.now())
            key_ref = self._docs.idempotency.document(job.idempotency_key)
            held = None
            if job.explicit_key and new.state is not State.RUNNING:
                held = self._docs.get_in(transaction, key_ref)
            diff = changed_fields(job, new)
            if diff:
                transaction.update(ref, diff)
            if held is not None and held.exists:
                holder = (held.to_dict() or {}).get("holder") or {}
                if "outcome" not in (held.to_dict() or {}) and holder.get("token") == lease.token:
                    transaction.delete(key_ref)
            return new

        return self._docs.tx.run(body)
