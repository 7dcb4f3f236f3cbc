"""Every query shape the store builds, with JOBS_SHARDS = 1 and > 1, is served by the index set
schema declares for that N, and every declared index serves some query.

The store builds all its queries through the QuerySpec builders below (and the integration
suite records, through the store's query observer, that it runs nothing else).
"""

import itertools
from datetime import UTC, datetime

import pytest

from services.jobs import schema
from services.jobs.errors import ValidationError
from services.jobs.lanes import ClaimFilter
from services.jobs.record import SCHEMA_VERSION
from services.jobs.state import State
from services.store.queries import (
    QuerySpec,
    all_jobs_query,
    due_probe_query,
    due_query,
    enqueued_query,
    expired_claims_query,
    expired_leases_query,
    in_range_query,
    list_query,
    live_query,
    misfiled_due_queries,
    newer_schema_query,
    out_of_range_query,
    pending_action_query,
    state_query,
)

T = datetime(2026, 1, 1, tzinfo=UTC)
SHARD_COUNTS = (1, 4)


def every_store_query(shards: int = 1) -> list[QuerySpec]:
    """Every query the store builds with `shards` shards (with N > 1, shard 3's)."""
    k = None if shards == 1 else 3
    specs = [
        due_query(T, 100, k),
        due_query(T, None, k),
        expired_claims_query(T, 10, k),
        expired_claims_query(T, None, k),
        expired_leases_query(T, 10, k),
        expired_leases_query(T, None, k),
        enqueued_query(None, 1, k),
        enqueued_query(T, None, k),
        *misfiled_due_queries(20, k),
        *([due_probe_query(T, (0, 1, 2, 3))] if k is not None else []),
        # The claim lanes (services/jobs/lanes.py): one action's, and the rest.
        due_query(T, 100, k, ClaimFilter(action="media.delete_source")),
        due_query(T, 100, k, ClaimFilter(exclude=("media.delete_source", "trials.expire"))),
        *(
            [due_probe_query(T, (0, 1, 2, 3), ClaimFilter(action="media.delete_source"))]
            if k is not None
            else []
        ),
        # The target lanes: one target's, and its action's other targets (not-in).
        due_query(T, 100, k, ClaimFilter(action="http.request", target="trials")),
        due_query(T, 100, k, ClaimFilter(action="http.request", exclude_targets=("trials",))),
        *(
            [due_probe_query(T, (0, 1, 2, 3), ClaimFilter(action="http.request", target="b"))]
            if k is not None
            else []
        ),
        *(state_query(state) for state in State),
        # The shard census (services/jobs/layout.py), which N = 1 never takes.
        *([live_query(), out_of_range_query(shards), in_range_query(shards)] if k else []),
        all_jobs_query(),
        newer_schema_query(SCHEMA_VERSION),
        pending_action_query("media.delete_source"),
    ]
    for state, time_filter, after in itertools.product(
        [None, *State], ["due_before", "overdue_at", "claimed_before", None], [None, (T, "x")]
    ):
        kwargs = {time_filter: T} if time_filter else {}
        try:
            specs.append(list_query(state=state, after=after, shard=k, **kwargs))  # type: ignore[arg-type]
        except ValidationError:
            continue  # refused combinations never reach Firestore
    return specs


def _shape_id(spec: QuerySpec) -> str:
    # Sorted, not the frozenset's repr: that order changes with each process's hash seed, and
    # pytest-xdist refuses workers whose collected test IDs differ.
    shape = spec.shape
    ordered = ",".join(f"{f.path} {f.order}" for f in shape.ordered)
    return f"{shape.collection}:{'+'.join(sorted(shape.equality))}|{ordered}"


def _served(shape: schema.QueryShape, shards: int) -> bool:
    indexes, exemptions = schema.index_definitions(shards)
    return schema.is_served(shape, indexes, exemptions)


@pytest.mark.parametrize("shards", SHARD_COUNTS)
@pytest.mark.parametrize("spec", every_store_query(), ids=_shape_id)
def test_each_unsharded_store_query_is_served_at_n_1_only(spec: QuerySpec, shards: int) -> None:
    # N = 1's timestamp queries lose their indexes above 1: a deployment at N > 1 must not run
    # them (the state counts order on nothing and run at every N).
    expected = shards == 1 or spec.shape in schema.COMMON_SHAPES
    assert _served(spec.shape, shards) == expected, spec.shape


@pytest.mark.parametrize("shards", SHARD_COUNTS)
@pytest.mark.parametrize("spec", every_store_query(4), ids=_shape_id)
def test_each_sharded_store_query_is_served_at_every_n(spec: QuerySpec, shards: int) -> None:
    # The sharded indexes exist at N = 1 already, so raising N never meets a missing index.
    assert _served(spec.shape, shards), spec.shape


@pytest.mark.parametrize("shards", SHARD_COUNTS)
def test_the_store_queries_are_the_declared_shapes(shards: int) -> None:
    built = {spec.shape for spec in every_store_query(shards)}
    assert built == {s for s in schema.query_shapes(shards) if s.collection == schema.JOBS}


@pytest.mark.parametrize("shards", SHARD_COUNTS)
def test_every_declared_index_serves_some_query_of_that_n_or_above(shards: int) -> None:
    indexes = schema.composite_indexes(shards)
    used = {schema.serving_index(s.shape, indexes) for s in every_store_query(shards)}
    sharded = [s.shape for s in every_store_query(4) if schema.needs_composite_index(s.shape)]
    waiting = {schema.serving_index(shape, indexes) for shape in sharded}
    assert set(indexes) <= used | waiting
    assert None not in waiting  # each sharded query has its index at this N


def test_above_one_shard_every_timestamp_index_has_the_shard_before_the_timestamp() -> None:
    timestamps = {"due_at", "claim.claimed_at", "lease_until", "enqueued_at"}
    for index in schema.composite_indexes(4):
        paths = index.field_paths
        # The timestamp ends the index, or comes just before `action` or `params.target` (the
        # not-in of the rest claim lane, or of an action's lane leaving its laned targets out,
        # which Firestore orders after the due_at order): either way the shard is before it,
        # so it is N key ranges, not one hot spot.
        stamp = len(paths) - 1 if paths[-1] in timestamps else len(paths) - 2
        assert paths[stamp] in timestamps, paths
        assert paths[stamp + 1 :] in ((), ("action",), (schema.TARGET,)), paths
        assert schema.SHARD in paths[:stamp], paths
    exempt = {(e.collection, e.field) for e in schema.exemptions(4)}
    # ... and no single-field index of a timestamp is left: each is one hot range.
    for name in ("due_at", "claim", "lease_until", "enqueued_at", "created_at", "updated_at"):
        assert (schema.JOBS, name) in exempt, name
    assert (schema.JOBS, "due_at") not in {(e.collection, e.field) for e in schema.exemptions(1)}


def test_one_shard_keeps_every_index_it_had() -> None:
    assert set(schema.UNSHARDED_INDEXES) <= set(schema.composite_indexes(1))
    assert not set(schema.UNSHARDED_INDEXES) & set(schema.composite_indexes(2))
    assert schema.composite_indexes(1) == schema.INDEXES
    assert schema.exemptions(1) == schema.INDEX_EXEMPTIONS


def test_a_query_without_its_index_is_reported_unserved() -> None:
    shape = due_query(T, 1).shape
    assert schema.needs_composite_index(shape)
    without = tuple(i for i in schema.INDEXES if i.field_paths != ("state", "due_at"))
    assert not schema.is_served(shape, without)


def test_single_field_and_equality_only_queries_need_no_composite_index() -> None:
    assert not schema.needs_composite_index(state_query(State.DEFERRED).shape)
    assert not schema.needs_composite_index(list_query(due_before=T).shape)
    assert not schema.needs_composite_index(list_query().shape)
    assert schema.needs_composite_index(list_query(shard=0).shape)


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
