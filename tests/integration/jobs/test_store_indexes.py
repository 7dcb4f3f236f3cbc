"""The queries the store really runs, with JOBS_SHARDS 1 and 4, are exactly the jobs query
shapes schema.query_shapes(N) declares, each served by that N's index set: the conftest
observer checks each as it runs, and the emulator, serving the project with that N's indexes
and exemptions (strict mode), refuses any query they do not serve."""

from __future__ import annotations

from collections.abc import Callable
from datetime import timedelta

import pytest
from google.cloud import firestore

from services.jobs import schema
from services.jobs.clock import FakeClock
from services.jobs.lanes import ClaimFilter
from services.jobs.state import State
from services.store.job_store import FirestoreJobStore
from tests.integration.jobs.conftest import QueryLog, new_job
from tests.unit.jobs.test_indexes import every_store_query


@pytest.mark.parametrize("shards", [1, 4])
def test_every_query_the_store_runs_is_a_declared_and_served_shape(
    clock: FakeClock,
    firestore_client: firestore.Client,
    shard_indexes: Callable[[int], None],
    shards: int,
) -> None:
    shard_indexes(shards)
    query_log = QueryLog(shards)
    store = FirestoreJobStore(firestore_client, clock, query_observer=query_log, shards=shards)
    for n in range(8):  # enough due that every claim below finds one to claim
        store.schedule(new_job(f"j{n}"))
    # Three http.request jobs, one of target `trials` (as a producer's would read, raw).
    for n, target in ((5, "trials"), (6, "billing"), (7, "billing")):
        firestore_client.collection(schema.JOBS).document(f"j{n}").update(
            {"action": "http.request", "params": {"target": target, "path": "/hooks"}}
        )
    now = clock.now()
    # The target lanes: one target's, its action's other targets' (not-in), and the rest with
    # them as a further part.
    store.claim_due(now, "run-1", 1, claims=ClaimFilter(action="http.request", target="trials"))
    others = ClaimFilter(action="http.request", exclude_targets=("trials",))
    store.claim_due(now, "run-1", 1, claims=others)
    store.claim_due(now, "run-1", 2, claims=ClaimFilter(exclude=("http.request",), also=(others,)))
    store.claim_due(now, "run-1", 2)
    # The claim lanes (services/jobs/lanes.py): one action's, and the rest (not-in).
    store.claim_due(now, "run-1", 1, claims=ClaimFilter(action="media.delete_source"))
    store.claim_due(now, "run-1", 1, claims=ClaimFilter(exclude=("trials.expire",)))
    store.reclaim_expired(now, timedelta(minutes=1), 10, "run-2", enqueued_timeout=timedelta(1))
    store.newer_records(store.stats(now, timedelta(minutes=1)))
    store.backlog(now, timedelta(minutes=1), timedelta(days=1))
    store.pending_by_action(["media.delete_source"])  # jobsctl actions
    for state in (None, *State):
        page = store.list_jobs(state=state, limit=1)
        if page.next_cursor:
            store.list_jobs(state=state, limit=1, cursor=page.next_cursor)
        store.list_jobs(state=state, due_before=now)
    store.list_jobs(overdue_at=now)
    store.list_jobs(claimed_before=now)

    observed = {spec.shape for spec in query_log.specs}
    enumerated = {spec.shape for spec in every_store_query(shards)}
    declared = {s for s in schema.query_shapes(shards) if s.collection == schema.JOBS}
    assert observed == enumerated == declared
    if shards > 1:
        # No jobs query that orders or ranges on a timestamp goes without `shard == k` (the
        # shard census, services/jobs/layout.py, orders and ranges on `shard` itself first;
        # the newer-record count ranges on `schema_version`, a small integer, not a time).
        assert all(
            schema.SHARD in s.equality or s.ordered[0].path in (schema.SHARD, "schema_version")
            for s in observed
            if s.ordered
        )
        assert set(schema.CENSUS_SHAPES) <= observed
