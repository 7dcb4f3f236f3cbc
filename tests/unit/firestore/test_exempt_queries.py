"""A database without single-field entries for exempted fields answers every query the index
set lets through exactly as one holding every entry does, and the index check refuses the
queries that would need the missing entries (as production answers FAILED_PRECONDITION).

The planner narrows by an equality or array-contains index and walks sorted or composite
indexes; with an exemption it must neither narrow by entries that are not there nor take an
empty entry set for "no match". The composite indexes declared here put exempted fields in
equality, array-contains and ordered positions, so queries reach each of those plans.
"""

from __future__ import annotations

from typing import Any

import pytest
from google.cloud.firestore_v1.types import document, query
from hypothesis import assume, given, settings
from hypothesis import strategies as st

from emulators.firestore import query as query_module
from emulators.firestore.database import Database
from emulators.firestore.errors import FailedPrecondition, InvalidArgument
from emulators.firestore.indexes import CompositeIndex, Definitions, IndexSet

ROOT = "projects/p/databases/(default)/documents"
DATABASE = ("p", "(default)")
EXEMPT = frozenset({("jobs", ("lease",)), ("jobs", ("tags",)), ("jobs", ("due",))})
DECLARED = (
    CompositeIndex.of("jobs", [("state", "ASCENDING"), ("due", "ASCENDING")]),
    CompositeIndex.of("jobs", [("lease.owner", "ASCENDING"), ("n", "ASCENDING")]),
    CompositeIndex.of("jobs", [("tags", "CONTAINS"), ("n", "DESCENDING")]),
    CompositeIndex.of("jobs", [("state", "ASCENDING"), ("lease.until", "ASCENDING")]),
)
PATHS = ["state", "n", "due", "tags", "lease.owner", "lease.until"]

small = st.one_of(st.integers(0, 3), st.sampled_from(["a", "b"]))


def _value(v: Any) -> document.Value:
    if isinstance(v, list):
        return document.Value(array_value={"values": [_value(x) for x in v]})
    if isinstance(v, dict):
        return document.Value(map_value={"fields": {k: _value(x) for k, x in v.items()}})
    if isinstance(v, int):
        return document.Value(integer_value=v)
    return document.Value(string_value=v)


rows = st.fixed_dictionaries(
    {},
    optional={
        "state": st.sampled_from(["a", "b"]),
        "n": small,
        "due": st.integers(0, 5),
        "tags": st.lists(st.sampled_from(["a", "b", "c"]), max_size=2),
        "lease": st.fixed_dictionaries({}, optional={"owner": small, "until": small}),
    },
)
filters = st.tuples(
    st.sampled_from(PATHS),
    st.sampled_from(
        ["EQUAL", "IN", "LESS_THAN", "GREATER_THAN_OR_EQUAL", "ARRAY_CONTAINS", "NOT_EQUAL"]
    ),
    small,
)
orders = st.lists(st.tuples(st.sampled_from(PATHS), st.booleans()), max_size=1)
equalities = st.sampled_from(["EQUAL", "IN"])
ranges = st.sampled_from(["LESS_THAN", "GREATER_THAN_OR_EQUAL"])
Where = list[tuple[str, str, Any]]
Order = list[tuple[str, bool]]


def _served_shapes() -> Any:
    """Queries each declared index serves (an exempted field in each position), so every plan
    over them is reached; random filters and orders besides."""
    by_state_due = st.tuples(
        st.tuples(st.just("state"), equalities, small).map(lambda f: [f]),
        st.just([("due", False)]),
    )
    due_range = st.tuples(
        st.tuples(
            st.tuples(st.just("state"), st.just("EQUAL"), small),
            st.tuples(st.just("due"), ranges, st.integers(0, 5)),
        ).map(list),
        st.sampled_from([[], [("due", False)]]),
    )
    by_owner = st.tuples(
        st.tuples(st.just("lease.owner"), equalities, small).map(lambda f: [f]),
        st.just([("n", False)]),
    )
    by_tag = st.tuples(
        st.tuples(st.just("tags"), st.just("ARRAY_CONTAINS"), small).map(lambda f: [f]),
        st.just([("n", True)]),
    )
    lease_range = st.tuples(
        st.tuples(
            st.tuples(st.just("state"), st.just("EQUAL"), small),
            st.tuples(st.just("lease.until"), ranges, small),
        ).map(list),
        st.just([]),
    )
    random = st.tuples(st.lists(filters, max_size=2), orders)
    return st.one_of(by_state_due, due_range, by_owner, by_tag, lease_range, random)


def _database(docs: list[dict[str, Any]], exempt: frozenset[Any]) -> Database:
    db = Database(DATABASE, exempt)
    for i, fields in enumerate(docs):
        name = f"{ROOT}/jobs/d{i:03d}"
        pb = document.Document(name=name, fields={k: _value(v) for k, v in fields.items()})
        db.put(name, document.Document.pb(pb), i + 1)
    return db


def _structured(where: Where, order: Order, limit: int | None) -> Any:
    clauses = []
    for path, op, operand in where:
        value = _value([operand, "b"]) if op == "IN" else _value(operand)
        clauses.append({"field_filter": {"field": {"field_path": path}, "op": op, "value": value}})
    q: dict[str, Any] = {"from_": [{"collection_id": "jobs"}]}
    if len(clauses) == 1:
        q["where"] = clauses[0]  # alone, as the client sends one filter: an exact term
    elif clauses:
        q["where"] = {"composite_filter": {"op": "AND", "filters": clauses}}
    if order:
        q["order_by"] = [
            {"field": {"field_path": p}, "direction": "DESCENDING" if d else "ASCENDING"}
            for p, d in order
        ]
    if limit is not None:
        q["limit"] = {"value": limit}
    return query.StructuredQuery.pb(query.StructuredQuery(q))


def _names(db: Database, compiled: Any) -> list[str]:
    return [d.name for d in query_module.run(db, compiled).docs]


@pytest.mark.parametrize("worth_building", [1000, -1], ids=["default plans", "always walk"])
@settings(max_examples=300, deadline=None)
@given(
    docs=st.lists(rows, max_size=25),
    shape=_served_shapes(),
    limit=st.one_of(st.none(), st.integers(1, 5)),
)
def test_queries_the_index_set_serves_return_what_full_entries_return(
    worth_building: int, docs: list[dict[str, Any]], shape: tuple[Where, Order], limit: int | None
) -> None:
    pb = _structured(*shape, limit)
    try:
        compiled = query_module.compile_query(ROOT, pb)
    except InvalidArgument:
        assume(False)
    served = IndexSet(Definitions(DECLARED, EXEMPT))
    try:
        served.check(DATABASE, ROOT, pb)
    except FailedPrecondition:
        assume(False)  # production refuses it too; the check's own tests cover which
    exempted, full = _database(docs, EXEMPT), _database(docs, frozenset())
    original = query_module._INDEX_WORTH_BUILDING
    query_module._INDEX_WORTH_BUILDING = worth_building
    try:
        assert _names(exempted, compiled) == _names(full, compiled)
        counted = query_module.count_by_index(exempted, compiled)
        if counted is not None:
            assert counted == len(query_module.scan(full, compiled).docs)
    finally:
        query_module._INDEX_WORTH_BUILDING = original


@pytest.mark.parametrize(
    ("where", "order"),
    [
        ([("lease.owner", "EQUAL", 1)], []),
        ([("tags", "ARRAY_CONTAINS", "a")], []),
        ([("due", "LESS_THAN", 3)], []),
        ([], [("due", False)]),
        ([("state", "EQUAL", "a"), ("lease.owner", "EQUAL", 1)], []),
    ],
)
def test_a_query_that_needs_an_exempted_fields_entries_is_refused(
    where: Where, order: Order
) -> None:
    served = IndexSet(Definitions(DECLARED, EXEMPT))
    with pytest.raises(FailedPrecondition, match="disabled by an exemption"):
        served.check(DATABASE, ROOT, _structured(where, order, None))


def test_an_equality_on_an_exempted_field_a_composite_index_serves_is_answered() -> None:
    """`lease.owner == 1 order by n`: composite-served, so the planner must not take the
    missing single-field entries of `lease.owner` for "no document has 1"."""
    docs = [{"lease": {"owner": 1}, "n": 2}, {"lease": {"owner": 2}, "n": 1}, {"n": 0}]
    pb = _structured([("lease.owner", "EQUAL", 1)], [("n", False)], None)
    IndexSet(Definitions(DECLARED, EXEMPT)).check(DATABASE, ROOT, pb)
    compiled = query_module.compile_query(ROOT, pb)
    assert _names(_database(docs, EXEMPT), compiled) == [f"{ROOT}/jobs/d000"]
