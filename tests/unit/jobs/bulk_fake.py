"""`MemoryBulkStore`: the bulk port (services/jobs/bulk.py `BulkStore`) over a dict, for unit
tests of bulk logic. It moves jobs with the very `Transitions` the Firestore store uses and
pages in the store's (due_at, job ID) order with the store's cursor, so it re-implements no
rule; `tests/integration/jobs/test_store_conformance_bulk.py` proves it answers as the
Firestore store does. A preview's read time is a copy of the jobs as they were."""

from __future__ import annotations

import dataclasses
from datetime import datetime, timedelta

from services.jobs.bulk import JobFilter, MatchPage
from services.jobs.clock import Clock
from services.jobs.errors import JobNotFound
from services.jobs.model import NewJob
from services.jobs.record import Job
from services.jobs.results import ScheduleResult
from services.jobs.state import HistoryEntry, Role, State
from services.jobs.transitions import Transitions
from services.store.queries import decode_cursor, encode_cursor


class MemoryBulkStore:
    def __init__(self, clock: Clock) -> None:
        self.clock = clock
        self.jobs: dict[str, Job] = {}
        self.rules = Transitions()
        self.snapshots: dict[datetime, dict[str, Job]] = {}

    def put(self, job: Job) -> None:
        self.jobs[job.job_id] = job

    def get(self, job_id: str) -> Job | None:
        return self.jobs.get(job_id)

    def count_matching(self, job_filter: JobFilter) -> tuple[int, datetime]:
        # Each preview gets its own read time, and the jobs as they were then.
        read_time = self.clock.now() + timedelta(microseconds=len(self.snapshots))
        self.snapshots[read_time] = dict(self.jobs)
        return sum(job_filter.matches(j) for j in self.jobs.values()), read_time

    def matching_page(
        self, job_filter: JobFilter, *, read_time: datetime | None, cursor: str | None, limit: int
    ) -> MatchPage:
        # As the store pages: `limit` documents of the query's part of the filter (state,
        # action, due range), then the read side's part (subject prefix, producer) on them.
        queried = dataclasses.replace(job_filter, subject_prefix=None, producer=None)
        jobs = sorted(
            (
                j
                for j in (self.snapshots[read_time] if read_time else self.jobs).values()
                if queried.matches(j)
            ),
            key=lambda j: (j.due_at, j.job_id),
        )
        if cursor:
            after = decode_cursor(cursor)
            jobs = [j for j in jobs if (j.due_at, j.job_id) > after]
        page, more = jobs[:limit], len(jobs) > limit
        matching = tuple(j for j in page if job_filter.matches(j))
        cursors = tuple(encode_cursor(j.due_at, j.job_id) for j in matching)
        next_cursor = encode_cursor(page[-1].due_at, page[-1].job_id) if more else None
        return MatchPage(matching, cursors, next_cursor, len(jobs[: limit + 1]))

    def _held(self, job_id: str) -> Job:
        job = self.jobs.get(job_id)
        if job is None:
            raise JobNotFound(job_id)
        return job

    def cancel(self, job_id: str, reason: str, by: str) -> Job:
        job = self.rules.cancel(self._held(job_id), reason, by, self.clock.now())
        self.jobs[job_id] = job
        return job

    def reschedule(self, job_id: str, due_at: datetime, reason: str, by: str) -> Job:
        job = self.rules.reschedule(self._held(job_id), due_at, reason, by, self.clock.now())
        self.jobs[job_id] = job
        return job

    def schedule(
        self, new_job: NewJob, *, by: str = "application", producer: str | None = None
    ) -> ScheduleResult:
        if new_job.job_id in self.jobs:
            return ScheduleResult(self.jobs[new_job.job_id], False)
        now = self.clock.now()
        created = HistoryEntry(now, None, State.DEFERRED, f"{Role.APPLICATION}:{by}", "scheduled")
        job = Job.create(new_job.validated(), now, (created,)).replaced(producer=producer)
        self.jobs[job.job_id] = job
        return ScheduleResult(job, True)
