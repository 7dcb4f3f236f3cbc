"""Stand-ins for a unit test of the API's HTTP logic: a verifier and an in-memory store.

The store keeps the real rules where they matter to the API: `NewJob.validated` (so its
ValidationError is the real one), `Job.create`, and `apply_transition` for cancel and
reschedule. The integration tests run the same requests against FirestoreJobStore.
"""

from __future__ import annotations

import dataclasses
from datetime import UTC, datetime
from typing import Any

from services.edge.auth import Caller, RequestHeaders, invoker_authorization
from services.edge.auth_errors import Forbidden, Unauthenticated
from services.jobs.clock import FakeClock
from services.jobs.errors import AlreadyTerminal, JobNotFound
from services.jobs.model import NewJob
from services.jobs.record import Job
from services.jobs.results import ScheduleResult
from services.jobs.state import Role, State, apply_transition
from services.store.scheduling import same_decision

T0 = datetime(2026, 6, 1, 12, 0, tzinfo=UTC)
CALLER = "producer@test-project.iam.gserviceaccount.com"
GOOD = "Bearer good-token"
STRANGER = "Bearer stranger-token"


class FakeVerifier:
    """Knows two tokens; reads the headers as auth.TokenVerifier does (invoker_authorization)."""

    def verify_request(self, headers: RequestHeaders) -> Caller:
        authorization = invoker_authorization(headers)
        if authorization == GOOD:
            return Caller(CALLER, "sub", 0, 0)
        if authorization == STRANGER:
            raise Forbidden("caller 'stranger@x' is not allowed")
        raise Unauthenticated("missing or bad token")


class FakeStore:
    def __init__(self, clock: FakeClock) -> None:
        self.clock = clock
        self.jobs: dict[str, Job] = {}
        self.calls: list[str] = []

    def schedule(
        self, new_job: NewJob, *, by: str = "application", producer: str | None = None
    ) -> ScheduleResult:
        self.calls.append("schedule")
        valid = new_job.validated()
        job = Job.create(valid, self.clock.now()).replaced(producer=producer)
        existing = self.jobs.get(valid.job_id)
        if existing is None:
            self.jobs[valid.job_id] = job
            return ScheduleResult(job, created=True)
        return same_decision(valid, existing)

    def get(self, job_id: str) -> Job | None:
        self.calls.append("get")
        return self.jobs.get(job_id)

    def cancel(self, job_id: str, reason: str, by: str) -> Job:
        self.calls.append("cancel")
        job = self._load(job_id)
        if job.state.terminal:
            raise AlreadyTerminal(job_id, job.state, State.CANCELLED)
        return self._put(job, State.CANCELLED, reason, by)

    def reschedule(self, job_id: str, due_at: Any, reason: str, by: str) -> Job:
        self.calls.append("reschedule")
        return self._put(self._load(job_id), State.DEFERRED, reason, by, due_at=due_at)

    def set_state(self, job_id: str, state: State) -> None:
        self.jobs[job_id] = dataclasses.replace(self.jobs[job_id], state=state)

    def _load(self, job_id: str) -> Job:
        if job_id not in self.jobs:
            raise JobNotFound(job_id)
        return self.jobs[job_id]

    def _put(self, job: Job, to: State, reason: str, by: str, **changes: Any) -> Job:
        new = apply_transition(
            job, to, role=Role.OPERATOR, by=by, at=self.clock.now(), reason=reason, **changes
        )
        self.jobs[job.job_id] = new
        return new
