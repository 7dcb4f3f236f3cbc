"""`structured_query(spec)` is exactly the `StructuredQuery` the high-level client builds for the
same query (its `Query._to_protobuf`, the oracle here; services/ never calls it), for every
query builder of `queries.py`, sharded and not, with and without a cursor."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
from google.auth.credentials import AnonymousCredentials
from google.cloud import firestore
from google.cloud.firestore_v1.base_query import FieldFilter

from services.jobs.state import State
from services.store.queries import (
    QuerySpec,
    due_probe_query,
    due_query,
    enqueued_query,
    expired_claims_query,
    expired_leases_query,
    list_query,
    misfiled_due_queries,
    state_query,
    structured_query,
)

CLIENT = firestore.Client(project="p", credentials=AnonymousCredentials())
DOCUMENTS = "projects/p/databases/(default)/documents"
NOW = datetime(2026, 3, 1, 12, 0, 0, 123456, tzinfo=UTC)


def _client_query(spec: QuerySpec) -> Any:
    """The query as the store built it on the high-level client before it sent queries
    through the GAPIC client."""
    query: Any = CLIENT.collection(spec.collection)
    for field_path, value in spec.equals:
        if isinstance(value, tuple):
            query = query.where(filter=FieldFilter(field_path, "in", list(value)))
        else:
            query = query.where(filter=FieldFilter(field_path, "==", value))
    for field_path, op, value in spec.ranges:
        query = query.where(filter=FieldFilter(field_path, op, value))
    if spec.order_by:
        for field_path in spec.order_by:
            query = query.order_by(field_path)
        if spec.start_after is not None:
            query = query.order_by("__name__").start_after(list(spec.start_after))
    if spec.limit is not None:
        query = query.limit(spec.limit)
    return query


def _specs() -> list[QuerySpec]:
    specs = [due_probe_query(NOW, (0, 1, 2)), state_query(State.RUNNING)]
    for shard in (None, 3, (0, 1)):
        specs += [
            due_query(NOW, 100, shard),
            due_query(NOW, None, shard),
            expired_claims_query(NOW - timedelta(minutes=15), 50, shard),
            expired_leases_query(NOW, None, shard),
            enqueued_query(NOW, 10, shard),
            enqueued_query(None, 10, shard),
            *misfiled_due_queries(20, shard),
            list_query(limit=51, shard=shard),
            list_query(state=State.DEFERRED, due_before=NOW, limit=51, shard=shard),
            list_query(overdue_at=NOW, limit=51, after=(NOW, "job-9"), shard=shard),
            list_query(claimed_before=NOW, limit=51, after=(NOW, "job-9"), shard=shard),
        ]
    return specs


@pytest.mark.parametrize("spec", _specs(), ids=repr)
def test_every_query_is_the_one_the_high_level_client_builds(spec: QuerySpec) -> None:
    assert structured_query(spec, DOCUMENTS) == _client_query(spec)._to_protobuf()._pb


def test_an_equality_on_none_is_the_clients_is_null() -> None:
    spec = QuerySpec("jobs", equals=(("claim", None),))
    assert structured_query(spec, DOCUMENTS) == _client_query(spec)._to_protobuf()._pb


def test_the_backfills_id_ordered_pages_are_the_clients() -> None:
    from services.store.queries import NAME

    jobs = CLIENT.collection("jobs")
    base = jobs.where(filter=FieldFilter("state", "==", "deferred")).order_by(NAME).limit(500)
    first = QuerySpec("jobs", equals=(("state", "deferred"),), order_by=(NAME,), limit=500)
    after = QuerySpec(
        "jobs", equals=(("state", "deferred"),), order_by=(NAME,), limit=500, start_after=("j-7",)
    )
    assert structured_query(first, DOCUMENTS) == base._to_protobuf()._pb
    theirs = base.start_after({NAME: jobs.document("j-7")})._to_protobuf()._pb
    assert structured_query(after, DOCUMENTS) == theirs
