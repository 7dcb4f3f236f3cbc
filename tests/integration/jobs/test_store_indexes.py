"""The queries the store really runs are exactly the shapes the index test enumerates, and
every one is served by a declared index (the conftest observer also checks each as it runs)."""

from __future__ import annotations

from datetime import timedelta

from google.cloud import firestore

from services.jobs import schema
from services.jobs.clock import FakeClock
from services.jobs.state import State
from services.jobs.store import FirestoreJobStore
from tests.integration.jobs.conftest import QueryLog, new_job
from tests.unit.jobs.test_indexes import every_store_query


def test_every_query_the_store_runs_is_an_enumerated_and_served_shape(
    store: FirestoreJobStore,
    clock: FakeClock,
    query_log: QueryLog,
    firestore_client: firestore.Client,
) -> None:
    for n in range(3):
        store.schedule(new_job(f"j{n}"))
    now = clock.now()
    store.claim_due(now, "run-1", 2)
    # JOBS_SHARDS > 1 claims with one query per shard.
    sharded = FirestoreJobStore(firestore_client, clock, query_observer=query_log, shards=2)
    sharded.claim_due(now, "run-1", 2)
    store.reclaim_expired(now, timedelta(minutes=1), 10, "run-2")
    store.stats(now, timedelta(minutes=1))
    store.backlog(now, timedelta(minutes=1), timedelta(days=1))
    for state in (None, *State):
        page = store.list_jobs(state=state, limit=1)
        if page.next_cursor:
            store.list_jobs(state=state, limit=1, cursor=page.next_cursor)
        store.list_jobs(state=state, due_before=now)
    store.list_jobs(overdue_at=now)
    store.list_jobs(claimed_before=now)

    observed = {spec.shape for spec in query_log.specs}
    enumerated = {spec.shape for spec in every_store_query()}
    assert observed == enumerated
    assert all(schema.is_served(shape) for shape in observed)
