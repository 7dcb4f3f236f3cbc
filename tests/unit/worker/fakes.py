"""Stand-ins for unit tests of the worker's logic.

`MemoryStore` keeps jobs in a dict and moves them with the very `Transitions` the Firestore
store uses, so it re-implements no rule; `tests/integration/jobs/test_store_conformance.py`
runs one suite against both. (A shared key's hold is the Firestore store's alone.)
"""

from __future__ import annotations

import dataclasses
import uuid
from datetime import datetime, timedelta
from typing import Any

from services.jobs.clock import Clock
from services.jobs.errors import (
    JobNotFound,
)
from services.jobs.lanes import merged_pauses
from services.jobs.model import NewJob
from services.jobs.parts import Claim, ErrorInfo, Lease, Result
from services.jobs.record import Job
from services.jobs.results import IdempotencyRecord
from services.jobs.state import State
from services.jobs.transitions import Transitions


class MemoryStore:
    def __init__(self, clock: Clock) -> None:
        self.clock = clock
        self.jobs: dict[str, Job] = {}
        self.idempotency: dict[str, IdempotencyRecord] = {}
        self.calls: list[str] = []
        self.rules = Transitions()
        # The control document's action pauses (services/jobs/lanes.py).
        self.pauses: dict[str, datetime] = {}
        self.pause_writes = 0

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
            {"object": "a"},
            max_attempts,
            idempotency_key=idempotency_key,
        ).validated()
        job = Job.create(new, now)
        # The record as stored, whatever its params: the worker must check them itself.
        job = dataclasses.replace(
            job,
            params=params or {},
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

    def request_cancel(self, job_id: str, reason: str = "stop") -> Job:
        """What `jobsctl cancel` does to the job (a request while it runs)."""
        job = self.rules.cancel(self.jobs[job_id], reason, "ann", self.clock.now())
        self.jobs[job_id] = job
        return job

    def _held(self, job_id: str) -> Job:
        if job_id not in self.jobs:
            raise JobNotFound(job_id)
        return self.jobs[job_id]

    def _put(self, job: Job) -> Job:
        self.jobs[job.job_id] = job
        return job

    def start(self, job_id: str, generation: int, lease: timedelta, worker_id: str) -> Job:
        self.calls.append("start")
        job = self._held(job_id)
        token = uuid.uuid4().hex
        return self._put(
            self.rules.start(job, generation, self.clock.now(), lease, worker_id, token)
        )

    def extend_lease(self, lease: Lease, duration: timedelta) -> Job:
        self.calls.append("extend_lease")
        job = self._held(lease.job_id)
        return self._put(self.rules.extend(job, lease, self.clock.now(), duration))

    def save_progress(self, lease: Lease, progress: Any, *, basis: Job | None = None) -> Job:
        self.calls.append("save_progress")
        job = self._held(lease.job_id)
        return self._put(self.rules.save_progress(job, lease, progress, self.clock.now()))

    def cancel_running(self, lease: Lease, *, progress: Any = None) -> Job:
        self.calls.append("cancel_running")
        job = self._held(lease.job_id)
        return self._put(self.rules.cancel_running(job, lease, self.clock.now(), progress))

    def release(
        self, lease: Lease, error: ErrorInfo, *, progress: Any = None, message_id: Any = None
    ) -> Job:
        self.calls.append("release")
        job = self._held(lease.job_id)
        now = self.clock.now()
        return self._put(
            self.rules.release(job, lease, error, now, progress=progress, message_id=message_id)
        )

    def complete(self, lease: Lease, result: Result, *, basis: Job | None = None) -> Job:
        self.calls.append("complete")
        job = self._held(lease.job_id)
        done = self._put(self.rules.complete(job, lease, result, self.clock.now()))
        if job.explicit_key and job.idempotency_key not in self.idempotency:
            assert done.result is not None and done.result.completed_at is not None
            self.idempotency[job.idempotency_key] = IdempotencyRecord(
                job.idempotency_key,
                job.job_id,
                job.action,
                job.subject,
                done.result.outcome,
                dict(done.result.details),
                done.result.completed_at,
                done.expire_at,
            )
        return done

    def retry_later(
        self,
        lease: Lease,
        due_at: datetime,
        error: ErrorInfo,
        *,
        progress: Any = None,
        count_attempt: bool = True,
    ) -> Job:
        self.calls.append("retry_later")
        job = self._held(lease.job_id)
        now = self.clock.now()
        return self._put(
            self.rules.retry_later(
                job, lease, due_at, error, now, progress=progress, count_attempt=count_attempt
            )
        )

    def record_action_pause(self, action: str, until: datetime) -> bool:
        self.calls.append("record_action_pause")
        merged = merged_pauses(self.pauses, action, until, self.clock.now())
        if merged is None:
            return False
        self.pauses = merged
        self.pause_writes += 1
        return True

    def fail(self, lease: Lease, error: ErrorInfo) -> Job:
        self.calls.append("fail")
        job = self._held(lease.job_id)
        return self._put(self.rules.fail(job, lease, error, self.clock.now()))

    def get_idempotency(self, key: str) -> IdempotencyRecord | None:
        self.calls.append("get_idempotency")
        return self.idempotency.get(key)
