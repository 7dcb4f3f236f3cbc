"""Hand-written stand-ins for unit tests of the worker's logic (never used by integration tests).

`MemoryStore` keeps jobs in a dict and moves them with the real `state.apply_transition`, with
the same refusals as `FirestoreJobStore` for the calls the worker makes.
"""

from __future__ import annotations

import dataclasses
import uuid
from datetime import datetime, timedelta
from typing import Any

from services.jobs.clock import Clock
from services.jobs.errors import (
    AlreadyTerminal,
    AttemptsExhausted,
    InvalidTransition,
    JobNotFound,
    LeaseHeld,
    LeaseLost,
    StaleGeneration,
)
from services.jobs.model import Claim, ErrorInfo, IdempotencyRecord, Job, Lease, NewJob, Result
from services.jobs.state import Role, State, apply_transition

_NO_LEASE: dict[str, Any] = {"lease_until": None, "lease_owner": None, "lease_token": None}


class MemoryStore:
    def __init__(self, clock: Clock) -> None:
        self.clock = clock
        self.jobs: dict[str, Job] = {}
        self.idempotency: dict[str, IdempotencyRecord] = {}
        self.calls: list[str] = []

    def add(
        self,
        job_id: str,
        *,
        max_attempts: int = 5,
        params: Any = None,
        idempotency_key: str | None = None,
    ) -> Job:
        """A job claimed and enqueued at generation 1, as the scan leaves it."""
        now = self.clock.now()
        new = NewJob(
            job_id,
            "media.delete_source",
            "media-1",
            now,
            params or {},
            max_attempts,
            idempotency_key=idempotency_key,
        ).validated()
        job = Job.create(new, now)
        job = dataclasses.replace(
            job,
            state=State.ENQUEUED,
            claim=Claim("run-1", now, 1),
            enqueued_at=now,
            message_id="m-1",
        )
        self.jobs[job_id] = job
        return job

    def requeue(self, job_id: str) -> Job:
        """A deferred job claimed and enqueued again by a later scan (generation + 1)."""
        job = self.jobs[job_id]
        assert job.state is State.DEFERRED, job.state
        now = self.clock.now()
        job = dataclasses.replace(
            job,
            state=State.ENQUEUED,
            claim=Claim("run-n", now, job.generation + 1),
            enqueued_at=now,
        )
        self.jobs[job_id] = job
        return job

    def get(self, job_id: str) -> Job | None:
        self.calls.append("get")
        return self.jobs.get(job_id)

    def _move(self, job: Job, to: State, by: str, **changes: Any) -> Job:
        new = apply_transition(
            job, to, role=Role.WORKER, by=by, at=self.clock.now(), reason="test", **changes
        )
        self.jobs[job.job_id] = new
        return new

    def _leased(self, lease: Lease) -> Job:
        # As the store: anything but our running lease (generation and token) is a lost lease.
        job = self.jobs[lease.job_id]
        if (
            job.state is not State.RUNNING
            or job.generation != lease.generation
            or job.lease_token != lease.token
        ):
            raise LeaseLost(
                lease.job_id, lease.owner, job.lease_owner, f"the job is {job.state.value}"
            )
        return job

    def start(self, job_id: str, generation: int, lease: timedelta, worker_id: str) -> Job:
        self.calls.append("start")
        if job_id not in self.jobs:
            raise JobNotFound(job_id)
        job = self.jobs[job_id]
        now = self.clock.now()
        if job.state.terminal:
            raise AlreadyTerminal(job_id, job.state, State.RUNNING)
        if job.generation != generation:
            raise StaleGeneration(job_id, generation, job.generation)
        if job.state is State.DEFERRED:
            raise InvalidTransition(job_id, job.state, State.RUNNING)
        if job.state is State.RUNNING and job.lease_live(now):
            raise LeaseHeld(job_id, job.lease_owner, job.lease_until)
        return self._move(
            job,
            State.RUNNING,
            worker_id,
            lease_until=now + lease,
            lease_owner=worker_id,
            lease_token=uuid.uuid4().hex,
        )

    def extend_lease(self, lease: Lease, duration: timedelta) -> Job:
        self.calls.append("extend_lease")
        job = self._leased(lease)
        job = dataclasses.replace(job, lease_until=self.clock.now() + duration)
        self.jobs[job.job_id] = job
        return job

    def _ended(self, job: Job, to: State, by: str, **changes: Any) -> Job:
        if job.cancel_requested is not None and to is not State.COMPLETED:
            to = State.CANCELLED
            changes = {k: v for k, v in changes.items() if k in ("last_error", "progress")}
        return self._move(job, to, by, **_NO_LEASE, **changes)

    def cancel_running(self, lease: Lease, *, progress: Any = None) -> Job:
        self.calls.append("cancel_running")
        job = self._leased(lease)
        return self._move(job, State.CANCELLED, lease.owner, **_NO_LEASE)

    def release(
        self, lease: Lease, error: ErrorInfo, *, progress: Any = None, message_id: Any = None
    ) -> Job:
        self.calls.append("release")
        job = self._leased(lease)
        return self._ended(job, State.ENQUEUED, lease.owner, last_error=error, progress=progress)

    def complete(self, lease: Lease, result: Result) -> Job:
        self.calls.append("complete")
        job = self._leased(lease)
        now = self.clock.now()
        stamped = dataclasses.replace(result, completed_at=now)
        self.idempotency[job.idempotency_key] = IdempotencyRecord(
            job.idempotency_key,
            job.job_id,
            job.action,
            job.subject,
            result.outcome,
            dict(result.details),
            now,
            None,
        )
        return self._move(job, State.COMPLETED, lease.owner, result=stamped, **_NO_LEASE)

    def retry_later(
        self, lease: Lease, due_at: datetime, error: ErrorInfo, *, progress: Any = None
    ) -> Job:
        self.calls.append("retry_later")
        job = self._leased(lease)
        if job.cancel_requested is None and job.attempt >= job.max_attempts:
            raise AttemptsExhausted(job.job_id, job.attempt, job.max_attempts)
        return self._ended(
            job,
            State.DEFERRED,
            lease.owner,
            attempt=job.attempt + 1,
            due_at=due_at,
            last_error=error,
        )

    def fail(self, lease: Lease, error: ErrorInfo) -> Job:
        self.calls.append("fail")
        job = self._leased(lease)
        return self._ended(job, State.FAILED, lease.owner, last_error=error)

    def get_idempotency(self, key: str) -> IdempotencyRecord | None:
        self.calls.append("get_idempotency")
        return self.idempotency.get(key)
