"""Every query shape the store builds is served by an index declared in schema.INDEXES.

The store builds all its queries through the QuerySpec builders below (and the integration
suite records, through the store's query observer, that it runs nothing else).
"""

import itertools
from datetime import UTC, datetime

import pytest

from services.jobs import schema
from services.jobs.errors import ValidationError
from services.jobs.queries import (
    QuerySpec,
    due_query,
    enqueued_query,
    expired_claims_query,
    expired_leases_query,
    list_query,
    state_query,
)
from services.jobs.state import State

T = datetime(2026, 1, 1, tzinfo=UTC)


def every_store_query() -> list[QuerySpec]:
    specs = [
        due_query(T, 100),
        due_query(T, None),
        due_query(T, 100, shard=3),  # claim_due with JOBS_SHARDS > 1
        expired_claims_query(T, 10),
        expired_claims_query(T, None),
        expired_leases_query(T, 10),
        expired_leases_query(T, None),
        enqueued_query(None, 1),
        enqueued_query(T, None),
        *(state_query(state) for state in State),
    ]
    for state, time_filter, after in itertools.product(
        [None, *State], ["due_before", "overdue_at", "claimed_before", None], [None, (T, "x")]
    ):
        kwargs = {time_filter: T} if time_filter else {}
        try:
            specs.append(list_query(state=state, after=after, **kwargs))  # type: ignore[arg-type]
        except ValidationError:
            continue  # refused combinations never reach Firestore
    return specs


def _shape_id(spec: QuerySpec) -> str:
    # Sorted, not the frozenset's repr: that order changes with each process's hash seed, and
    # pytest-xdist refuses workers whose collected test IDs differ.
    shape = spec.shape
    ordered = ",".join(f"{f.path} {f.order}" for f in shape.ordered)
    return f"{shape.collection}:{'+'.join(sorted(shape.equality))}|{ordered}"


@pytest.mark.parametrize("spec", every_store_query(), ids=_shape_id)
def test_each_store_query_is_served_by_a_declared_index(spec: QuerySpec) -> None:
    assert schema.is_served(spec.shape), f"no declared index serves {spec.shape}"


def test_every_declared_index_serves_some_store_query() -> None:
    used = {schema.serving_index(spec.shape) for spec in every_store_query()}
    assert set(schema.INDEXES) <= used


def test_a_query_without_its_index_is_reported_unserved() -> None:
    shape = due_query(T, 1).shape
    assert schema.needs_composite_index(shape)
    without = tuple(i for i in schema.INDEXES if i.field_paths != ("state", "due_at"))
    assert not schema.is_served(shape, without)


def test_single_field_and_equality_only_queries_need_no_composite_index() -> None:
    assert not schema.needs_composite_index(state_query(State.DEFERRED).shape)
    assert not schema.needs_composite_index(list_query(due_before=T).shape)
    assert not schema.needs_composite_index(list_query().shape)


def test_a_descending_order_is_not_served_by_an_ascending_index() -> None:
    shape = schema.QueryShape(
        schema.JOBS, frozenset({"state"}), (schema.IndexField("due_at", "DESCENDING"),)
    )
    assert not schema.is_served(shape)


def test_list_refuses_filter_combinations_no_index_serves() -> None:
    with pytest.raises(ValidationError, match="at most one"):
        list_query(due_before=T, claimed_before=T)
    with pytest.raises(ValidationError, match="overdue_at lists deferred"):
        list_query(state=State.RUNNING, overdue_at=T)
    with pytest.raises(ValidationError, match="claimed_before lists claimed"):
        list_query(state=State.DEFERRED, claimed_before=T)


def test_ttl_fields_cover_jobs_and_idempotency() -> None:
    assert schema.TtlField(schema.JOBS, "expire_at") in schema.TTL_FIELDS
    assert schema.TtlField(schema.IDEMPOTENCY, "expire_at") in schema.TTL_FIELDS


def test_the_stale_enqueued_count_needs_the_state_enqueued_at_index() -> None:
    shape = enqueued_query(T, None).shape
    assert schema.needs_composite_index(shape)
    without = tuple(i for i in schema.INDEXES if i.field_paths != ("state", "enqueued_at"))
    assert not schema.is_served(shape, without)
