"""The queries the store runs, as data: `QuerySpec` values a test can check against the
declared indexes (`schema.composite_indexes(N)`) without running them, the listing cursor,
and `structured_query`: a `QuerySpec` as the `StructuredQuery` Firestore runs.

Every builder of a query that orders or ranges on a timestamp takes `shard`: None for the
unsharded query JOBS_SHARDS = 1 runs, k for shard k's part of it with N > 1.
"""

from __future__ import annotations

import base64
import binascii
import json
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

from google.cloud.firestore_v1.types import query as query_types

from services.jobs import schema
from services.jobs.errors import ValidationError
from services.jobs.lanes import EVERYTHING, ClaimFilter
from services.jobs.shard import Part
from services.jobs.state import State
from services.store.encoding import encode_value

NAME = "__name__"  # the document's name: a field to order by


@dataclass(frozen=True)
class QuerySpec:
    """One query the store runs: equalities, at most one range field, order, limit, cursor."""

    collection: str
    equals: tuple[tuple[str, Any], ...] = ()
    ranges: tuple[tuple[str, str, Any], ...] = ()  # (field, operator, value)
    # Ascending; the implicit __name__ tiebreak follows (or is named last: ID order alone).
    order_by: tuple[str, ...] = ()
    limit: int | None = None
    start_after: tuple[Any, ...] | None = None  # the other order_by values, then the doc ID
    # `field not-in [values]`: an inequality, ordered after the explicit orders and the ranges.
    # With `due_at <=` that is inequalities on two fields, which Firestore serves from a
    # composite index (https://firebase.google.com/docs/firestore/query-data/multiple-range-fields).
    excludes: tuple[tuple[str, tuple[Any, ...]], ...] = ()

    @property
    def shape(self) -> schema.QueryShape:
        # One field once, however many bounds it has (a range `>= a and < b` is one field).
        ordered = dict.fromkeys(self.order_by)
        ordered |= dict.fromkeys(f for f, _, _ in self.ranges)
        ordered |= dict.fromkeys(f for f, _ in self.excludes)
        return schema.QueryShape(
            self.collection,
            frozenset(f for f, _ in self.equals),
            tuple(schema.IndexField(f) for f in ordered),
        )


def _in_shard(equals: tuple[tuple[str, Any], ...], shard: Part) -> tuple[tuple[str, Any], ...]:
    """`equals` with `shard == k` first (a tuple of shards: `shard in [...]`), or unchanged for
    shard None (what JOBS_SHARDS = 1 runs, so records without a `shard` field are found too)."""
    return equals if shard is None else ((schema.SHARD, shard), *equals)


def due_probe_query(
    now: datetime, shards: tuple[int, ...], claims: ClaimFilter = EVERYTHING
) -> QuerySpec:
    """One deferred job due at or before `now` in any of `shards` (`shard in [...]`): whether
    a sharded claim has anything to do, for one billed read instead of one per shard. The `in`
    filter counts as an equality for the indexes, so (state, shard, due_at) serves it; Google's
    own sharded-timestamp example queries its shards this way
    (https://cloud.google.com/firestore/docs/solutions/shard-timestamp). A lane's probe adds
    `action == A` ((state, shard, action, due_at) serves it), a target lane's `params.target
    == T` as well ((state, shard, action, params.target, due_at)); Firestore does not combine
    `not-in` with `in`, so the rest lane probes every action, and an action's lane that leaves
    targets out probes every job of the action."""
    if claims.exclude or claims.also:
        claims = EVERYTHING
    elif claims.exclude_targets:
        claims = ClaimFilter(action=claims.action)
    return QuerySpec(
        schema.JOBS,
        equals=_in_shard(_lane_equals(claims), shards),
        ranges=(("due_at", "<=", now),),
        order_by=("due_at",),
        limit=1,
    )


def due_query(
    now: datetime, limit: int | None, shard: Part = None, claims: ClaimFilter = EVERYTHING
) -> QuerySpec:
    """Deferred jobs due at or before `now`, oldest due first: every job (shard None), or one
    shard's. Every builder below takes `shard` the same way. `claims` (one part of it: the
    store claims a filter with `also` part by part) narrows it to one action's lane (`action
    ==`: the (state, [shard,] action, due_at) index), to one target's (`params.target ==` as
    well: (state, [shard,] action, params.target, due_at)), to an action's jobs but its laned
    targets' (`params.target not-in [...]`, ordered by due_at then params.target: (state,
    [shard,] action, due_at, params.target)) or to the rest (`action not-in [...]`, ordered by
    due_at then action: the (state, [shard,] due_at, action) index)."""
    if claims.also:
        raise ValueError("a filter with further parts is claimed part by part (parts())")
    excludes: tuple[tuple[str, tuple[Any, ...]], ...] = ()
    order: tuple[str, ...] = ("due_at",)
    if claims.exclude:
        excludes = (("action", claims.exclude),)
        order = ("due_at", "action")
    elif claims.exclude_targets:
        excludes = ((schema.TARGET, claims.exclude_targets),)
        order = ("due_at", schema.TARGET)
    return QuerySpec(
        schema.JOBS,
        equals=_in_shard(_lane_equals(claims), shard),
        ranges=(("due_at", "<=", now),),
        order_by=order,
        limit=limit,
        excludes=excludes,
    )


def _lane_equals(claims: ClaimFilter) -> tuple[tuple[str, Any], ...]:
    equals: tuple[tuple[str, Any], ...] = (("state", State.DEFERRED.value),)
    if claims.action is not None:
        equals += (("action", claims.action),)
    if claims.target is not None:
        equals += ((schema.TARGET, claims.target),)
    return equals


def expired_claims_query(cutoff: datetime, limit: int | None, shard: Part = None) -> QuerySpec:
    """Claimed jobs whose claim was taken before `cutoff`, oldest first."""
    return QuerySpec(
        schema.JOBS,
        equals=_in_shard((("state", State.CLAIMED.value),), shard),
        ranges=(("claim.claimed_at", "<", cutoff),),
        order_by=("claim.claimed_at",),
        limit=limit,
    )


def expired_leases_query(now: datetime, limit: int | None, shard: Part = None) -> QuerySpec:
    """Running jobs whose lease ended before `now`, oldest first."""
    return QuerySpec(
        schema.JOBS,
        equals=_in_shard((("state", State.RUNNING.value),), shard),
        ranges=(("lease_until", "<", now),),
        order_by=("lease_until",),
        limit=limit,
    )


def enqueued_query(before: datetime | None, limit: int | None, shard: Part = None) -> QuerySpec:
    """Enqueued jobs (published before `before`, when given), oldest publish first."""
    ranges: tuple[tuple[str, str, Any], ...] = ()
    if before is not None:
        ranges = (("enqueued_at", "<", before),)
    return QuerySpec(
        schema.JOBS,
        equals=_in_shard((("state", State.ENQUEUED.value),), shard),
        ranges=ranges,
        order_by=("enqueued_at",),
        limit=limit,
    )


def state_query(state: State) -> QuerySpec:
    """Every job in `state` (counted, never streamed)."""
    return QuerySpec(schema.JOBS, equals=(("state", state.value),))


def all_jobs_query() -> QuerySpec:
    """Every job document, whatever it holds (counted, never streamed): with the per-state
    counts at the same read time, the records whose state this version does not know."""
    return QuerySpec(schema.JOBS)


def newer_schema_query(version: int) -> QuerySpec:
    """Every job written with a `schema_version` above `version` (counted, never streamed)."""
    return QuerySpec(schema.JOBS, ranges=(("schema_version", ">", version),))


def list_query(
    *,
    state: State | None = None,
    due_before: datetime | None = None,
    overdue_at: datetime | None = None,
    claimed_before: datetime | None = None,
    limit: int = 50,
    after: tuple[Any, ...] | None = None,
    shard: Part = None,
) -> QuerySpec:
    """The operator's listing: one optional state, at most one time filter, in time order
    (one shard's with `shard`; the store merges the shards' pages).

    `due_before`: due_at < T. `overdue_at`: deferred with due_at <= T. `claimed_before`:
    claimed with claim.claimed_at < T. Raises ValidationError for combinations no index serves.
    """
    if sum(x is not None for x in (due_before, overdue_at, claimed_before)) > 1:
        raise ValidationError("use at most one of due_before, overdue_at, claimed_before")
    equals: tuple[tuple[str, Any], ...] = (("state", state.value),) if state else ()
    ranges: tuple[tuple[str, str, Any], ...] = ()
    order = "due_at"
    if overdue_at is not None:
        if state not in (None, State.DEFERRED):
            raise ValidationError("overdue_at lists deferred jobs; drop the state filter")
        equals = (("state", State.DEFERRED.value),)
        ranges = (("due_at", "<=", overdue_at),)
    elif claimed_before is not None:
        if state not in (None, State.CLAIMED):
            raise ValidationError("claimed_before lists claimed jobs; drop the state filter")
        equals = (("state", State.CLAIMED.value),)
        ranges = (("claim.claimed_at", "<", claimed_before),)
        order = "claim.claimed_at"
    elif due_before is not None:
        ranges = (("due_at", "<", due_before),)
    return QuerySpec(
        schema.JOBS,
        equals=_in_shard(equals, shard),
        ranges=ranges,
        order_by=(order,),
        limit=limit,
        start_after=after,
    )


def encode_cursor(order_value: datetime, job_id: str) -> str:
    raw = json.dumps([order_value.astimezone(UTC).isoformat(), job_id]).encode()
    return base64.urlsafe_b64encode(raw).decode().rstrip("=")


def decode_cursor(cursor: str) -> tuple[datetime, str]:
    try:
        padded = cursor + "=" * (-len(cursor) % 4)
        value, job_id = json.loads(base64.urlsafe_b64decode(padded.encode()))
        return datetime.fromisoformat(value), str(job_id)
    except (ValueError, TypeError, binascii.Error) as exc:
        raise ValidationError(f"cursor {cursor[:40]!r} is not one this store returned") from exc


def misfiled_due_queries(limit: int, shard: Part = None) -> tuple[QuerySpec, QuerySpec]:
    """Deferred records whose due_at sorts before every timestamp (null, boolean, number: the
    first in due_at order, no range) and those whose due_at is a string. Firestore range filters
    only match values of the operand's type, so no due query returns either
    (https://firebase.google.com/docs/firestore/manage-data/data-types#value_type_ordering).
    Both are served by the (state, due_at) index, or per shard by (state, shard, due_at)."""
    deferred = _in_shard((("state", State.DEFERRED.value),), shard)
    return (
        QuerySpec(schema.JOBS, equals=deferred, order_by=("due_at",), limit=limit),
        QuerySpec(
            schema.JOBS,
            equals=deferred,
            ranges=(("due_at", ">=", ""),),
            order_by=("due_at",),
            limit=limit,
        ),
    )


# --- as Firestore's StructuredQuery ---------------------------------------------------------

_STRUCTURED = query_types.StructuredQuery.pb()
_OPERATORS = {
    "<": _STRUCTURED.FieldFilter.Operator.LESS_THAN,
    "<=": _STRUCTURED.FieldFilter.Operator.LESS_THAN_OR_EQUAL,
    "==": _STRUCTURED.FieldFilter.Operator.EQUAL,
    ">=": _STRUCTURED.FieldFilter.Operator.GREATER_THAN_OR_EQUAL,
    ">": _STRUCTURED.FieldFilter.Operator.GREATER_THAN,
    "in": _STRUCTURED.FieldFilter.Operator.IN,
    "not-in": _STRUCTURED.FieldFilter.Operator.NOT_IN,
}


def structured_query(spec: QuerySpec, documents: str) -> Any:
    """`spec` as the raw `StructuredQuery` protobuf the high-level client builds for the same
    query (`tests/unit/jobs/test_queries.py` proves them equal): its filters (one, or an AND
    of several), ascending orders, the `__name__` tiebreak and the exclusive start cursor
    after `start_after`, the limit. `documents` is the database's `.../documents` path, which
    a cursor's document ID becomes a reference under.

    StructuredQuery: https://cloud.google.com/firestore/docs/reference/rpc/google.firestore.v1#structuredquery
    """
    query = _STRUCTURED()
    query.from_.add().collection_id = spec.collection
    filters = [(name, "in" if isinstance(v, tuple) else "==", v) for name, v in spec.equals]
    filters += list(spec.ranges)
    filters += [(name, "not-in", values) for name, values in spec.excludes]
    if len(filters) == 1:
        _field_filter(query.where, *filters[0])
    elif filters:
        query.where.composite_filter.op = _STRUCTURED.CompositeFilter.Operator.AND
        for name, op, value in filters:
            _field_filter(query.where.composite_filter.filters.add(), name, op, value)
    if spec.order_by:
        for name in spec.order_by:
            _order(query, name)
        if spec.start_after is not None:
            if spec.order_by[-1] != NAME:  # the document ID breaks ties, last
                _order(query, NAME)
            *values, document_id = spec.start_after
            query.start_at.before = False
            cursor = query.start_at.values
            for value in values:
                cursor.add().CopyFrom(encode_value(value))
            cursor.add().reference_value = f"{documents}/{spec.collection}/{document_id}"
    elif spec.start_after is not None:
        raise ValueError("a cursor needs an order")
    if spec.limit is not None:
        query.limit.value = spec.limit
    return query


def _field_filter(target: Any, name: str, op: str, value: Any) -> None:
    if op == "==" and value is None:  # the client sends `== None` as a unary IS_NULL filter
        target.unary_filter.op = _STRUCTURED.UnaryFilter.Operator.IS_NULL
        target.unary_filter.field.field_path = name
        return
    if op not in _OPERATORS:
        raise ValueError(f"operator {op!r} is not one the store's queries use")
    field_filter = target.field_filter
    field_filter.field.field_path = name
    field_filter.op = _OPERATORS[op]
    listed = op in ("in", "not-in")
    field_filter.value.CopyFrom(encode_value(list(value) if listed else value))


def _order(query: Any, name: str) -> None:
    order = query.order_by.add()
    order.field.field_path = name
    order.direction = _STRUCTURED.Direction.ASCENDING


# --- the shard census (services/jobs/layout.py) ---------------------------------------------

# The states whose records a shard query must reach (terminal ones keep their old shard until
# their TTL deletes them, and nothing queries them by shard).
LIVE_STATES: tuple[str, ...] = (
    State.DEFERRED.value,
    State.CLAIMED.value,
    State.ENQUEUED.value,
    State.RUNNING.value,
)


def live_query() -> QuerySpec:
    """Every non-terminal job (`state in [...]`: an equality for the indexes, served by the
    single-field `state` index at every N). Counted only."""
    return QuerySpec(schema.JOBS, equals=(("state", LIVE_STATES),))


def shard_range_query(low: int, high: int | None = None) -> QuerySpec:
    """Non-terminal jobs with low <= shard (< high), counted only. A range on `shard` must be
    the query's first order (https://firebase.google.com/docs/firestore/query-data/order-limit-data),
    and `due_at` (every record has one) follows, so the (state, shard, due_at) index, which
    exists at every N, serves it (`state in [...]` counts as an equality): no index of its own.
    Range filters match numbers only
    (https://firebase.google.com/docs/firestore/manage-data/data-types#value_type_ordering),
    so a record without `shard`, or with a string one, is in neither range."""
    ranges: tuple[tuple[str, str, Any], ...] = ((schema.SHARD, ">=", low),)
    if high is not None:
        ranges += ((schema.SHARD, "<", high),)
    return QuerySpec(
        schema.JOBS,
        equals=(("state", LIVE_STATES),),
        ranges=ranges,
        order_by=(schema.SHARD, "due_at"),
    )


def out_of_range_query(shards: int) -> QuerySpec:
    """Non-terminal jobs no query of a deployment with `shards` shards names: shard >= N."""
    return shard_range_query(shards)


def in_range_query(shards: int) -> QuerySpec:
    """Non-terminal jobs a deployment with `shards` shards reaches: 0 <= shard < N."""
    return shard_range_query(0, shards)


def pending_action_query(action: str) -> QuerySpec:
    """Every non-terminal job of `action` (`action ==` and `state in [...]`: equalities only,
    served by merging the single-field indexes, no composite index). Counted only: what
    `jobsctl actions` shows and `jobsctl actions check` refuses a rollout on."""
    return QuerySpec(schema.JOBS, equals=(("action", action), ("state", LIVE_STATES)))


def due_window_query(
    start: datetime | None, end: datetime, action: str | None, shard: Part = None
) -> QuerySpec:
    """Deferred jobs (of `action`, when given) with start <= due_at < end (counted, never
    streamed): one window of the calendar (services/jobs/forecast.py), or with `start` None
    everything already due before `end`. Served by the claim lanes' (state, action, due_at)
    index, or (state, due_at) without an action; per shard with JOBS_SHARDS > 1."""
    equals: tuple[tuple[str, Any], ...] = (("state", State.DEFERRED.value),)
    if action is not None:
        equals += (("action", action),)
    ranges: tuple[tuple[str, str, Any], ...] = (("due_at", "<", end),)
    if start is not None:
        ranges = (("due_at", ">=", start), *ranges)
    return QuerySpec(schema.JOBS, equals=_in_shard(equals, shard), ranges=ranges)


def filter_query(
    state: State,
    action: str | None,
    due_from: datetime | None,
    due_before: datetime | None,
    *,
    limit: int | None = None,
    after: tuple[Any, ...] | None = None,
    shard: Part = None,
) -> QuerySpec:
    """An operator's filter as far as a query takes it (services/jobs/bulk.py `JobFilter`):
    `state ==`, optionally `action ==`, a due range, in (due_at, ID) order from `after`. The
    (state, due_at) and (state, action, due_at) indexes serve it; subject prefix and producer
    are checked on the documents read."""
    equals: tuple[tuple[str, Any], ...] = (("state", state.value),)
    if action is not None:
        equals += (("action", action),)
    ranges: tuple[tuple[str, str, Any], ...] = ()
    if due_from is not None:
        ranges += (("due_at", ">=", due_from),)
    if due_before is not None:
        ranges += (("due_at", "<", due_before),)
    return QuerySpec(
        schema.JOBS,
        equals=_in_shard(equals, shard),
        ranges=ranges,
        order_by=("due_at",),
        limit=limit,
        start_after=after,
    )
