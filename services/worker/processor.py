"""The `Processor`: one delivery in, one `Outcome` out. No HTTP here.

The order of checks is the whole safety argument:

1. `start` takes the lease with a compare-and-set on the record (a read, then a write
   conditioned on its update_time; a transaction when that cannot decide) and refuses: unknown →
   `unknown_job` (acknowledged and recorded as rejected); terminal → `duplicate` (or
   `cancelled`); another generation or back to `deferred` → `stale`; a live lease held by
   anyone → `lease_held`, which asks Pub/Sub to come back later; a record written by a newer
   version → `newer_record` (left untouched, logged `job_from_newer_version`, redelivered:
   the newer revision, or a roll forward, processes it).
2. A cancel request is honoured before anything happens.
3. An idempotency document for the job's key means the side effect already happened under
   another delivery or job: complete with its result, never act twice.
4. Run the action; complete (one write conditioned on this delivery's last write; with a
   supplied key, or when the record changed since, result + idempotency document in one
   transaction).

Every outcome (the transition out of running) is written while the lease is still held:
retried on a transient error inside the lease, each failed attempt settled by reading back
whether the record shows this lease's token as `ended_lease_token` (see `_durably`).

Failures: `PermanentError` fails the job at once. `TransientError` releases the lease and asks
for a redelivery (`retry`); the job's `attempt` is unchanged, because quick redeliveries within
one retry cycle are counted by Pub/Sub's deliveryAttempt. When that delivery attempt reaches
the action's threshold (below the dead-letter limit), or the action says its dependency is down
for long (`DependencyDown`), the job goes back to `deferred` with `due_at = now + long delay` and
`attempt + 1` (`deferred`), and the message is acknowledged. When the current attempt was the
last (`retry_later` raises AttemptsExhausted) the job fails.

Every outcome is logged once, as `event=worker_outcome`, with the fields the log-based
metrics extract (`services.telemetry.metrics`).
"""

from __future__ import annotations

import logging
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime, timedelta
from enum import StrEnum
from typing import TYPE_CHECKING, Any

from services.jobs.actions import Action, ActionRequest, ActionResult
from services.jobs.clock import Clock
from services.jobs.errors import (
    AlreadyTerminal,
    AttemptsExhausted,
    DependencyDown,
    Interrupted,
    InvalidRecord,
    InvalidTransition,
    JobNotFound,
    JobsError,
    LeaseHeld,
    LeaseLost,
    LostRace,
    NewerRecord,
    PermanentError,
    RetryAfter,
    StaleGeneration,
    StoreRejected,
    StoreUnavailable,
    TransientError,
)
from services.jobs.lanes import PauseBook, key_parts, lane_key, lane_keys_of, pause_until
from services.jobs.parts import ErrorInfo, Lease, Result
from services.jobs.record import Job
from services.jobs.state import State
from services.telemetry import metrics
from services.worker.actions import ActionRegistry, policy_of, runner_of
from services.worker.deadline import (
    HEARTBEATS_PER_LEASE,
    STOP_CANCEL,
    STOP_LEASE_LOST,
    Heartbeat,
    HeartbeatStarter,
)
from services.worker.envelope import Delivery

if TYPE_CHECKING:
    from services.store.job_store import FirestoreJobStore

logger = logging.getLogger(__name__)

UNKNOWN_ACTION = "unknown_action"
# How long a job whose action this worker lacks waits before it is claimed again: the first
# time the shortest, then twice the time it last waited, never longer than the longest. A
# rollout that adds the action picks the job up within the longest wait.
UNKNOWN_ACTION_FIRST_DELAY = timedelta(minutes=5)
UNKNOWN_ACTION_MAX_DELAY = timedelta(hours=1)


def unknown_action_delay(job: Job, now: datetime) -> timedelta:
    """The bounded backoff for a job whose action is unknown, from the job alone: twice the
    time since the last `unknown_action` deferral (its `last_error.at`), within bounds."""
    last = job.last_error
    if last is None or last.code != UNKNOWN_ACTION or last.at is None:
        return UNKNOWN_ACTION_FIRST_DELAY
    waited = now - last.at
    return max(UNKNOWN_ACTION_FIRST_DELAY, min(UNKNOWN_ACTION_MAX_DELAY, 2 * waited))


class OutcomeKind(StrEnum):
    # The side effect is done and recorded (this delivery, or an earlier one's result reused).
    COMPLETED = "completed"
    # The job was already terminal (completed, failed or cancelled) when this delivery came.
    DUPLICATE = "duplicate"
    # The operator's cancel request was honoured; nothing was done.
    CANCELLED = "cancelled"
    # The message's generation is not the record's, or the job is no longer queued.
    STALE = "stale"
    # Transient failure past the threshold: the job waits until now + the long delay.
    DEFERRED = "deferred"
    # This worker does not know the job's action: back to `deferred` after a bounded backoff,
    # same attempt, never failed; a worker that knows the action runs it (acknowledged).
    UNKNOWN_ACTION = "unknown_action"
    # Permanent error, or a long retry was due in the last attempt: the job is terminal `failed`.
    FAILED = "failed"
    # No job has this ID: acknowledged and recorded as rejected.
    UNKNOWN_JOB = "unknown_job"
    # Another worker holds a live lease: come back later (429).
    LEASE_HELD = "lease_held"
    # Transient failure, lease released: redeliver soon (503).
    RETRY = "retry"
    # Firestore is unreachable or contended: redeliver (503).
    UNAVAILABLE = "store_unavailable"
    # Firestore refused for a reason retrying cannot fix (permissions, index, database, an
    # invalid write): a configuration error; redelivered (500) so nothing is lost meanwhile.
    STORE_REJECTED = "store_rejected"
    # The job's document cannot be decoded: quarantined, acknowledged, recorded as rejected.
    INVALID_RECORD = "invalid_record"
    # The job's document was written by a newer version of this code (a schema_version above
    # this one's, or a state it does not know): left exactly as found, never quarantined nor
    # rejected, and redelivered (503) so the newer revision, or a roll forward, processes it.
    NEWER_RECORD = "newer_record"


_REDELIVER = frozenset(
    {
        OutcomeKind.LEASE_HELD,
        OutcomeKind.RETRY,
        OutcomeKind.UNAVAILABLE,
        OutcomeKind.STORE_REJECTED,
        OutcomeKind.NEWER_RECORD,
    }
)


@dataclass(frozen=True)
class Outcome:
    """What became of one delivery."""

    kind: OutcomeKind
    job_id: str
    detail: str = ""
    result: Result | None = None

    @property
    def acknowledged(self) -> bool:
        """True when Pub/Sub should consider the message done."""
        return self.kind not in _REDELIVER


# How long before the lease ends an action stops between units of work (the deadline margin).
DEFAULT_DEADLINE_MARGIN = timedelta(seconds=5)
# The longest one delivery acts before it stops and hands what is left to the next delivery:
# below Cloud Run's request timeout (infra: 240 s), which answers the caller but leaves the
# thread running (https://cloud.google.com/run/docs/configuring/request-timeout).
DEFAULT_MAX_DELIVERY = timedelta(seconds=180)
# An outcome write's retries: 0.2, 0.4, ... up to 5 s apart, 8 attempts (about 20 s) at most,
# and never past the lease's end minus the margin.
OUTCOME_RETRY_ATTEMPTS = 8
OUTCOME_RETRY_INITIAL_S = 0.2
OUTCOME_RETRY_MAX_S = 5.0


class Processor:
    """Turns a `Delivery` into an `Outcome`, running the job's side effect under a live lease.

    At least once, not at most once: a delivery killed, or a lease that lapsed, after the
    action took effect and before `complete` committed leaves the job to a later delivery,
    which runs it again. One effect per idempotency key holds because only the lease holder
    acts, a shared key's recorded result is reused, and actions are idempotent for their key.
    """

    def __init__(
        self,
        store: FirestoreJobStore,
        actions: ActionRegistry,
        clock: Clock,
        *,
        lease: timedelta,
        worker_id: str,
        deadline_margin: timedelta = DEFAULT_DEADLINE_MARGIN,
        max_delivery: timedelta = DEFAULT_MAX_DELIVERY,
        heartbeat_poll_s: float | None = None,
        sleep: Callable[[float], None] = time.sleep,
        outcome_retry_attempts: int = OUTCOME_RETRY_ATTEMPTS,
    ) -> None:
        if lease <= timedelta(0):
            raise ValueError("lease must be positive")
        if not timedelta(0) <= deadline_margin < lease / HEARTBEATS_PER_LEASE:
            raise ValueError("deadline_margin must be below a third of the lease")
        if max_delivery <= timedelta(0):
            raise ValueError("max_delivery must be positive")
        self._store = store
        self._actions = actions
        self._clock = clock
        self._lease = lease
        self._worker_id = worker_id
        self._margin = deadline_margin
        self._max_delivery = max_delivery
        # Real seconds between the background thread's checks: half a beat interval.
        self._poll_s = heartbeat_poll_s or lease.total_seconds() / (2 * HEARTBEATS_PER_LEASE)
        # Starts an action's heartbeat thread once it has run that long (no thread until then).
        self._heartbeats = HeartbeatStarter(self._poll_s)
        # Retrying an outcome write: real seconds between attempts, and at most this many
        # attempts (the lease's end bounds them too; a FakeClock's does not move on its own).
        self._sleep = sleep
        self._retry_attempts = outcome_retry_attempts
        self._retry_initial_s = OUTCOME_RETRY_INITIAL_S
        self._retry_max_s = OUTCOME_RETRY_MAX_S
        # The action pauses this process recorded: one write per pause window, not per job.
        self._pauses = PauseBook()

    def process(self, delivery: Delivery) -> Outcome:
        """Process one delivery; never raises for a store or action failure."""
        job: Job | None = None
        try:
            outcome, job = self._process(delivery)
        except NewerRecord as exc:
            # Met anywhere (start, or a read-back while the lease was held): nothing of this
            # version may write to it, so nothing is written; a redelivery waits for a
            # revision that knows it (the message dead-letters after max delivery attempts,
            # and `jobsctl dead-letters replay` sends it again after the roll forward).
            outcome = Outcome(OutcomeKind.NEWER_RECORD, delivery.job_id, exc.problem)
            _log_newer_record(delivery, exc)
        except StoreUnavailable as exc:
            outcome = Outcome(OutcomeKind.UNAVAILABLE, delivery.job_id, str(exc))
        except StoreRejected as exc:
            outcome = Outcome(OutcomeKind.STORE_REJECTED, delivery.job_id, str(exc))
            _log_store_rejected(delivery, exc)
        except LostRace as exc:
            # Contention the store could not resolve: ask Pub/Sub to try again shortly.
            outcome = Outcome(OutcomeKind.UNAVAILABLE, delivery.job_id, str(exc))
        self._log(delivery, outcome, job)
        return outcome

    def _owner(self, delivery: Delivery) -> str:
        """Who holds the lease, for people: this instance and this delivery. (The fence is
        the lease token `start` makes, never this name.)"""
        return f"{self._worker_id}/{delivery.message_id or uuid.uuid4().hex[:12]}"

    def _process(self, delivery: Delivery) -> tuple[Outcome, Job | None]:
        # No read first: `start` reads the record for its compare-and-set and refuses with
        # the reason, so the common case costs one read less.
        job_id = delivery.job_id
        try:
            job = self._store.start(job_id, delivery.generation, self._lease, self._owner(delivery))
        except JobNotFound:
            return Outcome(OutcomeKind.UNKNOWN_JOB, job_id, "no job has this ID"), None
        except NewerRecord:
            raise  # not malformed: `process` answers it (left untouched, redelivered)
        except InvalidRecord as exc:
            return Outcome(OutcomeKind.INVALID_RECORD, job_id, exc.problem), None
        except AlreadyTerminal as exc:
            kind = (
                OutcomeKind.CANCELLED if exc.current is State.CANCELLED else OutcomeKind.DUPLICATE
            )
            return Outcome(kind, job_id, f"already {exc.current.value}"), None
        except StaleGeneration as exc:
            return Outcome(OutcomeKind.STALE, job_id, str(exc)), None
        except LeaseHeld as exc:
            return Outcome(OutcomeKind.LEASE_HELD, job_id, str(exc)), None
        except InvalidTransition as exc:
            # Deferred again (retried later or reclaimed): a newer claim will publish it.
            return Outcome(OutcomeKind.STALE, job_id, str(exc)), None
        if job.state is not State.RUNNING:
            # start found the previous delivery's lease lapsed in the last attempt (failed)
            # or with a cancel request (cancelled): the same rule as the reclaimer's.
            return self._ended(job), job
        return self._run_started(delivery, job)

    def _ended(self, job: Job) -> Outcome:
        if job.state is State.CANCELLED:
            reason = job.cancel_requested.reason if job.cancel_requested else ""
            return Outcome(OutcomeKind.CANCELLED, job.job_id, reason)
        error = job.last_error or ErrorInfo("lease_expired", "the lease expired")
        _log_failed(job, error)
        return Outcome(OutcomeKind.FAILED, job.job_id, f"{error.code}: {error.message}")

    def _run_started(self, delivery: Delivery, job: Job) -> tuple[Outcome, Job]:
        """The lease is ours: honour a cancel, reuse a recorded result, or act."""
        lease = _lease_of(job)
        try:
            if job.cancel_requested is not None:
                job = self._durably(lease, lambda: self._store.cancel_running(lease))
                reason = job.cancel_requested.reason if job.cancel_requested else ""
                return Outcome(OutcomeKind.CANCELLED, job.job_id, reason), job
            if job.explicit_key:
                # A shared key: another job may have done the side effect already. A derived
                # key belongs to this job alone, so its state (start refused a completed
                # job) already says everything the document would: no read.
                record = self._store.get_idempotency(job.idempotency_key)
                if record is not None:
                    result = Result(outcome=record.outcome, details=dict(record.details))
                    return self._complete(job, lease, result, "result reused from " + record.key)
            action = self._actions.get(job.action)
            if action is None:
                return self._await_action(job, lease)
            return self._act(delivery, job, action)
        except (LeaseLost, StaleGeneration) as exc:
            # Our lease lapsed while we worked: the reclaimer moved the job on (deferred or
            # failed), another delivery took it over, or a newer claim owns it. Whoever holds
            # it now finishes it; this delivery is done (2xx), nothing is written.
            return Outcome(OutcomeKind.STALE, job.job_id, str(exc)), job

    def _act(self, delivery: Delivery, job: Job, action: Action) -> tuple[Outcome, Job]:
        heartbeat = Heartbeat(
            self._store,
            self._clock,
            job,
            lease=self._lease,
            margin=self._margin,
            delivery_until=self._clock.now() + self._max_delivery,
        )
        request = ActionRequest(
            job_id=job.job_id,
            action=job.action,
            subject=job.subject,
            params=dict(job.params),
            attempt=job.attempt,
            idempotency_key=job.idempotency_key,
            progress=dict(job.progress) if job.progress is not None else None,
            deadline=heartbeat.deadline,
            progress_recorder=heartbeat.save_progress,
        )
        heartbeat.start_later(self._heartbeats)
        # The heartbeat keeps the lease until the outcome is durable (or the delivery gives
        # up): a retried terminal write must not outlive the lease it presents.
        try:
            return self._outcome_of(delivery, job, action, request, heartbeat)
        finally:
            heartbeat.stop()

    def _outcome_of(
        self,
        delivery: Delivery,
        job: Job,
        action: Action,
        request: ActionRequest,
        heartbeat: Heartbeat,
    ) -> tuple[Outcome, Job]:
        # A dependency this process has seen answer Retry-After is not called again before
        # its pause ends: the job waits for it without a call, as the scan's next runs would
        # have made it (a run already under way read the pauses at its start).
        held_until = self._pauses.live_until(
            lane_keys_of(job.action, job.params), self._clock.now()
        )
        if held_until is not None:
            return self._held(job, heartbeat.lease, held_until, heartbeat)
        try:
            result = runner_of(action)(request)
        except Interrupted as exc:
            return self._interrupted(delivery, job, heartbeat, exc)
        except LeaseLost as exc:
            # record_progress found the lease gone: the action did not act on what it was
            # about to record, and whoever holds the job now decides. Nothing is written.
            return Outcome(OutcomeKind.STALE, job.job_id, str(exc)), job
        except PermanentError as exc:
            return self._fail(job, heartbeat.lease, ErrorInfo("permanent", str(exc)), heartbeat)
        except RetryAfter as exc:
            return self._retry_after(job, heartbeat.lease, exc, heartbeat)
        except TransientError as exc:
            return self._transient(delivery, job, heartbeat.lease, action, exc, heartbeat)
        except Exception as exc:
            # An action bug: keep the traceback, and treat it as transient so a fix deployed
            # within the retry window still gets the job done.
            logger.exception("action %s raised unexpectedly", job.action)
            return self._transient(
                delivery, job, heartbeat.lease, action, TransientError(repr(exc)), heartbeat
            )
        return self._complete(heartbeat.job, heartbeat.lease, _as_result(result), "", heartbeat)

    def _interrupted(
        self, delivery: Delivery, job: Job, heartbeat: Heartbeat, exc: Interrupted
    ) -> tuple[Outcome, Job]:
        """The action stopped at its deadline: why decides what becomes of the job."""
        why = heartbeat.deadline.why
        lease = heartbeat.lease
        progress = exc.progress
        if why == STOP_LEASE_LOST:
            return Outcome(OutcomeKind.STALE, job.job_id, "the lease was lost mid-action"), job
        if why == STOP_CANCEL:
            job = self._durably(
                lease, lambda: self._store.cancel_running(lease, progress=progress), heartbeat
            )
            return Outcome(OutcomeKind.CANCELLED, job.job_id, str(exc)), job
        # The delivery's time is up: hand what is left to the next delivery (same attempt).
        error = ErrorInfo("interrupted", str(exc))
        job = self._durably(
            lease,
            lambda: self._store.release(
                lease, error, progress=progress, message_id=delivery.message_id
            ),
            heartbeat,
        )
        if job.state is State.CANCELLED:
            return Outcome(OutcomeKind.CANCELLED, job.job_id, str(exc)), job
        return Outcome(OutcomeKind.RETRY, job.job_id, str(exc)), job

    def _transient(
        self,
        delivery: Delivery,
        job: Job,
        lease: Lease,
        action: Action,
        exc: TransientError,
        heartbeat: Heartbeat | None = None,
    ) -> tuple[Outcome, Job]:
        code = "dependency_down" if isinstance(exc, DependencyDown) else "transient"
        error = ErrorInfo(code, str(exc))
        if not (isinstance(exc, DependencyDown) or _quick_retries_spent(delivery, action)):
            job = self._durably(
                lease,
                lambda: self._store.release(lease, error, message_id=delivery.message_id),
                heartbeat,
            )
            return self._moved(job, OutcomeKind.RETRY, str(exc)), job
        # This retry cycle is over: wait the long delay, in the next attempt, if one is left.
        # The store refuses past the job's max_attempts; an action may cap it lower.
        cap = policy_of(action).max_attempts
        if cap is not None and job.attempt >= cap:
            return self._fail(job, lease, error, heartbeat)
        due_at = self._clock.now() + policy_of(action).long_retry_delay
        try:
            job = self._durably(
                lease, lambda: self._store.retry_later(lease, due_at, error), heartbeat
            )
        except AttemptsExhausted:
            return self._fail(job, lease, error, heartbeat)
        return self._moved(job, OutcomeKind.DEFERRED, f"due again {due_at}"), job

    def _retry_after(
        self, job: Job, lease: Lease, exc: RetryAfter, heartbeat: Heartbeat
    ) -> tuple[Outcome, Job]:
        """The dependency answered 429/503 with Retry-After: the job waits that long (within
        MIN_PAUSE..MAX_PAUSE) in the same attempt (the dependency refused it, it did not fail),
        and the scan claims none of the action's jobs until then (`_pause`); when the action
        names the target that answered (`exc.target`: http.request's), none of that target's
        jobs only (key `action/target`), so the action's other targets go on."""
        until = pause_until(self._clock.now(), exc.delay_s)
        error = ErrorInfo("retry_after", str(exc))
        job = self._durably(
            lease,
            lambda: self._store.retry_later(lease, until, error, count_attempt=False),
            heartbeat,
        )
        self._pause(lane_key(job.action, exc.target), until)
        return self._moved(job, OutcomeKind.DEFERRED, f"due again {until} (Retry-After)"), job

    def _held(
        self, job: Job, lease: Lease, until: datetime, heartbeat: Heartbeat
    ) -> tuple[Outcome, Job]:
        """The job's dependency is paused (a Retry-After this process recorded): it waits
        until then in the same attempt, and the dependency is not called."""
        error = ErrorInfo("paused", f"its dependency asked to wait until {until.isoformat()}")
        job = self._durably(
            lease,
            lambda: self._store.retry_later(lease, until, error, count_attempt=False),
            heartbeat,
        )
        return self._moved(job, OutcomeKind.DEFERRED, f"due again {until} (paused)"), job

    def _pause(self, key: str, until: datetime) -> None:
        """Record that the scan should claim none of the lane `key`'s jobs (an action's, or
        one target's: `action/target`) until `until`: one small transaction on the control
        document, only when this process has not recorded a pause covering it. Best effort: a
        failure is logged (the job itself is deferred already)."""
        action, target = key_parts(key)
        if not self._pauses.needs_write(key, until):
            return
        try:
            wrote = self._store.record_action_pause(key, until)
        except JobsError as exc:
            self._pauses.forget(key)
            logger.warning(
                "could not record the pause of %s: %s",
                key,
                exc,
                extra={
                    "fields": {
                        "action": action,
                        "target": target,
                        "lane": key,
                        "reason": "action_pause_unrecorded",
                    }
                },
            )
            return
        if wrote:
            logger.warning(
                "claims of %s paused until %s: its dependency asked to wait",
                key,
                until.isoformat(),
                extra={
                    "fields": {
                        metrics.LOG_EVENT: metrics.EVENT_ACTION_PAUSED,
                        "action": action,
                        "target": target,
                        "lane": key,
                        "paused_until": until.isoformat(),
                    }
                },
            )

    def _await_action(self, job: Job, lease: Lease) -> tuple[Outcome, Job]:
        """This worker does not know the job's action (a producer deployed before the worker,
        or a plug-in missing from this image): never fail it. Back to `deferred`, due again
        after a bounded backoff, in the same attempt (it never ran), so it runs once a worker
        that knows the action is deployed; logged and counted as `unknown_action`."""
        now = self._clock.now()
        delay = unknown_action_delay(job, now)
        error = ErrorInfo(
            UNKNOWN_ACTION,
            f"this worker has no action {job.action!r} (knows: {', '.join(self._actions.names())})"
            f"; waiting for a worker that does, due again in {delay}",
        )
        due_at = now + delay
        job = self._durably(
            lease, lambda: self._store.retry_later(lease, due_at, error, count_attempt=False)
        )
        _log_unknown_action(job)
        return self._moved(job, OutcomeKind.UNKNOWN_ACTION, f"due again {due_at}"), job

    def _moved(self, job: Job, kind: OutcomeKind, detail: str) -> Outcome:
        """`kind`, unless a cancel request turned the move into a cancel."""
        if job.state is State.CANCELLED:
            reason = job.cancel_requested.reason if job.cancel_requested else ""
            return Outcome(OutcomeKind.CANCELLED, job.job_id, reason)
        return Outcome(kind, job.job_id, detail)

    def _complete(
        self,
        job: Job,
        lease: Lease,
        result: Result,
        detail: str,
        heartbeat: Heartbeat | None = None,
    ) -> tuple[Outcome, Job]:
        # `job` is the record as this delivery last wrote it: the store completes it with one
        # conditional write when nothing changed since, without reading it again.
        basis = job
        try:
            job = self._durably(
                lease, lambda: self._store.complete(lease, result, basis=basis), heartbeat
            )
        except StoreRejected as exc:
            # Firestore refuses the completion itself (e.g. a record grown past its limit):
            # retrying cannot fix it, and leaving the lease to lapse would hide the cause.
            _log_store_rejected_job(job.job_id, exc)
            return self._fail(job, lease, ErrorInfo("store_rejected", str(exc)), heartbeat)
        if job.state is not State.COMPLETED:
            # The read-back found our own other transition (a cancel turned it): say so.
            return self._moved(job, OutcomeKind.COMPLETED, detail), job
        return Outcome(OutcomeKind.COMPLETED, job.job_id, detail, job.result or result), job

    def _fail(
        self, job: Job, lease: Lease, error: ErrorInfo, heartbeat: Heartbeat | None = None
    ) -> tuple[Outcome, Job]:
        job = self._durably(lease, lambda: self._store.fail(lease, error), heartbeat)
        if job.state is State.CANCELLED:
            return self._moved(job, OutcomeKind.CANCELLED, ""), job
        _log_failed(job, error)
        return Outcome(OutcomeKind.FAILED, job.job_id, f"{error.code}: {error.message}"), job

    def _durably(
        self, lease: Lease, write: Callable[[], Job], heartbeat: Heartbeat | None = None
    ) -> Job:
        """Write this delivery's outcome (a transition out of running) while its lease is
        still held: transient errors (StoreUnavailable, a LostRace other than a stale
        generation) are retried with a bounded backoff until the lease's end minus the
        margin, and every failed attempt is settled by reading the record back. The record
        carries the token of the lease whose own transition last ended it
        (`ended_lease_token`), so an attempt that applied although its answer was lost is a
        success, not LeaseLost. Raises the last error when the lease is no longer this
        delivery's or its time is up: the next delivery (or the reclaimer) decides then.
        """
        delay = self._retry_initial_s
        tries = 0
        while True:
            try:
                if heartbeat is not None:
                    return heartbeat.write_outcome(write)
                return write()
            except StaleGeneration:
                raise  # a newer claim owns the job: no write of ours can have applied
            except (StoreUnavailable, LostRace) as exc:
                tries += 1
                current = heartbeat.lease if heartbeat is not None else lease
                try:
                    found = self._store.get(lease.job_id)
                except StoreUnavailable:
                    # Unknown yet: retry the write, which settles it again.
                    if isinstance(exc, LeaseLost):
                        raise exc from None
                else:
                    if found is not None and found.ended_lease_token == lease.token:
                        return found  # an earlier attempt applied: its answer was lost
                    mine = (
                        found is not None
                        and found.state is State.RUNNING
                        and found.lease_token == lease.token
                    )
                    if not mine:
                        if found is not None and not isinstance(exc, LostRace):
                            # The record says the lease moved on: this delivery is stale,
                            # whatever the failed attempt's own error was (a 503 here would
                            # only buy a pointless redelivery).
                            raise LeaseLost(
                                lease.job_id,
                                lease.owner,
                                found.lease_owner,
                                "the lease moved on while the outcome write failed",
                            ) from exc
                        raise exc from None
                # Give up while the lease still holds, so the next delivery finds it lapsed.
                if (
                    tries >= self._retry_attempts
                    or self._clock.now() + timedelta(seconds=delay) >= current.until - self._margin
                ):
                    raise
                logger.warning(
                    "job %s: outcome write failed (%s), retrying in %.1f s",
                    lease.job_id,
                    type(exc).__name__,
                    delay,
                )
                self._sleep(delay)
                if heartbeat is not None:
                    heartbeat.beat_if_due()
                delay = min(delay * 2, self._retry_max_s)

    def _log(self, delivery: Delivery, outcome: Outcome, job: Job | None) -> None:
        fields: dict[str, Any] = {
            metrics.LOG_EVENT: metrics.EVENT_WORKER_OUTCOME,
            metrics.LOG_OUTCOME: outcome.kind.value,
            "job_id": delivery.job_id,
            "generation": delivery.generation,
            "delivery_attempt": delivery.delivery_attempt,
        }
        if job is not None:
            fields.update(action=job.action, **{metrics.LOG_ATTEMPT: job.attempt})
        if outcome.kind is OutcomeKind.COMPLETED and job is not None:
            # Latencies only for completions: the distributions measure time to done.
            done = job.result.completed_at if job.result and job.result.completed_at else None
            done = done or self._clock.now()
            fields[metrics.LOG_DUE_TO_DONE_S] = (done - job.due_at).total_seconds()
            fields["scheduled_to_done_s"] = (done - job.scheduled_due_at).total_seconds()
            if job.enqueued_at is not None:
                fields[metrics.LOG_ENQUEUE_TO_DONE_S] = (done - job.enqueued_at).total_seconds()
        level = logging.INFO if outcome.acknowledged else logging.WARNING
        logger.log(
            level,
            "job %s: %s %s",
            delivery.job_id,
            outcome.kind.value,
            outcome.detail,
            extra={"fields": fields},
        )


def _lease_of(job: Job) -> Lease:
    lease = job.lease
    if lease is None:  # start always sets one; a store that did not is a bug
        raise LeaseLost(job.job_id, "", job.lease_owner, "start returned no lease")
    return lease


def _log_failed(job: Job, error: ErrorInfo) -> None:
    logger.error(
        "job %s failed: %s",
        job.job_id,
        error.message,
        extra={
            "fields": {
                metrics.LOG_EVENT: metrics.EVENT_JOB_FAILED,
                "job_id": job.job_id,
                "action": job.action,
                metrics.LOG_ATTEMPT: job.attempt,
                "error_code": error.code,
            }
        },
    )


def _log_unknown_action(job: Job) -> None:
    """The event the log-based metric deferred_jobs_unknown_action counts and the "Jobs whose
    action no worker knows" alert watches (services.telemetry.metrics.UNKNOWN_ACTIONS)."""
    logger.warning(
        "job %s waits for a worker that knows action %s (deferred to %s)",
        job.job_id,
        job.action,
        job.due_at.isoformat(),
        extra={
            "fields": {
                metrics.LOG_EVENT: metrics.EVENT_UNKNOWN_ACTION,
                "job_id": job.job_id,
                "action": job.action,
                metrics.LOG_ATTEMPT: job.attempt,
            }
        },
    )


def _log_newer_record(delivery: Delivery, exc: NewerRecord) -> None:
    """The event the log-based metric deferred_jobs_newer_records counts and the "Records
    from a newer version" alert watches (services.telemetry.metrics.NEWER_RECORDS)."""
    logger.error(
        "job %s left untouched: written by a newer version (%s)",
        delivery.job_id,
        exc.problem,
        extra={
            "fields": {
                metrics.LOG_EVENT: metrics.EVENT_JOB_FROM_NEWER_VERSION,
                "job_id": delivery.job_id,
                "problem": exc.problem,
                "by": "worker",
            }
        },
    )


def _log_store_rejected(delivery: Delivery, exc: StoreRejected) -> None:
    """Firestore refused for a reason retrying cannot fix: a configuration error (or a
    record that cannot be written), never reported as an outage."""
    _log_store_rejected_job(delivery.job_id, exc)


def _log_store_rejected_job(job_id: str, exc: StoreRejected) -> None:
    logger.error(
        "job %s: Firestore refused the request: %s",
        job_id,
        exc,
        extra={
            "fields": {
                metrics.LOG_EVENT: metrics.EVENT_STORE_REJECTED,
                "job_id": job_id,
                "error_type": type(exc).__name__,
            }
        },
    )


def _as_result(result: ActionResult) -> Result:
    return Result(outcome=result.outcome, details=dict(result.details))


def _quick_retries_spent(delivery: Delivery, action: Action) -> bool:
    """Whether Pub/Sub's redeliveries of this message should stop (threshold reached).

    Without a deliveryAttempt the count is unknown, not spent: Pub/Sub sets the field only once
    the subscription's dead-letter policy is in force
    (https://cloud.google.com/pubsub/docs/handling-failures), and a first deploy's pushes can
    arrive before the dead-letter IAM applies. Reading "unknown" as "spent" deferred the job by
    the long delay (30 days in prod) on one transient error; redelivery with Pub/Sub's backoff
    is the safe side. The loop stays bounded by the message's retention (7 days); the scan's
    rescuer then takes the job back as stale-enqueued (each release restarts that clock).
    """
    attempt = delivery.delivery_attempt
    return attempt is not None and attempt >= policy_of(action).retry_later_after_attempts
