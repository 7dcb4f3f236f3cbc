"""The store's transitions as pure functions of a job: what each operation makes of a record.

`Transitions` holds the two deployment values the rules need (history bound, terminal
retention) and turns a decoded `Job` into the next one through `state.apply_transition`, or
raises the refusal: the checks of every operation (generation, lease token, attempts, cancel
requests) live here and nowhere else, the two fences through `fences.py`. Nothing here reads
or writes Firestore (standard library only): the store reads the record (in a transaction, or
trusts the copy it last wrote and conditions its write on that copy's update_time), calls one
of these, and writes the difference; a store for tests calls the very same functions.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from datetime import datetime, timedelta
from typing import Any

from services.jobs import schema
from services.jobs.errors import (
    AlreadyTerminal,
    AttemptsExhausted,
    InvalidTransition,
    LeaseHeld,
    ValidationError,
)
from services.jobs.fences import ended_by, require_generation, require_lease
from services.jobs.limits import (
    MAX_CODE_BYTES,
    MAX_DETAILS_BYTES,
    MAX_ERROR_MESSAGE_BYTES,
    MAX_REASON_BYTES,
    bounded_details,
    bounded_text,
    progress_of,
    stamped,
)
from services.jobs.parts import CancelRequest, Claim, ErrorInfo, Lease, Result
from services.jobs.record import Job
from services.jobs.state import DEFAULT_HISTORY_LIMIT, Role, State, apply_transition

NO_LEASE: Mapping[str, Any] = {"lease_until": None, "lease_owner": None, "lease_token": None}
# last_error.code of a quarantined record.
INVALID_RECORD = "invalid_record"
DEFAULT_TERMINAL_RETENTION = timedelta(days=30)


class Transitions:
    """Every operation's rule over one job, for one deployment's history bound and retention."""

    def __init__(
        self,
        history_limit: int = DEFAULT_HISTORY_LIMIT,
        terminal_retention: timedelta = DEFAULT_TERMINAL_RETENTION,
    ) -> None:
        if history_limit < 1:
            raise ValueError("history_limit must be at least 1")
        if terminal_retention <= timedelta(0):
            raise ValueError("terminal_retention must be positive")
        self.history_limit = history_limit
        self.retention = terminal_retention

    def expiry(self, now: datetime) -> datetime:
        return now + self.retention

    def apply(
        self, job: Job, to: State, role: Role, by: str, at: datetime, reason: str, **changes: Any
    ) -> Job:
        return apply_transition(
            job,
            to,
            role=role,
            by=by,
            at=at,
            reason=reason,
            history_limit=self.history_limit,
            **changes,
        )

    # -- operator --------------------------------------------------------------------------

    def cancel(self, job: Job, reason: str, by: str, now: datetime) -> Job:
        if job.state is State.RUNNING:
            if job.cancel_requested is not None:
                return job
            request = CancelRequest(reason=reason, by=f"{Role.OPERATOR}:{by}", at=now)
            return dataclasses.replace(job, cancel_requested=request, updated_at=now)
        return self.apply(
            job, State.CANCELLED, Role.OPERATOR, by, now, reason, expire_at=self.expiry(now)
        )

    def reschedule(self, job: Job, due_at: datetime, reason: str, by: str, now: datetime) -> Job:
        why = f"{reason} (due_at {job.due_at.isoformat()} → {due_at.isoformat()})"
        return self.apply(job, State.DEFERRED, Role.OPERATOR, by, now, why, due_at=due_at)

    # -- scan --------------------------------------------------------------------------------

    def claim(self, job: Job, run_id: str, at: datetime) -> Job:
        claim = Claim(run_id=run_id, claimed_at=at, generation=job.generation + 1)
        reason = f"due at {job.due_at.isoformat()}"
        return self.apply(job, State.CLAIMED, Role.SCAN, run_id, at, reason, claim=claim)

    def enqueued(
        self, job: Job, generation: int, message_id: str, at: datetime, now: datetime
    ) -> Job:
        """The job after its publish was acknowledged at `at`: the rules of mark_enqueued."""
        if job.claim is None:
            raise InvalidTransition(job.job_id, job.state, State.ENQUEUED, "never claimed")
        require_generation(job, generation)
        if job.state not in (State.CLAIMED, State.DEFERRED):
            # Already enqueued, or the push reached a worker first: never move it
            # backwards; record the message ID at most (a repeat call is a no-op).
            if job.message_id == message_id:
                return job
            return dataclasses.replace(job, message_id=message_id, updated_at=now)
        return self.apply(
            job,
            State.ENQUEUED,
            Role.SCAN,
            claimant(job),
            now,
            f"published as message {message_id}",
            enqueued_at=at,
            message_id=message_id,
        )

    def enqueue_failed(self, job: Job, generation: int, error: ErrorInfo, now: datetime) -> Job:
        require_generation(job, generation)
        return self.apply(
            job,
            State.DEFERRED,
            Role.SCAN,
            claimant(job),
            now,
            f"publish failed: {error.code}",
            last_error=stamped(error, now),
        )

    # -- the reclaimer -------------------------------------------------------------------------

    def reclaim_claim(self, job: Job, at: datetime, run_id: str) -> Job:
        claimed_at = job.claim.claimed_at.isoformat() if job.claim else "unknown"
        reason = f"claim by {claimant(job)} at {claimed_at} exceeded the claim timeout"
        return self.apply(job, State.DEFERRED, Role.RECLAIMER, run_id, at, reason)

    def reclaim_lease(self, job: Job, at: datetime, run_id: str) -> Job:
        ended = self.lapse_end(job, at, Role.RECLAIMER, run_id)
        if ended is not None:
            return ended
        until = job.lease_until.isoformat() if job.lease_until else "unknown"
        reason = f"lease of {job.lease_owner} expired at {until}"
        return self.apply(
            job,
            State.DEFERRED,
            Role.RECLAIMER,
            run_id,
            at,
            f"{reason}; attempt {job.attempt + 1} of {job.max_attempts} next",
            attempt=job.attempt + 1,
            last_error=ErrorInfo("lease_expired", reason, at),
            **NO_LEASE,
        )

    def reclaim_enqueued(self, job: Job, at: datetime, run_id: str) -> Job:
        since = job.enqueued_at.isoformat() if job.enqueued_at else "unknown"
        reason = (
            f"enqueued at {since} as message {job.message_id} and never started within the "
            "enqueued timeout: the message is lost; the next claim publishes it again"
        )
        return self.apply(job, State.DEFERRED, Role.RECLAIMER, run_id, at, reason)

    def lapse_end(self, job: Job, now: datetime, role: Role, by: str) -> Job | None:
        """The one rule for a running lease that lapsed (the worker crashed or stopped
        heartbeating), whoever finds it — the reclaimer or a redelivery's `start`: the cycle
        is spent. Returns the terminal job it ends in (cancelled when a cancel was requested,
        failed when that was the last attempt), or None when attempt + 1 follows."""
        until = job.lease_until.isoformat() if job.lease_until else "unknown"
        reason = f"lease of {job.lease_owner} expired at {until}"
        if job.cancel_requested is not None:
            return self.cancelled(job, role, by, now, why=f"{reason}; ")
        if attempt_left(job):
            return None
        return self.apply(
            job,
            State.FAILED,
            role,
            by,
            now,
            f"{reason}; attempt {job.attempt} of {job.max_attempts} was the last",
            last_error=ErrorInfo("lease_expired", reason, now),
            expire_at=self.expiry(now),
            **NO_LEASE,
        )

    def cancelled(
        self,
        job: Job,
        role: Role,
        by: str,
        now: datetime,
        *,
        why: str = "",
        progress: Mapping[str, Any] | None = None,
        last_error: ErrorInfo | None = None,
        ended: Lease | None = None,
    ) -> Job:
        request = job.cancel_requested
        # Only a lease holder's own transition records its token as ended (see `ended_by`).
        marks = ended_by(ended) if ended is not None else {}
        return self.apply(
            job,
            State.CANCELLED,
            role,
            by,
            now,
            f"{why}cancel honoured: {request.reason if request else ''}",
            expire_at=self.expiry(now),
            progress=progress_of(job, progress),
            last_error=last_error or job.last_error,
            **NO_LEASE,
            **marks,
        )

    # -- worker ------------------------------------------------------------------------------

    def start(
        self,
        job: Job,
        generation: int,
        now: datetime,
        duration: timedelta,
        owner: str,
        token: str,
    ) -> Job:
        """Running with a new lease `token`; or, when the previous delivery's lease lapsed in
        its last attempt (or with a cancel request), the terminal job `lapse_end` gives."""
        if job.state.terminal:
            raise AlreadyTerminal(job.job_id, job.state, State.RUNNING)
        require_generation(job, generation)
        reason = f"attempt {job.attempt} of {job.max_attempts}"
        attempt = job.attempt
        if job.state is State.RUNNING:
            if job.lease_live(now):
                raise LeaseHeld(job.job_id, job.lease_owner, job.lease_until)
            ended = self.lapse_end(job, now, Role.WORKER, owner)
            if ended is not None:
                return ended
            attempt = job.attempt + 1
            reason = (
                f"attempt {attempt} of {job.max_attempts}; took over the expired lease "
                f"of {job.lease_owner}"
            )
        return self.apply(
            job,
            State.RUNNING,
            Role.WORKER,
            owner,
            now,
            reason,
            attempt=attempt,
            lease_until=now + duration,
            lease_owner=owner,
            lease_token=token,
        )

    def extend(self, job: Job, lease: Lease, now: datetime, duration: timedelta) -> Job:
        require_lease(job, lease)
        return dataclasses.replace(job, lease_until=now + duration, updated_at=now)

    def save_progress(
        self, job: Job, lease: Lease, progress: Mapping[str, Any], now: datetime
    ) -> Job:
        """The job still running under `lease`, its `progress` replaced by `progress`: what an
        action is about to act on, written ahead of the side effect (write-ahead). Not a
        transition (no history entry, the state and the lease stay); refused with LeaseLost
        like every holder's write, and with ValidationError when `progress` is not a valid map
        that fits whole (write-ahead must never be trimmed into a note). The lease keeps it;
        `release`, `retry_later`, a reclaim and a take-over keep it too; `complete` clears it."""
        require_lease(job, lease)
        kept = bounded_details(progress)
        if kept != dict(progress):
            raise ValidationError(
                f"progress for job {job.job_id!r} is not a valid map of at most "
                f"{MAX_DETAILS_BYTES} bytes: {sorted(kept)}"
            )
        return dataclasses.replace(job, progress=kept, updated_at=now)

    def cancel_running(
        self, job: Job, lease: Lease, now: datetime, progress: Mapping[str, Any] | None = None
    ) -> Job:
        require_lease(job, lease)
        if job.cancel_requested is None:
            raise InvalidTransition(
                job.job_id, job.state, State.CANCELLED, "no cancel was requested"
            )
        return self.cancelled(job, Role.WORKER, lease.owner, now, progress=progress, ended=lease)

    def release(
        self,
        job: Job,
        lease: Lease,
        error: ErrorInfo,
        now: datetime,
        *,
        progress: Mapping[str, Any] | None = None,
        message_id: str | None = None,
    ) -> Job:
        require_lease(job, lease)
        if job.cancel_requested is not None:
            return self.cancelled(
                job, Role.WORKER, lease.owner, now, progress=progress, ended=lease
            )
        return self.apply(
            job,
            State.ENQUEUED,
            Role.WORKER,
            lease.owner,
            now,
            f"released after {error.code}",
            last_error=stamped(error, now),
            enqueued_at=now,
            message_id=message_id or job.message_id,
            progress=progress_of(job, progress),
            **NO_LEASE,
            **ended_by(lease),
        )

    def complete(self, job: Job, lease: Lease, result: Result, now: datetime) -> Job:
        require_lease(job, lease)
        recorded = Result(
            outcome=bounded_text(result.outcome, MAX_CODE_BYTES),
            details=bounded_details(result.details, depth=RESULT_DETAILS_DEPTH),
            completed_at=now,
        )
        return self.apply(
            job,
            State.COMPLETED,
            Role.WORKER,
            lease.owner,
            now,
            f"outcome {recorded.outcome}",
            result=recorded,
            expire_at=self.expiry(now),
            progress=None,
            **NO_LEASE,
            **ended_by(lease),
        )

    def retry_later(
        self,
        job: Job,
        lease: Lease,
        due_at: datetime,
        error: ErrorInfo,
        now: datetime,
        *,
        progress: Mapping[str, Any] | None = None,
        count_attempt: bool = True,
    ) -> Job:
        """Running → deferred at `due_at`, in the next attempt; `count_attempt` False keeps
        the attempt (the job never ran: its action is unknown to this worker), so waiting for
        a worker that knows it never exhausts the job."""
        require_lease(job, lease)
        if job.cancel_requested is not None:
            return self.cancelled(
                job, Role.WORKER, lease.owner, now, progress=progress, ended=lease
            )
        if count_attempt and not attempt_left(job):
            raise AttemptsExhausted(job.job_id, job.attempt, job.max_attempts)
        attempt = job.attempt + 1 if count_attempt else job.attempt
        next_attempt = "" if count_attempt else " again"
        return self.apply(
            job,
            State.DEFERRED,
            Role.WORKER,
            lease.owner,
            now,
            f"retry at {due_at.isoformat()} after {error.code}; "
            f"attempt {attempt} of {job.max_attempts} next{next_attempt}",
            attempt=attempt,
            due_at=due_at,
            last_error=stamped(error, now),
            progress=progress_of(job, progress),
            **NO_LEASE,
            **ended_by(lease),
        )

    def fail(self, job: Job, lease: Lease, error: ErrorInfo, now: datetime) -> Job:
        require_lease(job, lease)
        recorded = stamped(error, now)
        if job.cancel_requested is not None:
            return self.cancelled(
                job, Role.WORKER, lease.owner, now, last_error=recorded, ended=lease
            )
        return self.apply(
            job,
            State.FAILED,
            Role.WORKER,
            lease.owner,
            now,
            f"failed: {recorded.code}",
            last_error=recorded,
            expire_at=self.expiry(now),
            **NO_LEASE,
            **ended_by(lease),
        )

    # -- quarantine --------------------------------------------------------------------------

    def quarantine(
        self, raw: Mapping[str, Any], problem: str, now: datetime, by: str, *, bare: bool = False
    ) -> Quarantine:
        """What moves an undecodable document (or one too large to move through its life) to
        failed/invalid_record. Only fields with a fixed shape are written; the rest of the
        document stays as found, for the operator to inspect. `bare`: the state alone (and
        updated_at), for a record so near Firestore's size limit that the full quarantine does
        not fit: `failed` is shorter than every state the scan or reclaimer meets, so that
        write always fits; the problem is then in the log's `job_quarantined` event only."""
        from_state = raw.get("state") if isinstance(raw.get("state"), str) else None
        if bare:
            fields = {"state": State.FAILED.value, "updated_at": now}
            return Quarantine(fields=fields, history_entry=None, append_to_history=False)
        message = bounded_text(problem, MAX_ERROR_MESSAGE_BYTES)
        entry = {
            "at": now,
            "from": from_state,
            "to": State.FAILED.value,
            "by": by,
            "reason": bounded_text(f"quarantined: {message}", MAX_REASON_BYTES),
        }
        return Quarantine(
            fields={
                "state": State.FAILED.value,
                "last_error": {"code": INVALID_RECORD, "message": message, "at": now},
                "quarantine": {"at": now, "by": by, "from_state": from_state, "problem": message},
                **NO_LEASE,
                "updated_at": now,
                schema.EXPIRE_AT: self.expiry(now),
            },
            history_entry=entry,
            # Appended to a history that is an array (kept as found); otherwise replaced.
            append_to_history=isinstance(raw.get("history"), list),
        )


@dataclasses.dataclass(frozen=True)
class Quarantine:
    """The update that quarantines a record: `fields` to set, and its history entry (None: the
    history stays as found), appended to the stored history when that is an array (the store
    writes the append), else the whole new history."""

    fields: dict[str, Any]
    history_entry: dict[str, Any] | None
    append_to_history: bool


def attempt_left(job: Job) -> bool:
    """Whether another retry cycle may follow the current one."""
    return job.attempt < job.max_attempts


# result.details sits one map level down (result → details): Firestore's depth limit counts it.
RESULT_DETAILS_DEPTH = 2


def claimant(job: Job) -> str:
    return job.claim.run_id if job.claim else "unknown"
