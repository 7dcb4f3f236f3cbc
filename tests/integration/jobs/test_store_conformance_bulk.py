"""One conformance suite for the bulk port (services/jobs/bulk.py `BulkStore`): the Firestore
store on the emulator and `MemoryBulkStore` (tests/unit/jobs/bulk_fake.py), which the bulk
logic's unit tests use, answer alike: the same preview count, the same pages and cursors, the
same jobs changed and skipped, the same history."""

from __future__ import annotations

from collections.abc import Iterator
from datetime import timedelta

import pytest
from google.cloud import firestore

from services.jobs.bulk import BulkKind, BulkStore, Change, JobFilter, run_batch
from services.jobs.clock import FakeClock
from services.jobs.state import State
from services.store.job_store import FirestoreJobStore
from tests.integration.jobs.conftest import T0, new_job
from tests.unit.jobs.bulk_fake import MemoryBulkStore

BY = "ops@example.com"


@pytest.fixture(params=["firestore", "memory"])
def store(request: pytest.FixtureRequest) -> Iterator[BulkStore]:
    clock = FakeClock(T0)
    if request.param == "memory":
        yield MemoryBulkStore(clock)
        return
    client: firestore.Client = request.getfixturevalue("firestore_client")
    yield FirestoreJobStore(client, clock)


def plant(store: BulkStore) -> None:
    # Due times out of ID order and two at the same instant: the (due_at, ID) order decides.
    for n, minutes in enumerate([50, 10, 30, 30, 20, 40, 10, 60]):
        kind = "cat" if n % 2 else "dog"
        job = new_job(f"{kind}-{n}", T0 + timedelta(minutes=minutes))
        store.schedule(job, by="app", producer="alice" if n < 6 else "bob")


def test_preview_counts_agree(store: BulkStore) -> None:
    plant(store)
    assert store.count_matching(JobFilter(State.DEFERRED))[0] == 8
    assert store.count_matching(JobFilter(State.DEFERRED, subject_prefix="media-cat"))[0] == 4
    assert store.count_matching(JobFilter(State.DEFERRED, producer="bob"))[0] == 2
    window = JobFilter(
        State.DEFERRED, due_from=T0 + timedelta(minutes=20), due_before=T0 + timedelta(minutes=50)
    )
    assert store.count_matching(window)[0] == 4


def test_pages_and_changes_agree(store: BulkStore) -> None:
    plant(store)
    # Pages of 2 documents of the query (state), then the producer checked on them: in
    # (due_at, ID) order cat-1 dog-6 | dog-4 cat-3 | dog-2 cat-5 | dog-0 cat-7, bob's left out.
    job_filter = JobFilter(State.DEFERRED, producer="alice")
    _, read_time = store.count_matching(job_filter)
    seen: list[tuple[str, ...]] = []
    cursor = None
    change = Change(BulkKind.RESCHEDULE, "later", offset=timedelta(hours=1))
    while True:
        batch = run_batch(
            store,
            job_filter,
            change,
            by=BY,
            operation="op",
            read_time=read_time,
            cursor=cursor,
            limit=2,
            now=T0,
        )
        seen.append(batch.changed)
        if batch.done:
            break
        cursor = batch.next_cursor
    assert [ids for ids in seen if ids] == [
        ("cat-1",),
        ("dog-4", "cat-3"),
        ("dog-2", "cat-5"),
        ("dog-0",),
    ]
    job = store.reschedule("cat-1", T0 + timedelta(days=1), "again", BY)
    assert [h.by for h in job.history] == ["application:app", f"operator:{BY}", f"operator:{BY}"]
    assert "later (bulk reschedule op)" in job.history[1].reason
