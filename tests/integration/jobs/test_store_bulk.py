"""Actions over a filter on the emulator (services/jobs/bulk.py over the store's Selections and
its single-job operations): the preview's count is exactly the set acted on, each job changed
whole with the operator in its history, a stop between batches leaves the rest untouched."""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from datetime import timedelta

import pytest
from google.cloud import firestore

from services.jobs import schema
from services.jobs.bulk import Batch, BulkKind, Change, JobFilter, Progress, run_batch
from services.jobs.clock import FakeClock
from services.jobs.errors import ValidationError
from services.jobs.record import Job
from services.jobs.state import State
from services.store.job_store import FirestoreJobStore
from tests.integration.jobs.conftest import T0, new_job

OPERATOR = "console:ops@example.com"


def run_all(
    store: FirestoreJobStore, job_filter: JobFilter, change: Change, clock: FakeClock, limit: int
) -> tuple[Progress, list[Batch]]:
    count, read_time = store.count_matching(job_filter)
    progress = Progress(count)
    batches = []
    cursor = None
    while True:
        batch = run_batch(
            store,
            job_filter,
            change,
            by=OPERATOR,
            operation="op1",
            read_time=read_time,
            cursor=cursor,
            limit=limit,
            now=clock.now(),
        )
        progress.add(batch)
        batches.append(batch)
        if batch.done:
            return progress, batches
        cursor = batch.next_cursor


def states(store: FirestoreJobStore, ids: list[str]) -> set[State]:
    return {job.state for job in (store.get(i) for i in ids) if job is not None}


def test_a_bulk_cancel_touches_exactly_the_jobs_its_preview_counted(
    store: FirestoreJobStore, clock: FakeClock, seed: Callable[..., list[str]]
) -> None:
    inside = seed(230, T0 + timedelta(hours=2), prefix="in")
    before = seed(20, T0 + timedelta(minutes=30), prefix="early")
    job_filter = JobFilter(
        State.DEFERRED, due_from=T0 + timedelta(hours=1), due_before=T0 + timedelta(hours=3)
    )
    progress, batches = run_all(store, job_filter, Change(BulkKind.CANCEL, "spam"), clock, 100)
    assert (progress.expected, progress.changed, progress.skipped) == (230, 230, 0)
    assert len(batches) == 3
    assert states(store, inside) == {State.CANCELLED}
    assert states(store, before) == {State.DEFERRED}
    job = store.get(inside[7])
    assert job is not None and job.history[-1].by == f"operator:{OPERATOR}"
    assert "spam (bulk cancel op1)" in job.history[-1].reason


def test_jobs_scheduled_after_the_preview_are_not_touched(
    store: FirestoreJobStore, clock: FakeClock, seed: Callable[..., list[str]]
) -> None:
    old = seed(10, T0, prefix="old")
    job_filter = JobFilter(State.DEFERRED)
    count, read_time = store.count_matching(job_filter)
    new = seed(5, T0, prefix="new")
    batch = run_batch(
        store,
        job_filter,
        Change(BulkKind.CANCEL, "x"),
        by=OPERATOR,
        operation="op",
        read_time=read_time,
        cursor=None,
        limit=100,
        now=clock.now(),
    )
    assert (count, len(batch.changed), batch.done) == (10, 10, True)
    assert states(store, old) == {State.CANCELLED} and states(store, new) == {State.DEFERRED}


def test_a_stop_midway_leaves_every_job_cancelled_or_untouched(
    store: FirestoreJobStore, clock: FakeClock, seed: Callable[..., list[str]]
) -> None:
    ids = seed(50, T0)
    job_filter = JobFilter(State.DEFERRED)
    _, read_time = store.count_matching(job_filter)
    asked = iter(range(1000))
    batch = run_batch(
        store,
        job_filter,
        Change(BulkKind.CANCEL, "x"),
        by=OPERATOR,
        operation="op",
        read_time=read_time,
        cursor=None,
        limit=50,
        now=clock.now(),
        stop=lambda: next(asked) >= 17,
    )
    assert batch.stopped and len(batch.changed) == 17
    jobs = [store.get(i) for i in ids]
    cancelled = [j for j in jobs if j and j.state is State.CANCELLED]
    assert len(cancelled) == 17 and all(
        j.history[-1].by == f"operator:{OPERATOR}" for j in cancelled
    )
    assert (
        sum(
            1
            for j in jobs
            if j and j.state is State.DEFERRED and not any(OPERATOR in h.by for h in j.history)
        )
        == 33
    )
    # The stop's cursor resumes after the last job handled: the rest, once each.
    rest = run_batch(
        store,
        job_filter,
        Change(BulkKind.CANCEL, "x"),
        by=OPERATOR,
        operation="op",
        read_time=read_time,
        cursor=batch.next_cursor,
        limit=50,
        now=clock.now(),
    )
    assert (len(rest.changed), len(rest.skipped), rest.done) == (33, 0, True)


def test_reschedule_by_an_offset_and_subject_prefix_read_side(
    store: FirestoreJobStore, clock: FakeClock
) -> None:
    for job_id in ("cat-1", "cat-2", "dog-1"):
        store.schedule(new_job(job_id, T0 + timedelta(hours=1)))
    job_filter = JobFilter(State.DEFERRED, subject_prefix="media-cat")
    assert store.count_matching(job_filter)[0] == 2
    change = Change(BulkKind.RESCHEDULE, "later", offset=timedelta(hours=2))
    progress, _ = run_all(store, job_filter, change, clock, 1)
    assert progress.changed == 2
    assert [store.get(i).due_at for i in ("cat-1", "dog-1")] == [  # type: ignore[union-attr]
        T0 + timedelta(hours=3),
        T0 + timedelta(hours=1),
    ]


def test_replay_schedules_each_failed_job_again_once(
    store: FirestoreJobStore, clock: FakeClock, firestore_client: firestore.Client
) -> None:
    for job_id in ("f-1", "f-2"):
        job = Job.create(new_job(job_id).validated(), clock.now())
        failed = dataclasses.replace(job, state=State.FAILED)
        firestore_client.collection(schema.JOBS).document(job_id).set(failed.to_document())
    job_filter = JobFilter(State.FAILED)
    change = Change(BulkKind.REPLAY, "storage is back")
    first, _ = run_all(store, job_filter, change, clock, 10)
    again, _ = run_all(store, job_filter, change, clock, 10)  # the same operation twice
    assert first.changed == again.changed == 2
    replay = store.get("f-1.replay-op1")
    assert replay is not None and replay.state is State.DEFERRED and replay.subject == "media-f-1"
    assert OPERATOR in replay.history[0].by
    assert store.count_matching(JobFilter(State.DEFERRED))[0] == 2


def test_a_kind_refuses_a_state_it_cannot_move(store: FirestoreJobStore, clock: FakeClock) -> None:
    with pytest.raises(ValidationError, match="state: reschedule runs over deferred"):
        run_batch(
            store,
            JobFilter(State.ENQUEUED),
            Change(BulkKind.RESCHEDULE, "x", to=T0),
            by=OPERATOR,
            operation="op",
            read_time=clock.now(),
            cursor=None,
            now=clock.now(),
        )
