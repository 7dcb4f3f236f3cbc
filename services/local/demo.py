"""The demo the local stack seeds: a media bucket and jobs in the three interesting situations.

Three jobs are due now (each deletes one source file), one is due in 30 days (it stays
deferred: the scan only claims what is due), and one was cancelled by an operator before it
ran (its file must survive). `DemoStatus` says whether the due ones are done and the other two
are untouched, which is what `--exit-when-done` and the smoke test wait for.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

from services.jobs.ids import derive_job_id
from services.jobs.media import MEDIA_DELETE_SOURCE
from services.jobs.model import NewJob
from services.jobs.state import State

logger = logging.getLogger(__name__)

ACTION = MEDIA_DELETE_SOURCE  # the demo deletes media source files
BUCKET = "deferred-jobs-demo-media"
DUE_NOW = 3
LATER = timedelta(days=30)
OPERATOR = "local-demo"


@dataclass(frozen=True)
class DemoJob:
    """One seeded job: its ID, the object it deletes, and what should become of it."""

    job_id: str
    subject: str
    object_name: str
    expected: State


@dataclass(frozen=True)
class Demo:
    bucket: str
    jobs: tuple[DemoJob, ...]

    @property
    def due(self) -> tuple[DemoJob, ...]:
        return tuple(j for j in self.jobs if j.expected is State.COMPLETED)


@dataclass(frozen=True)
class DemoStatus:
    """Where the demo jobs are; `done` once every due one completed and the others held."""

    states: dict[str, State]
    remaining_objects: frozenset[str]
    demo: Demo

    @property
    def completed(self) -> int:
        return sum(1 for j in self.demo.due if self.states.get(j.job_id) is State.COMPLETED)

    @property
    def done(self) -> bool:
        return all(self.states.get(j.job_id) is j.expected for j in self.demo.jobs)

    @property
    def deleted_objects(self) -> int:
        return sum(1 for j in self.demo.due if j.object_name not in self.remaining_objects)


def plan_demo(bucket: str = BUCKET) -> Demo:
    """The demo's jobs; IDs are derived from (action, subject, decision) as applications do."""
    jobs = [_job(f"media-{n}", f"retention-{n}", State.COMPLETED) for n in range(1, DUE_NOW + 1)]
    jobs.append(_job("media-later", "retention-later", State.DEFERRED))
    jobs.append(_job("media-kept", "retention-withdrawn", State.CANCELLED))
    return Demo(bucket, tuple(jobs))


def seed_demo(demo: Demo, store: Any, storage_client: Any, now: datetime) -> None:
    """Create the bucket and one source file per job, then schedule (and cancel) the jobs."""
    bucket = storage_client.bucket(demo.bucket)
    if not bucket.exists():
        bucket = storage_client.create_bucket(demo.bucket)
    for job in demo.jobs:
        bucket.blob(job.object_name).upload_from_string(b"\x00" * 1024, content_type="video/mp4")
    for job in demo.jobs:
        due_at = now + LATER if job.expected is State.DEFERRED else now
        store.schedule(
            NewJob(job.job_id, ACTION, job.subject, due_at, params={"object": job.object_name}),
            by=OPERATOR,
        )
        if job.expected is State.CANCELLED:
            store.cancel(job.job_id, reason="retention decision withdrawn", by=OPERATOR)
    logger.info("seeded %d demo jobs in bucket %s", len(demo.jobs), demo.bucket)


def demo_status(demo: Demo, store: Any, storage_client: Any) -> DemoStatus:
    states: dict[str, State] = {}
    for job in demo.jobs:
        record = store.get(job.job_id)
        if record is not None:
            states[job.job_id] = record.state
    names = frozenset(b.name for b in storage_client.list_blobs(demo.bucket))
    return DemoStatus(states, names, demo)


def describe_jobs(jobs: Sequence[DemoJob]) -> list[str]:
    return [f"{j.job_id}  ({j.object_name} → expect {j.expected.value})" for j in jobs]


def _job(subject: str, decision: str, expected: State) -> DemoJob:
    return DemoJob(
        job_id=derive_job_id(ACTION, subject, decision),
        subject=subject,
        object_name=f"{subject}/source.mp4",
        expected=expected,
    )
