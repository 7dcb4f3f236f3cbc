"""A model-based test of the store's fences: a hypothesis RuleBasedStateMachine against the real
Firestore emulator with the real client.

Hypothesis interleaves schedule, claim, publish (mark enqueued), deliveries (duplicate and
stale ones included), take-overs, lease expiry, heartbeats, the worker's exits, reclaims and
reclaims, cancels and reschedules, for three jobs, two of which share an explicit idempotency
key. After every step it checks:

- at most one side effect per idempotency key is recorded, and none is done after one was
  recorded (a worker acts only after `start`, and only before its deadline, as the real
  worker's deadline check does);
- no job sits in a non-terminal state without an owner that will move it on (a claim time for
  the reclaimer, an `enqueued_at` for the reclaimer, a lease end and token for the reclaimer);
- every state was reached only through the table, and the history agrees with the record
  (creation entry first, each entry starting where the last ended, the last ending in the
  record's state);
- a stale delivery (its token no longer the job's) never changes a job: every call it makes
  is refused with LeaseLost and the document's update time stays the same;
- a terminal write that meets a transient error (refused by an injected UNAVAILABLE, or
  applied with its answer lost) is settled by the worker's rule (`Processor._durably`: read
  back `ended_lease_token`, retry while the lease is still this delivery's): the outcome is
  durable exactly once and the job is never left running under that lease (issue 24);
- the write-ahead holds (issue 33, finding 1): a delivery runs the real `media.delete_source`
  action (`SourceDeleter`) over an in-memory bucket that keeps generations as Cloud Storage
  does; its completion is lost, the customer uploads the object again, the lease lapses and a
  redelivery takes the job over. The generation the first delivery read is in the record
  (`progress`) before its delete, the take-over keeps it, and the redelivery deletes that
  generation or nothing: every delete the bucket sees names a generation its job recorded
  ahead, and the object uploaded again is never removed;
- a record a simulated next version rewrote (a higher `schema_version`, an unknown state in
  the record, or one in a history entry) is "foreign": every operation the machine makes on
  it (schedule over it, claim, mark enqueued, reclaim, start, the worker's exits and
  heartbeat, cancel, reschedule, reads) leaves its document exactly as that version wrote it
  (fields and update time), refuses with NewerRecord or skips it as the code defines (the
  scan logs `job_from_newer_version`, `newer_records` counts it, the worker answers
  `newer_record`, a 503), never quarantines it, and never holds up the other jobs: a scan
  still claims and reclaims every one of theirs that is due (issue 24).

Bounded (`MAX_EXAMPLES` x `STEPS`) so the default run stays fast; raise them locally to
explore more.
"""

from __future__ import annotations

import contextlib
import itertools
import logging
import uuid
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from http import HTTPStatus
from typing import Any

import pytest
from google.api_core import exceptions as api_exceptions
from google.cloud import firestore
from hypothesis import HealthCheck, settings
from hypothesis import strategies as st
from hypothesis.stateful import (
    Bundle,
    RuleBasedStateMachine,
    initialize,
    invariant,
    multiple,
    precondition,
    rule,
    run_state_machine_as_test,
)

from emulators.firestore.server import Emulator
from services.jobs import schema
from services.jobs.actions import ActionRequest
from services.jobs.clock import FakeClock
from services.jobs.errors import (
    AttemptsExhausted,
    JobsError,
    LeaseLost,
    NewerRecord,
    StoreUnavailable,
)
from services.jobs.model import NewJob
from services.jobs.parts import ErrorInfo, Lease, Result
from services.jobs.record import SCHEMA_VERSION, Job, decode_job
from services.jobs.results import ScheduleResult
from services.jobs.state import TERMINAL, TRANSITIONS, State
from services.store.job_store import FirestoreJobStore
from services.telemetry import metrics
from services.worker.actions import ActionRegistry
from services.worker.app import _STATUS as WORKER_STATUS
from services.worker.envelope import Delivery as Push
from services.worker.media import SourceDeleter
from services.worker.processor import OutcomeKind, Processor

MAX_EXAMPLES = 40
STEPS = 30

T0 = datetime(2026, 1, 1, tzinfo=UTC)
OBJECT = "media-1/source.mp4"
PARAMS = {"object": OBJECT}  # fits the media action's params schema
LEASE = timedelta(seconds=60)
MARGIN = timedelta(seconds=5)
CLAIM_TIMEOUT = timedelta(minutes=10)
ENQUEUED_TIMEOUT = timedelta(minutes=30)
SHARED_KEY = "media-1:decision-1"
JOBS = ("j0", "j1", "j2")  # j0 and j1 share SHARED_KEY; j2 has a derived key
DOWN = ErrorInfo("transient", "storage answered 503")
# What a simulated next version writes over a record of this one (issue 24 finding 2).
NEXT_STATE = "paused_by_policy"  # a state this version does not know
NEXT_VERSION_WRITES = ("schema_bump", "unknown_state", "history_entry")
MAX_FOREIGN = 2  # at least one job stays this version's, so the scan has work beside them
FAR = timedelta(days=30)  # the extra jobs `schedule_again` creates are due beyond any run


@dataclass
class Foreign:
    """A record the next version rewrote: exactly what it stored, and how it differs."""

    document: dict[str, Any]
    update_time: Any
    how: str


class NewerVersionLog(logging.Handler):
    """The job IDs the store logged `job_from_newer_version` for."""

    def __init__(self) -> None:
        super().__init__(logging.ERROR)
        self.job_ids: list[str] = []

    def emit(self, record: logging.LogRecord) -> None:
        fields = getattr(record, "fields", {})
        if fields.get(metrics.LOG_EVENT) == metrics.EVENT_JOB_FROM_NEWER_VERSION:
            self.job_ids.append(fields.get("job_id"))


@dataclass
class Delivery:
    """One push that reached `start`: the lease it got."""

    lease: Lease


class Bucket:
    """One Cloud Storage bucket in memory, as `SourceDeleter` uses it: each upload a new
    generation; a delete with `if_generation_match` removes exactly that generation, answers
    412 when another one lives at the name and 404 when none does
    (https://cloud.google.com/storage/docs/request-preconditions). `recorded_ahead(job_id)`
    gives the generations a job's record holds; each delete checks its generation is among
    them (the write-ahead) before it acts."""

    name = "media"

    def __init__(self, recorded_ahead: Callable[[], set[str]]) -> None:
        self.generations: dict[str, int] = {}
        self.deleted: list[tuple[str, int]] = []
        self._next = 1
        self._recorded_ahead = recorded_ahead

    def upload(self, name: str) -> int:
        self._next += 1
        self.generations[name] = self._next
        return self._next

    def bucket(self, name: str) -> Bucket:  # storage.Client.bucket
        assert name == self.name, name
        return self

    def exists(self, **_: Any) -> bool:
        return True

    def get_blob(self, name: str, **_: Any) -> Any:
        generation = self.generations.get(name)
        return None if generation is None else _Blob(generation)

    def delete_blob(self, name: str, *, if_generation_match: int, **_: Any) -> None:
        assert str(if_generation_match) in self._recorded_ahead(), (
            f"deleting generation {if_generation_match} of {name}, not written ahead"
        )
        current = self.generations.get(name)
        if current is None:
            raise api_exceptions.NotFound(name)
        if current != if_generation_match:
            raise api_exceptions.PreconditionFailed(name)
        del self.generations[name]
        self.deleted.append((name, current))


@dataclass(frozen=True)
class _Blob:
    generation: int


class StoreModel(RuleBasedStateMachine):
    messages = Bundle("messages")
    deliveries = Bundle("deliveries")

    def __init__(self) -> None:
        super().__init__()
        self.project = f"model-{uuid.uuid4().hex[:16]}"
        self.client = firestore.Client(project=self.project)
        self.clock = FakeClock(T0)
        self.store = FirestoreJobStore(self.client, self.clock)
        # Only its outcome-write rule is used here (no action runs); no real sleep between tries.
        self.processor = Processor(
            self.store,
            ActionRegistry(),
            self.clock,
            lease=LEASE,
            worker_id="worker",
            deadline_margin=MARGIN,
            sleep=lambda _: None,
        )
        self.effects: Counter[str] = Counter()  # side effects done, per idempotency key
        self.recorded: Counter[str] = Counter()  # fresh (not reused) results recorded, per key
        self.runs = 0
        self.foreign: dict[str, Foreign] = {}  # rewritten by the next version
        self.extras: list[str] = []  # jobs `schedule_again` created beside JOBS
        self.newer_log = NewerVersionLog()
        logging.getLogger("services").addHandler(self.newer_log)

    def teardown(self) -> None:
        logging.getLogger("services").removeHandler(self.newer_log)
        EMULATOR.reset(self.project)
        self.client.close()

    # -- helpers ---------------------------------------------------------------------------

    def _raw(self, job_id: str) -> Any:
        return self.client.collection(schema.JOBS).document(job_id).get()

    def _job(self, job_id: str) -> Job | None:
        return self.store.get(job_id)

    def _current(self, delivery: Delivery) -> bool:
        if delivery.lease.job_id in self.foreign:
            return False
        job = self._job(delivery.lease.job_id)
        return (
            job is not None
            and job.state is State.RUNNING
            and job.lease_token == delivery.lease.token
        )

    def _run_id(self) -> str:
        self.runs += 1
        return f"run-{self.runs}"

    # -- the application, the operator -----------------------------------------------------

    @staticmethod
    def _decision(job_id: str) -> NewJob:
        key = SHARED_KEY if job_id != "j2" else None
        return NewJob(job_id, "media.delete_source", "media-1", T0, PARAMS, 3, idempotency_key=key)

    @initialize()
    def schedule_the_jobs(self) -> None:
        for job_id in JOBS:
            self.store.schedule(self._decision(job_id))

    @rule(job_id=st.sampled_from(JOBS), what=st.sampled_from(["cancel", "reschedule"]))
    def operator(self, job_id: str, what: str) -> None:
        calls = {
            "cancel": lambda: self.store.cancel(job_id, "not needed", "ann"),
            "reschedule": lambda: self.store.reschedule(
                job_id, self.clock.now() + timedelta(minutes=2), "r", "a"
            ),
        }
        if job_id in self.foreign:
            self._refused_untouched(job_id, what, calls[what])
            return
        with contextlib.suppress(JobsError):
            calls[what]()

    @rule()
    def schedule_again(self) -> None:
        """The application retries its decisions (one batch, with a new job beside them),
        and one alone: a record the next version wrote refuses its own item, untouched;
        every other item still gets its outcome and the new job is created."""
        extra = f"x{len(self.extras)}"
        batch = [self._decision(job_id) for job_id in JOBS]
        batch.append(
            NewJob(extra, "media.delete_source", "media-9", self.clock.now() + FAR, PARAMS, 3)
        )
        outcomes = self.store.schedule_many(batch)
        self.extras.append(extra)
        assert len(outcomes) == len(batch)
        for new, outcome in zip(batch, outcomes, strict=True):
            if new.job_id in self.foreign:
                assert isinstance(outcome, NewerRecord), (new.job_id, outcome)
            else:
                assert isinstance(outcome, ScheduleResult), (new.job_id, outcome)
                assert outcome.created is (new.job_id == extra)
        for job_id in self.foreign:
            self._assert_untouched(job_id, "schedule_many")
        for job_id in self.foreign:
            self._refused_untouched(
                job_id,
                "schedule",
                lambda job_id=job_id: self.store.schedule(self._decision(job_id)),
            )

    # -- a next version of the code ----------------------------------------------------------

    @precondition(lambda self: len(self.foreign) < MAX_FOREIGN)
    @rule(job_id=st.sampled_from(JOBS), how=st.sampled_from(NEXT_VERSION_WRITES))
    def next_version_rewrites(self, job_id: str, how: str) -> None:
        """A newer revision (a rollout in progress, or rolled back since) rewrites one record,
        in whatever state it is: a higher schema_version with a field this one does not
        know, a state it does not know (with the history entry that led there), or a
        history entry through such a state. From then on this version must leave it alone:
        every call this version could make on it right then (its current lease's included,
        when it was running) is refused and writes nothing."""
        self._next_version(job_id, how)

    @precondition(lambda self: len(self.foreign) < MAX_FOREIGN)
    @rule(message=messages, how=st.sampled_from(NEXT_VERSION_WRITES))
    def next_version_rewrites_a_claimed_job(self, message: Any, how: str) -> None:
        """The same, for a job a scan claimed (it may be enqueued, running or done since)."""
        self._next_version(message.job_id, how)

    @precondition(lambda self: len(self.foreign) < MAX_FOREIGN)
    @rule(delivery=deliveries, how=st.sampled_from(NEXT_VERSION_WRITES))
    def next_version_rewrites_a_started_job(self, delivery: Delivery, how: str) -> None:
        """The same, for a job a delivery started (it may still run under that lease)."""
        self._next_version(delivery.lease.job_id, how)

    def _next_version(self, job_id: str, how: str) -> None:
        if job_id in self.foreign:
            return
        job = self._job(job_id)
        assert job is not None
        self._rewrite(job_id, how)
        if job.lease is not None:
            self._check_stale(Delivery(job.lease))  # every lease call, then a push
        else:
            self._check_foreign_push(job_id, job.generation)
        mark = self.store.mark_enqueued_many([(job_id, job.generation, "m-3")])
        assert len(mark) == 1 and isinstance(mark[0].error, NewerRecord), mark
        self._assert_untouched(job_id, "mark_enqueued_many")
        self.operator(job_id, "cancel")
        self.operator(job_id, "reschedule")

    def _rewrite(self, job_id: str, how: str) -> None:
        ref = self.client.collection(schema.JOBS).document(job_id)
        raw = ref.get().to_dict()
        assert raw is not None
        history = list(raw["history"])
        state = raw["state"]
        entry = {"at": self.clock.now(), "by": "next-version", "reason": "policy"}
        if how == "schema_bump":
            change = {"schema_version": SCHEMA_VERSION + 1, "priority_class": "gold"}
        elif how == "unknown_state":
            history.append({**entry, "from": state, "to": NEXT_STATE})
            change = {"state": NEXT_STATE, "history": history}
        else:
            history.append({**entry, "from": state, "to": NEXT_STATE})
            history.append({**entry, "from": NEXT_STATE, "to": state})
            change = {"history": history}
        ref.update(change)
        snapshot = ref.get()
        self.foreign[job_id] = Foreign(snapshot.to_dict(), snapshot.update_time, how)

    # -- the scan and time -------------------------------------------------------------------

    @rule(target=messages, mark=st.booleans(), limit=st.sampled_from([10, 1]))
    def scan(self, mark: bool, limit: int) -> Any:
        """A scan run: the reclaimer, then a claim, and (unless the marks are lost) enqueued.
        Each claimed job becomes a message that may be delivered, late or more than once.
        Records the next version wrote are skipped (logged, never quarantined) and hold up
        none of the others: all that are due back or due are reclaimed or claimed, up to
        the run's limit."""
        now = self.clock.now()
        expired = self._ours(lambda job: self._expired(job, now))
        report = self.store.reclaim_expired(
            now, CLAIM_TIMEOUT, limit, self._run_id(), enqueued_timeout=ENQUEUED_TIMEOUT
        )
        assert not set(report.quarantined) & set(self.foreign), report.quarantined
        assert not {r.job_id for r in report.reclaimed} & set(self.foreign)
        assert len(report.reclaimed) >= min(limit, len(expired)), (expired, report)
        due = self._ours(lambda job: job.state is State.DEFERRED and job.due_at <= now)
        met = [  # the next version's records the due query finds
            job_id
            for job_id, foreign in self.foreign.items()
            if foreign.document["state"] == State.DEFERRED.value
            and foreign.document["due_at"] <= now
        ]
        self.newer_log.job_ids.clear()
        quarantined: list[str] = []
        claims = self.store.claim_due(now, self._run_id(), limit, on_quarantine=quarantined.append)
        assert quarantined == [], quarantined
        claimed = {c.job_id for c in claims}
        assert claimed <= due and len(claimed) == min(limit, len(due)), (claimed, due)
        if len(due) + len(met) < limit:  # the claim's pages met every due record
            assert set(met) <= set(self.newer_log.job_ids), (met, self.newer_log.job_ids)
        if mark and claims:
            self.store.mark_enqueued_many([(c.job_id, c.generation, "m-1") for c in claims])
        for job_id in self.foreign:
            self._assert_untouched(job_id, "scan")
        return multiple(*claims)

    @rule(message=messages)
    def publish_acknowledged(self, message: Any) -> None:
        """A publish whose acknowledgement (the mark enqueued) comes late: after the worker
        started, a newer claim, or the next version rewrote the record."""
        mark = self.store.mark_enqueued_many([(message.job_id, message.generation, "m-2")])
        if message.job_id in self.foreign:
            assert len(mark) == 1 and isinstance(mark[0].error, NewerRecord), mark
            self._assert_untouched(message.job_id, "mark_enqueued_many")

    @rule(seconds=st.sampled_from([1, 30, 61, 700, 2000]))
    def time_passes(self, seconds: int) -> None:
        self.clock.advance(timedelta(seconds=seconds))

    # -- Pub/Sub and the worker --------------------------------------------------------------

    @rule(target=deliveries, message=messages)
    def deliver(self, message: Any) -> Any:
        """A push (first, duplicate or stale: the same message may be drawn again); a push
        that finds the previous delivery's lease lapsed takes the job over. A record the next
        version wrote is refused untouched; the worker answers it 503 (redelivered)."""
        if message.job_id in self.foreign:
            self._check_foreign_push(message.job_id, message.generation)
            return multiple()
        before = self._job(message.job_id)
        try:
            job = self.store.start(message.job_id, message.generation, LEASE, "worker")
        except JobsError:
            return multiple()
        if before is not None and before.lease is not None:
            self._check_stale(Delivery(before.lease))  # the delivery it took the job from
        if job.lease is None:  # the take-over found the last attempt spent: failed
            return multiple()
        return Delivery(job.lease)

    @rule(target=deliveries, delivery=deliveries)
    def take_over(self, delivery: Delivery) -> Any:
        """The holder stops heartbeating; once its lease lapsed, a redelivery of the same
        message takes the job over, and the old delivery is stale from then on."""
        if not self._current(delivery):
            return multiple()
        self.clock.advance(LEASE + timedelta(seconds=1))
        lease = delivery.lease
        try:
            job = self.store.start(lease.job_id, lease.generation, LEASE, "worker")
        except JobsError:
            return multiple()
        self._check_stale(delivery)
        return Delivery(job.lease) if job.lease is not None else multiple()

    @rule(
        delivery=deliveries,
        what=st.sampled_from(
            [
                "act_and_complete",
                "heartbeat",
                "release",
                "retry_later",
                "fail",
                "lapse",
                "late",
            ]
        ),
    )
    def worker(self, delivery: Delivery, what: str) -> None:
        if not self._current(delivery):
            self._check_stale(delivery)  # whatever it was about to do: refused
        elif what == "act_and_complete":
            self._act_and_complete(delivery)
        elif what == "heartbeat":
            job = self.store.extend_lease(delivery.lease, LEASE)
            assert job.lease is not None
            delivery.lease = job.lease
        elif what == "lapse":
            # The holder stops heartbeating (crashed, or hung past its lease).
            self.clock.advance(LEASE + timedelta(seconds=1))
        elif what == "late":
            # Slow but alive: its deadline passes, the action stops before acting.
            self.clock.advance(LEASE - MARGIN)
            self._act_and_complete(delivery)
        else:
            self._exit(delivery, what)

    @rule(
        delivery=deliveries,
        then=st.sampled_from(["release", "retry_later", "fail", "reclaimed", "redelivered"]),
    )
    def cancel_while_running(self, delivery: Delivery, then: str) -> None:
        """jobsctl cancel while it runs records a request; whatever moves the job next (the
        worker's exit, or the lease lapsing into the reclaimer or a redelivery) cancels it."""
        if not self._current(delivery):
            return
        lease = delivery.lease
        self.store.cancel(lease.job_id, "media restored", "ann")
        if then in ("reclaimed", "redelivered"):
            self.clock.advance(LEASE + timedelta(seconds=1))
            if then == "reclaimed":
                self.store.reclaim_expired(self.clock.now(), CLAIM_TIMEOUT, 10, self._run_id())
            else:
                self.store.start(lease.job_id, lease.generation, LEASE, "worker")
        else:
            self._exit(delivery, then)
        job = self._job(lease.job_id)
        assert job is not None and job.state is State.CANCELLED, f"{then} did not cancel"

    @rule(
        delivery=deliveries,
        what=st.sampled_from(["complete", "release", "retry_later", "fail"]),
        fault=st.sampled_from(["refused", "answer_lost", "newer_meanwhile"]),
        how=st.sampled_from(NEXT_VERSION_WRITES),
    )
    def transient_terminal_write(self, delivery: Delivery, what: str, fault: str, how: str) -> None:
        """The delivery's outcome meets one transient error: Firestore refuses the commit
        (UNAVAILABLE, nothing applied) or applies it and the answer is lost. The worker's rule
        must leave the outcome durable, applied once, and never report a write of its own
        that applied as lost. Or the commit is refused and, before the worker reads the
        record back, the next version rewrites it (`how`): the worker gives up with
        NewerRecord (its outcome `newer_record`) and writes nothing over it."""
        if not self._current(delivery) or self.clock.now() >= delivery.lease.until - MARGIN:
            return
        if fault == "newer_meanwhile" and len(self.foreign) >= MAX_FOREIGN:
            return
        lease = delivery.lease
        job = self._job(lease.job_id)
        assert job is not None
        key = job.idempotency_key
        reused = job.explicit_key and self.store.get_idempotency(key) is not None
        writes = {
            "complete": lambda: self.store.complete(lease, Result("deleted")),
            "release": lambda: self.store.release(lease, DOWN, message_id="m-again"),
            "retry_later": lambda: self.store.retry_later(lease, self.clock.now() + LEASE, DOWN),
            "fail": lambda: self.store.fail(lease, ErrorInfo("permanent", "gone")),
        }
        real = writes[what]
        if what == "complete" and not reused:
            assert self.recorded[key] == 0, f"acting again on {key} after its result was recorded"
            self.effects[key] += 1
        tries: list[str] = []

        def write() -> Job:
            tries.append(what)
            if len(tries) > 1:
                return real()
            if fault in ("refused", "newer_meanwhile"):
                try:
                    return _refused_commit(real)
                finally:
                    if fault == "newer_meanwhile":
                        self._rewrite(lease.job_id, how)
            real()
            raise StoreUnavailable("the commit applied; its answer was lost")

        try:
            ended = self.processor._durably(lease, write)
        except NewerRecord:
            assert fault == "newer_meanwhile" and len(tries) == 1, (fault, tries)
            self._assert_untouched(lease.job_id, f"{what} after a refusal")
            return
        except AttemptsExhausted:
            assert what == "retry_later" and len(tries) == 1  # nothing applied: the caller fails
            return
        assert ended.state is not State.RUNNING and ended.ended_lease_token == lease.token
        assert fault != "newer_meanwhile", "a write went through a newer version's record"
        assert len(tries) == (2 if fault == "refused" else 1), tries
        stored = self._job(lease.job_id)
        assert stored is not None and stored.ended_lease_token == lease.token
        assert stored.state is ended.state and stored.lease_token is None
        if what == "complete" and not reused:
            self.recorded[key] += 1

    @rule(target=deliveries, delivery=deliveries)
    def completion_lost_object_replaced_lease_lapsed(self, delivery: Delivery) -> Any:
        """The real media action acts (its generation written ahead, then the delete); its
        completion is lost (Firestore refused it: the job stays running); the customer
        uploads the object again; the lease lapses and a redelivery takes the job over and
        runs the action again. The write-ahead must hold: the record kept the generation
        read, and the redelivery deletes that one or nothing, never the new upload."""
        if not self._current(delivery) or self.clock.now() >= delivery.lease.until - MARGIN:
            return multiple()
        lease = delivery.lease
        job_id = lease.job_id
        job = self._job(job_id)
        assert job is not None
        key = job.idempotency_key
        reused = job.explicit_key and self.store.get_idempotency(key) is not None
        if reused:
            return multiple()  # the worker would reuse the recorded result, not act
        assert self.recorded[key] == 0, f"acting again on {key} after its result was recorded"
        bucket = Bucket(lambda: self._written_ahead(job_id))
        bucket.upload(OBJECT)
        first = self._run_action(job, lease, bucket)
        self.effects[key] += 1
        read = bucket.deleted[-1][1] if bucket.deleted else None
        assert first.outcome == "deleted" and read is not None, first
        with pytest.raises(StoreUnavailable):  # the completion is lost: nothing applied
            _refused_commit(lambda: self.store.complete(lease, Result("deleted")))
        again = bucket.upload(OBJECT)  # the customer restores the file
        self.clock.advance(LEASE + timedelta(seconds=1))
        try:
            taken = self.store.start(job_id, lease.generation, LEASE, "worker")
        except JobsError:
            return multiple()
        self._check_stale(delivery)
        assert str(read) in self._written_ahead(job_id), "the take-over lost the write-ahead"
        if taken.lease is None:  # the last attempt was spent: failed (or cancelled)
            assert bucket.generations[OBJECT] == again
            return multiple()
        second = self._run_action(taken, taken.lease, bucket)
        assert second.outcome == "replaced", second  # 412: the new upload stays
        assert bucket.generations[OBJECT] == again, "the redelivery removed the restored file"
        assert [g for _, g in bucket.deleted] == [read], bucket.deleted
        return Delivery(taken.lease)

    def _written_ahead(self, job_id: str) -> set[str]:
        job = self._job(job_id)
        progress = (job.progress if job is not None else None) or {}
        generations = progress.get("generations") or {}
        return {str(g) for g in generations.values()}

    def _run_action(self, job: Job, lease: Lease, bucket: Bucket) -> Any:
        """`media.delete_source` as the worker runs it: its write-ahead bound to the store's
        `save_progress` under this delivery's lease."""

        def record(progress: Any) -> None:
            self.store.save_progress(lease, progress)

        request = ActionRequest(
            job_id=job.job_id,
            action=job.action,
            subject=job.subject,
            params=job.params,
            attempt=job.attempt,
            idempotency_key=job.idempotency_key,
            progress=job.progress,
            progress_recorder=record,
        )
        return SourceDeleter(bucket, default_bucket=Bucket.name)(request)

    def _act_and_complete(self, delivery: Delivery) -> None:
        """The worker's action: only while its deadline has not passed, as the real one."""
        if self.clock.now() >= delivery.lease.until - MARGIN:
            return
        job = self._job(delivery.lease.job_id)
        assert job is not None
        key = job.idempotency_key
        reused = job.explicit_key and self.store.get_idempotency(key) is not None
        if not reused:
            assert self.recorded[key] == 0, f"acting again on {key} after its result was recorded"
            self.effects[key] += 1
        try:
            self.store.complete(delivery.lease, Result("deleted"))
        except LeaseLost:
            return
        if not reused:
            self.recorded[key] += 1

    def _exit(self, delivery: Delivery, how: str) -> None:
        with contextlib.suppress(JobsError):  # AttemptsExhausted: nothing changed
            if how == "release":
                self.store.release(delivery.lease, DOWN, message_id="m-again")
            elif how == "retry_later":
                self.store.retry_later(delivery.lease, self.clock.now() + LEASE, DOWN)
            else:
                self.store.fail(delivery.lease, ErrorInfo("permanent", "gone"))

    def _check_stale(self, delivery: Delivery) -> None:
        """A delivery whose token is no longer the job's: every call refused, nothing moved."""
        if self._current(delivery):
            return
        lease = delivery.lease
        foreign = lease.job_id in self.foreign
        calls = {
            "complete": lambda: self.store.complete(lease, Result("deleted")),
            "fail": lambda: self.store.fail(lease, ErrorInfo("permanent", "late")),
            "release": lambda: self.store.release(lease, DOWN),
            "retry_later": lambda: self.store.retry_later(lease, self.clock.now(), DOWN),
            "cancel_running": lambda: self.store.cancel_running(lease),
            "extend_lease": lambda: self.store.extend_lease(lease, LEASE),
        }
        for name, call in calls.items():
            if foreign:
                # The lease this version gave is no excuse to write over the next one's record.
                self._refused_untouched(lease.job_id, name, call)
                continue
            before = self._raw(lease.job_id).update_time
            try:
                call()
            except LeaseLost:
                pass
            else:
                raise AssertionError(f"a stale delivery's {name} was accepted")
            assert self._raw(lease.job_id).update_time == before, f"stale {name} wrote"
        if foreign:
            self._check_foreign_push(lease.job_id, lease.generation)

    # -- records of the next version ---------------------------------------------------------

    def _ours(self, predicate: Any) -> set[str]:
        """This version's jobs (JOBS and the extras) for which `predicate(job)` holds."""
        found = set()
        for job_id in [*JOBS, *self.extras]:
            if job_id in self.foreign:
                continue
            job = self._job(job_id)
            if job is not None and predicate(job):
                found.add(job_id)
        return found

    @staticmethod
    def _expired(job: Job, now: datetime) -> bool:
        """Whether the reclaimer must take `job` back at `now`."""
        if job.state is State.CLAIMED:
            return job.claim is not None and job.claim.claimed_at < now - CLAIM_TIMEOUT
        if job.state is State.RUNNING:
            return job.lease_until is not None and job.lease_until < now
        if job.state is State.ENQUEUED:
            return job.enqueued_at is not None and job.enqueued_at < now - ENQUEUED_TIMEOUT
        return False

    def _assert_untouched(self, job_id: str, by: str) -> None:
        """The record is exactly as the next version wrote it: every field, and the update
        time (any write, even of the same values, would move it)."""
        expected = self.foreign[job_id]
        found = self._raw(job_id)
        assert found.exists, f"{by} deleted {job_id}, written by a newer version"
        assert found.to_dict() == expected.document, f"{by} changed {job_id}"
        assert found.update_time == expected.update_time, f"{by} wrote {job_id}"

    def _refused_untouched(self, job_id: str, name: str, call: Any) -> None:
        try:
            call()
        except NewerRecord:
            pass
        else:
            raise AssertionError(f"{name} on {job_id}, written by a newer version, was accepted")
        self._assert_untouched(job_id, name)

    def _check_foreign_push(self, job_id: str, generation: int) -> None:
        """A push for a record the next version wrote: `start` refuses it, and the worker
        answers `newer_record`, not acknowledged, a 503 (Pub/Sub redelivers it to the
        revision that knows it), logged; nothing written."""
        self._refused_untouched(
            job_id, "start", lambda: self.store.start(job_id, generation, LEASE, "worker")
        )
        self.newer_log.job_ids.clear()
        outcome = self.processor.process(Push(job_id, generation, message_id="m-1"))
        assert outcome.kind is OutcomeKind.NEWER_RECORD, outcome
        assert not outcome.acknowledged
        # The push endpoint's answer for that outcome (services/worker/app.py).
        assert WORKER_STATUS[outcome.kind] is HTTPStatus.SERVICE_UNAVAILABLE
        assert self.newer_log.job_ids == [job_id], self.newer_log.job_ids
        self._assert_untouched(job_id, "the worker")

    # -- invariants --------------------------------------------------------------------------

    @invariant()
    def at_most_one_side_effect_recorded_per_key(self) -> None:
        for key, count in self.recorded.items():
            assert count <= 1, f"{count} results recorded for {key}"

    @invariant()
    def every_live_job_has_an_owner_that_will_move_it(self) -> None:
        for job_id in JOBS:
            if job_id in self.foreign:
                continue  # the next version's to move
            snapshot = self._raw(job_id)
            if not snapshot.exists:
                continue
            job = decode_job(job_id, snapshot.to_dict())
            if job.state is State.CLAIMED:
                assert job.claim is not None  # the reclaimer, after the claim timeout
            elif job.state is State.ENQUEUED:
                # The reclaimer measures from enqueued_at: it must be when it became enqueued.
                assert job.enqueued_at is not None, f"{job_id} enqueued with no enqueued_at"
                assert job.enqueued_at == job.history[-1].at, f"{job_id}: a stale enqueued_at"
            elif job.state is State.RUNNING:
                assert job.lease_until is not None and job.lease_token is not None
            elif job.state is State.DEFERRED:
                assert job.cancel_requested is None, f"{job_id} deferred with a cancel request"

    @invariant()
    def states_follow_the_table_and_history_agrees(self) -> None:
        for job_id in JOBS:
            if job_id in self.foreign:
                continue
            job = self._job(job_id)
            if job is None:
                continue
            history = job.history
            assert history[0].from_state is None and history[0].to_state is State.DEFERRED
            for entry in history[1:]:
                assert entry.from_state is not None
                assert (entry.from_state, entry.to_state) in TRANSITIONS
            limit = self.store._docs.rules.history_limit
            if len(history) < limit:  # nothing dropped: a full chain
                for before, after in itertools.pairwise(history):
                    assert after.from_state is before.to_state
            assert history[-1].to_state is job.state
            assert (job.expire_at is not None) == (job.state in TERMINAL)

    @invariant()
    def records_of_the_next_version_stay_as_it_wrote_them(self) -> None:
        for job_id in self.foreign:
            self._assert_untouched(job_id, "a step")

    @rule()
    def operator_reads(self) -> None:
        """jobsctl's reads: `get` refuses a record of the next version, `list` names it
        among the records it cannot read, `stats` counts it (in `newer_records`), and all of
        them show every other job as before."""
        for job_id in self.foreign:
            self._refused_untouched(job_id, "get", lambda job_id=job_id: self.store.get(job_id))
        page = self.store.list_jobs(limit=50)
        assert set(page.invalid) == set(self.foreign), page.invalid
        listed = {job.job_id for job in page.jobs}
        assert listed == {*JOBS, *self.extras} - set(self.foreign), listed
        stats = self.store.stats(self.clock.now(), CLAIM_TIMEOUT)
        newer = self.store.newer_records(stats)
        hows = Counter(foreign.how for foreign in self.foreign.values())
        assert newer.newer_schema == hows["schema_bump"], (newer, hows)
        assert newer.unknown_state == hows["unknown_state"], (newer, hows)
        counted = sum(stats.per_state.values()) + newer.unknown_state
        assert counted == len(JOBS) + len(self.extras), (stats.per_state, newer)


EMULATOR: Emulator


def _refused_commit(real: Callable[[], Job]) -> Job:
    """`real` meeting one UNAVAILABLE on its commit, nothing applied. The built-in emulator
    refuses the commit on the wire; Google's emulator has no fault injection, so there the
    caller gets the same StoreUnavailable without the commit being sent (what a refused commit
    looks like to the store's caller either way)."""
    inject = getattr(EMULATOR, "inject_fault", None)
    if inject is None:
        raise StoreUnavailable("UNAVAILABLE (simulated at the client: no fault injection here)")
    inject("Commit", "UNAVAILABLE")
    try:
        return real()
    finally:
        EMULATOR.clear_faults()


def test_no_interleaving_breaks_a_fence(firestore_emulator: Emulator) -> None:
    global EMULATOR
    EMULATOR = firestore_emulator
    run_state_machine_as_test(
        StoreModel,
        settings=settings(
            max_examples=MAX_EXAMPLES,
            stateful_step_count=STEPS,
            deadline=None,
            suppress_health_check=[HealthCheck.too_slow, HealthCheck.filter_too_much],
            derandomize=True,
        ),
    )


# Interleavings the machine found (or would need many more examples to reach), kept as fixed
# step sequences of the same machine so every run checks them: (rule, arguments) in order.
FOUND: dict[str, list[tuple[str, dict[str, Any]]]] = {
    # schedule_many raised NewerRecord for the whole batch: no item got its outcome.
    "schedule_many_over_a_newer_record": [
        ("next_version_rewrites", {"job_id": "j0", "how": "schema_bump"}),
        ("schedule_again", {}),
    ],
    # The claim's one-record page met only the newer record due first and stopped: j1 and
    # j2, due too, were never claimed while it stayed (with the default page of 100, once
    # 100 such records are due first).
    "a_newer_record_due_first_holds_up_no_claim": [
        ("next_version_rewrites", {"job_id": "j0", "how": "schema_bump"}),
        ("scan", {"mark": True, "limit": 1}),
    ],
    # The same for the reclaimer: an abandoned claim the next version rewrote, oldest first.
    "a_newer_record_claimed_first_holds_up_no_reclaim": [
        ("scan", {"mark": False, "limit": 10}),
        ("next_version_rewrites", {"job_id": "j0", "how": "history_entry"}),
        ("time_passes", {"seconds": 700}),
        ("scan", {"mark": True, "limit": 1}),
    ],
}


@pytest.mark.parametrize("name", sorted(FOUND))
def test_a_found_interleaving_stays_fixed(firestore_emulator: Emulator, name: str) -> None:
    global EMULATOR
    EMULATOR = firestore_emulator
    machine = StoreModel()
    try:
        machine.schedule_the_jobs()
        for rule_name, arguments in FOUND[name]:
            getattr(machine, rule_name)(**arguments)
            machine.records_of_the_next_version_stay_as_it_wrote_them()
            machine.every_live_job_has_an_owner_that_will_move_it()
            machine.states_follow_the_table_and_history_agrees()
        machine.operator_reads()
    finally:
        machine.teardown()


@pytest.mark.parametrize("job_id", ["j2", "j0"], ids=["derived-key", "shared-key"])
def test_the_write_ahead_holds_through_a_lost_completion_a_new_upload_and_a_lapsed_lease(
    firestore_emulator: Emulator, job_id: str
) -> None:
    """The machine's write-ahead step on a fixed path, so every run takes it at least once."""
    global EMULATOR
    EMULATOR = firestore_emulator
    machine = StoreModel()
    try:
        machine.schedule_the_jobs()
        claims = machine.scan(mark=True, limit=10).values
        (message,) = [c for c in claims if c.job_id == job_id]
        delivery = machine.deliver(message=message)
        taken = machine.completion_lost_object_replaced_lease_lapsed(delivery)
        assert isinstance(taken, Delivery), "the redelivery did not take the job over"
        machine.states_follow_the_table_and_history_agrees()
        machine.every_live_job_has_an_owner_that_will_move_it()
    finally:
        machine.teardown()
