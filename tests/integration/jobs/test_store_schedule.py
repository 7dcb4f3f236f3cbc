"""Scheduling as documented: the same decision twice is a no-op whatever its due time, a
different payload under the same ID is a conflict naming the field, params are checked against
the action's schema, many jobs go in batches, and stats are read at one snapshot."""

from __future__ import annotations

import dataclasses
import threading
from datetime import timedelta
from typing import Any

import pytest
from google.cloud import firestore

from services.jobs import schema
from services.jobs.errors import ScheduleConflict, ValidationError
from services.jobs.model import NewJob
from services.jobs.results import ScheduleResult
from services.jobs.state import State
from services.store.job_store import FirestoreJobStore
from tests.integration.jobs.conftest import T0, new_job


@pytest.mark.builtin_emulator("billing counters")
def test_the_same_decision_with_another_due_time_returns_the_existing_job_unchanged(
    store: FirestoreJobStore, firestore_stats: Any
) -> None:
    first = store.schedule(new_job("j", T0 + timedelta(days=30)))
    firestore_stats.reset()
    # A retry of `--due +30d` a little later: a later instant, the same decision.
    again = store.schedule(new_job("j", T0 + timedelta(days=30, seconds=42)))
    assert (first.created, again.created) == (True, False)
    assert again.job == first.job
    assert again.job.due_at == T0 + timedelta(days=30)
    assert firestore_stats.get()["document_writes"] == 0


@pytest.mark.parametrize(
    ("change", "named"),
    [
        ({"subject": "media-other"}, "subject"),
        ({"params": {"bucket": "media-src", "object": "other.mp4"}}, "params.object"),
        ({"params": {"object": "media-j/source.mp4"}}, "params.bucket"),
        ({"max_attempts": 3}, "max_attempts"),
        ({"idempotency_key": "shared-key"}, "idempotency_key"),
    ],
)
def test_a_different_payload_under_the_same_id_is_a_conflict_naming_the_field(
    store: FirestoreJobStore, firestore_client: firestore.Client, change: Any, named: str
) -> None:
    store.schedule(new_job("j"))
    ref = firestore_client.collection(schema.JOBS).document("j")
    before = ref.get().update_time
    with pytest.raises(ScheduleConflict) as caught:
        store.schedule(dataclasses.replace(new_job("j"), **change))
    assert caught.value.fields == (named,)
    assert f"different {named};" in str(caught.value)
    assert ref.get().update_time == before


@pytest.mark.builtin_emulator("billing counters")
def test_params_that_do_not_fit_the_schema_are_refused_naming_the_field_with_nothing_written(
    store: FirestoreJobStore, firestore_client: firestore.Client, firestore_stats: Any
) -> None:
    firestore_stats.reset()
    bad = dataclasses.replace(new_job("j"), params={"objects": "[1,2"})
    with pytest.raises(ValidationError, match=r"params\.objects must be a list of strings"):
        store.schedule(bad)
    assert firestore_stats.get()["document_writes"] == 0
    assert list(firestore_client.collection(schema.JOBS).limit(1).stream()) == []


@pytest.mark.builtin_emulator("billing counters")
def test_schedule_many_reports_each_item_and_writes_new_ones_in_one_commit(
    store: FirestoreJobStore, firestore_stats: Any
) -> None:
    store.schedule(new_job("old"))
    conflicting = dataclasses.replace(new_job("clash"), subject="elsewhere")
    store.schedule(new_job("clash"))
    firestore_stats.reset()
    items = [
        new_job("a"),
        new_job("old", T0 + timedelta(days=1)),  # same decision, other due time
        dataclasses.replace(new_job("bad"), params={}),
        conflicting,
        new_job("b"),
        new_job("a"),  # twice in one call: compared with the first
    ]
    outcomes = store.schedule_many(items)
    kinds = [
        ("created" if o.created else "present") if isinstance(o, ScheduleResult) else type(o)
        for o in outcomes
    ]
    assert kinds == ["created", "present", ValidationError, ScheduleConflict, "created", "present"]
    counts = firestore_stats.get()
    # The optimistic batch of creates hit "old": it wrote nothing; one batched read, then one
    # batch with the two new jobs.
    assert counts["document_writes"] == 2
    assert counts["calls"].get("Commit", 0) == 2
    assert counts["calls"].get("BatchGetDocuments", 0) == 1
    assert store.get("a") is not None and store.get("b") is not None
    assert store.get("bad") is None


@pytest.mark.builtin_emulator("billing counters")
def test_schedule_many_of_new_jobs_reads_nothing_and_commits_once(
    store: FirestoreJobStore, firestore_stats: Any
) -> None:
    firestore_stats.reset()
    outcomes = store.schedule_many([new_job(f"j{n}") for n in range(300)])
    assert all(isinstance(o, ScheduleResult) and o.created for o in outcomes)
    counts = firestore_stats.get()
    assert (counts["document_reads"], counts["document_writes"]) == (0, 300)
    assert counts["calls"].get("Commit", 0) == 1


def test_concurrent_schedule_many_of_the_same_jobs_creates_each_once(
    firestore_client: firestore.Client, clock: Any
) -> None:
    jobs = [new_job(f"j{n}") for n in range(60)]
    results: list[list[Any]] = []

    def schedule() -> None:
        store = FirestoreJobStore(firestore_client, clock)
        results.append(store.schedule_many(jobs))

    threads = [threading.Thread(target=schedule) for _ in range(4)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert len(results) == 4
    for index in range(len(jobs)):
        outcomes = [r[index] for r in results]
        assert all(isinstance(o, ScheduleResult) for o in outcomes), outcomes
        assert sum(1 for o in outcomes if o.created) == 1


def test_schedule_many_refuses_more_than_one_batch(store: FirestoreJobStore) -> None:
    with pytest.raises(ValidationError, match="at most 500"):
        store.schedule_many([new_job(f"j{n}") for n in range(501)])


@pytest.mark.production_strict(
    "one read_time is one snapshot for every aggregation (docs/emulators.md, F11)"
)
def test_stats_counts_every_state_at_one_read_time_while_jobs_move(
    store: FirestoreJobStore, firestore_client: firestore.Client, seed: Any
) -> None:
    """Every count `stats` makes reads at the first count's `read_time`, which production
    serves as one consistent snapshot (https://cloud.google.com/firestore/docs/reference/rpc/
    google.firestore.v1#runaggregationqueryrequest), so a job moving mid-way is counted once."""
    ids = seed(400)
    moved = threading.Event()
    stop = threading.Event()

    def cancel_in_batches() -> None:
        # Real concurrent writers: deferred → cancelled, 20 documents per commit.
        jobs = firestore_client.collection(schema.JOBS)
        for start in range(0, len(ids), 20):
            if stop.is_set():
                return
            batch = firestore_client.batch()
            for job_id in ids[start : start + 20]:
                batch.update(jobs.document(job_id), {"state": State.CANCELLED.value})
            batch.commit()
            moved.set()

    mover = threading.Thread(target=cancel_in_batches)
    mover.start()
    totals = []
    try:
        moved.wait(10)
        while mover.is_alive():
            figures = store.stats(T0, timedelta(minutes=10))
            totals.append(sum(figures.per_state.values()))
            assert figures.read_time is not None
    finally:
        stop.set()
        mover.join()
    assert totals, "the mover finished before a single stats call"
    assert set(totals) == {len(ids)}


def test_a_new_job_is_scheduled_exactly_as_requested(store: FirestoreJobStore) -> None:
    result = store.schedule(
        NewJob("j", "media.delete_source", "m", T0, {"objects": ["m/a.mp4", "m/b.mp4"]})
    )
    assert result.created
    stored = store.get("j")
    assert stored is not None and dict(stored.params) == {"objects": ["m/a.mp4", "m/b.mp4"]}
