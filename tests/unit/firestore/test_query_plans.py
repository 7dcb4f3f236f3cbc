"""The ordered-index walk returns exactly what the general scan returns."""

from __future__ import annotations

from typing import Any

import pytest
from google.cloud.firestore_v1.types import document, query
from hypothesis import example, given, settings
from hypothesis import strategies as st

from emulators.firestore import query as query_module
from emulators.firestore.database import Database

ROOT = "projects/p/databases/(default)/documents"

values = st.one_of(
    st.none(),
    st.integers(-5, 5),
    st.floats(-5, 5),
    st.just(float("nan")),
    st.sampled_from(["a", "b", "z"]),
    st.just("missing"),
)


def _value(v: Any) -> document.Value:
    if v is None:
        return document.Value(null_value=0)
    if isinstance(v, bool):
        return document.Value(boolean_value=v)
    if isinstance(v, int):
        return document.Value(integer_value=v)
    if isinstance(v, float):
        return document.Value(double_value=v)
    return document.Value(string_value=v)


def _database(rows: list[tuple[Any, str]]) -> Database:
    db = Database(("p", "(default)"))
    for i, (v, s) in enumerate(rows):
        fields: dict[str, Any] = {"s": _value(s)}
        if v != "missing":
            fields["v"] = _value(v)
        name = f"{ROOT}/jobs/d{i:03d}"
        db.put(name, document.Document.pb(document.Document(name=name, fields=fields)), i + 1)
    return db


# A cursor: its value on `v`, optionally a document number for __name__, and `before`.
Cursor = tuple[Any, int | None, bool] | None

cursors = st.one_of(
    st.none(),
    st.tuples(
        st.one_of(st.none(), st.integers(-5, 5), st.sampled_from(["a", "b"])),
        st.one_of(st.none(), st.integers(0, 40)),
        st.booleans(),
    ),
)


def _cursor(cursor: tuple[Any, int | None, bool]) -> dict[str, Any]:
    value, name, before = cursor
    values = [_value(value)]
    if name is not None:
        values.append(document.Value(reference_value=f"{ROOT}/jobs/d{name:03d}"))
    return {"values": values, "before": before}


def _query(
    op: str | None,
    operand: Any,
    desc: bool,
    limit: int,
    offset: int,
    state: str | None,
    start: Cursor = None,
    end: Cursor = None,
) -> Any:
    filters = []
    if op is not None:
        filters.append(
            {"field_filter": {"field": {"field_path": "v"}, "op": op, "value": _value(operand)}}
        )
    if state is not None:
        filters.append(
            {"field_filter": {"field": {"field_path": "s"}, "op": "EQUAL", "value": _value(state)}}
        )
    q: dict[str, Any] = {
        "from_": [{"collection_id": "jobs"}],
        "order_by": [
            {"field": {"field_path": "v"}, "direction": "DESCENDING" if desc else "ASCENDING"}
        ],
        "limit": {"value": limit},
        "offset": offset,
    }
    if filters:
        q["where"] = {"composite_filter": {"op": "AND", "filters": filters}}
    if start is not None:
        q["start_at"] = _cursor(start)
    if end is not None:
        q["end_at"] = _cursor(end)
    return query.StructuredQuery.pb(query.StructuredQuery(q))


@settings(max_examples=400, deadline=None)
@given(
    rows=st.lists(st.tuples(values, st.sampled_from(["a", "b"])), max_size=40),
    op=st.sampled_from(
        [None, "LESS_THAN", "LESS_THAN_OR_EQUAL", "GREATER_THAN", "GREATER_THAN_OR_EQUAL"]
    ),
    operand=st.one_of(st.integers(-5, 5), st.sampled_from(["b"])),
    desc=st.booleans(),
    limit=st.integers(0, 10),
    offset=st.integers(0, 3),
    state=st.sampled_from([None, "a"]),
    start=cursors,
    end=cursors,
)
def test_ordered_walk_matches_the_general_scan(
    rows: list[tuple[Any, str]],
    op: str | None,
    operand: Any,
    desc: bool,
    limit: int,
    offset: int,
    state: str | None,
    start: Cursor,
    end: Cursor,
) -> None:
    db = _database(rows)
    compiled = query_module.compile_query(
        ROOT, _query(op, operand, desc, limit, offset, state, start, end)
    )
    original = query_module._INDEX_WORTH_BUILDING
    query_module._INDEX_WORTH_BUILDING = -1  # always walk, however small the equality set
    try:
        walked = query_module._ordered_walk(db, compiled)
    finally:
        query_module._INDEX_WORTH_BUILDING = original
    scanned = query_module.scan(db, compiled)
    assert walked is not None
    assert [d.name for d in walked.docs] == [d.name for d in scanned.docs]
    assert walked.skipped == scanned.skipped


def test_walk_is_skipped_when_an_equality_index_is_selective() -> None:
    db = _database([(i, "a" if i == 3 else "b") for i in range(10)])
    compiled = query_module.compile_query(ROOT, _query(None, 0, False, 5, 0, "a"))
    assert query_module._ordered_walk(db, compiled) is None
    assert [d.name.rsplit("/", 1)[1] for d in query_module.run(db, compiled).docs] == ["d003"]


def test_a_selective_equality_walks_the_composite_index_once_it_is_built() -> None:
    # The walk of an index already kept up visits only the page; a scan would sort the
    # whole equality set (the last pages of a claim backlog).
    db = _database([(i, "a" if i % 3 else "b") for i in range(12)])
    compiled = query_module.compile_query(ROOT, _query(None, 0, False, 2, 0, "a"))
    assert query_module._ordered_walk(db, compiled) is None  # not built: narrowed by "a"
    db.composite_index("jobs", (("s",), ("v",)))
    walked = query_module._ordered_walk(db, compiled)
    assert walked is not None
    assert [d.name for d in walked.docs] == [d.name for d in query_module.scan(db, compiled).docs]
    assert [d.name.rsplit("/", 1)[1] for d in walked.docs] == ["d001", "d002"]


@pytest.mark.parametrize("desc", [False, True])
def test_sorted_index_follows_later_writes(desc: bool) -> None:
    db = _database([(i, "a") for i in range(5)])
    compiled = query_module.compile_query(ROOT, _query(None, 0, desc, 10, 0, None))
    query_module.run(db, compiled)  # builds the index
    name = f"{ROOT}/jobs/d000"
    db.put(name, document.Document.pb(document.Document(name=name, fields={"v": _value(9)})), 99)
    got = [d.name.rsplit("/", 1)[1] for d in query_module.run(db, compiled).docs]
    expected = ["d001", "d002", "d003", "d004", "d000"]
    assert got == (list(reversed(expected)) if desc else expected)


def _count_query(parent: str, state: str | None, op: str = "EQUAL") -> Any:
    q: dict[str, Any] = {"from_": [{"collection_id": "jobs"}]}
    if state is not None:
        value = (
            {"array_value": {"values": [_value(state), _value("zz")]}}
            if op == "IN"
            else _value(state)
        )
        q["where"] = {"field_filter": {"field": {"field_path": "s"}, "op": op, "value": value}}
    return query_module.compile_query(parent, query.StructuredQuery.pb(query.StructuredQuery(q)))


@settings(max_examples=100, deadline=None)
@given(
    states=st.lists(st.sampled_from(["a", "b"]), max_size=30),
    nested=st.lists(st.sampled_from(["a", "b"]), max_size=5),
    state=st.sampled_from([None, "a", "b"]),
    op=st.sampled_from(["EQUAL", "IN"]),
)
def test_count_from_indexes_matches_a_scan(
    states: list[str], nested: list[str], state: str | None, op: str
) -> None:
    db = Database(("p", "(default)"))
    names = [f"{ROOT}/jobs/d{i:03d}" for i in range(len(states))]
    names += [f"{ROOT}/x/y/jobs/n{i:03d}" for i in range(len(nested))]
    for t, (name, s) in enumerate(zip(names, states + nested, strict=True), start=1):
        doc = document.Document(name=name, fields={"s": _value(s)})
        db.put(name, document.Document.pb(doc), t)
    for parent in (ROOT, f"{ROOT}/x/y"):
        compiled = _count_query(parent, state, op)
        counted = query_module.count_by_index(db, compiled)
        scanned = len(query_module.scan(db, compiled, ordered=False).docs)
        assert counted is None or counted == scanned
        if state is None or (parent == ROOT and not nested):
            assert counted == scanned  # the indexes answer these without a scan


def _span_count_query(
    parent: str, ops: list[tuple[str, Any]], state: str | None, order_by: str | None
) -> Any:
    filters: list[dict[str, Any]] = [
        {"field_filter": {"field": {"field_path": "v"}, "op": op, "value": _value(operand)}}
        for op, operand in ops
    ]
    if state is not None:
        filters.append(
            {"field_filter": {"field": {"field_path": "s"}, "op": "EQUAL", "value": _value(state)}}
        )
    q: dict[str, Any] = {"from_": [{"collection_id": "jobs"}]}
    if filters:
        q["where"] = {"composite_filter": {"op": "AND", "filters": filters}}
    if order_by is not None:
        q["order_by"] = [{"field": {"field_path": order_by}}]
    return query_module.compile_query(parent, query.StructuredQuery.pb(query.StructuredQuery(q)))


ranges = st.sampled_from(
    ["LESS_THAN", "LESS_THAN_OR_EQUAL", "GREATER_THAN", "GREATER_THAN_OR_EQUAL"]
)


@settings(max_examples=150, deadline=None)
@given(
    rows=st.lists(st.tuples(values, st.sampled_from(["a", "b"])), max_size=30),
    nested=st.booleans(),
    ops=st.lists(
        st.tuples(ranges, st.one_of(st.integers(-5, 5), st.sampled_from(["b"]))), max_size=2
    ),
    state=st.sampled_from([None, "a"]),
    order_by=st.sampled_from([None, "v", "s", "w"]),
    built=st.booleans(),
)
# Ranges that exclude each other (their spans do not overlap), and a range of another type.
@example(
    rows=[(i, "a") for i in range(6)],
    nested=False,
    ops=[("GREATER_THAN", 3), ("LESS_THAN", 1)],
    state=None,
    order_by=None,
    built=True,
)
@example(
    rows=[(i, "a") for i in range(6)],
    nested=False,
    ops=[("GREATER_THAN_OR_EQUAL", 4), ("LESS_THAN_OR_EQUAL", 2)],
    state="a",
    order_by=None,
    built=True,
)
@example(
    rows=[(i, "a") for i in range(3)] + [("z", "a")],
    nested=False,
    ops=[("LESS_THAN", "b")],
    state="a",
    order_by="v",
    built=True,
)
def test_a_count_from_an_index_span_matches_a_scan(
    rows: list[tuple[Any, str]],
    nested: bool,
    ops: list[tuple[str, Any]],
    state: str | None,
    order_by: str | None,
    built: bool,
) -> None:
    db = _database(rows)
    if nested:  # a collection of the same id elsewhere: counting needs a scope check then
        name = f"{ROOT}/x/y/jobs/n0"
        doc = document.Document(name=name, fields={"v": _value(0), "s": _value("a")})
        db.put(name, document.Document.pb(doc), 999)
    if built:
        db.sorted_index("jobs", ("v",))
        db.composite_index("jobs", (("s",), ("v",)))
    compiled = _span_count_query(ROOT, ops, state, order_by)
    counted = query_module.count_by_index(db, compiled)
    scanned = len(query_module.scan(db, compiled, ordered=False).docs)
    assert counted is None or counted == scanned
    # Answered from the span whenever its index exists and nothing else needs checking.
    plain_order = order_by in (None, "v") or (order_by == "s" and state is not None)
    if ops and built and not nested and plain_order:
        assert counted == scanned


@pytest.mark.parametrize("desc", [False, True])
def test_composite_index_follows_later_writes(desc: bool) -> None:
    db = _database([(i, "a" if i % 2 else "b") for i in range(6)])
    compiled = query_module.compile_query(ROOT, _query(None, 0, desc, 10, 0, "a"))
    original = query_module._INDEX_WORTH_BUILDING
    query_module._INDEX_WORTH_BUILDING = -1  # walk the composite index however small
    try:
        query_module._ordered_walk(db, compiled)  # builds it
        for i, (v, s) in {0: (9, "a"), 1: (1, "b"), 4: (-1, "a")}.items():
            name = f"{ROOT}/jobs/d{i:03d}"
            fields = {"v": _value(v), "s": _value(s)}
            db.put(name, document.Document.pb(document.Document(name=name, fields=fields)), 99)
        walked = query_module._ordered_walk(db, compiled)
    finally:
        query_module._INDEX_WORTH_BUILDING = original
    assert walked is not None
    got = [d.name.rsplit("/", 1)[1] for d in walked.docs]
    expected = ["d004", "d003", "d005", "d000"]  # v = -1, 3, 5, 9; d001 left "a"
    assert got == (list(reversed(expected)) if desc else expected)
    assert got == [d.name.rsplit("/", 1)[1] for d in query_module.scan(db, compiled).docs]


def test_an_equality_and_order_walk_never_visits_documents_outside_the_equality() -> None:
    # 2,000 "b" documents sort before the 1,500 "a" ones on v (too many "a" for a scan of
    # the equality's set): production's composite index (s, v) skips the "b", and so must
    # the walk, or a claim query's cost grows with the documents already claimed instead of
    # with its page.
    rows = [(i % 5, "b") for i in range(2000)] + [(5, "a")] * 1500
    db = _database(rows)
    compiled = query_module.compile_query(
        ROOT, _query("GREATER_THAN_OR_EQUAL", 0, False, 5, 0, "a")
    )
    assert compiled.filter is not None
    visited: list[str] = []
    matches = compiled.filter.matches

    def counting(stored: Any) -> bool:
        visited.append(stored.name)
        return matches(stored)

    compiled.filter.matches = counting
    walked = query_module._ordered_walk(db, compiled)
    assert walked is not None
    assert [d.name.rsplit("/", 1)[1] for d in walked.docs] == [
        f"d{n:03d}" for n in range(2000, 2005)
    ]
    assert len(visited) == 5


@pytest.mark.parametrize("desc", [False, True])
def test_a_cursor_page_does_not_walk_what_precedes_the_cursor(
    desc: bool, monkeypatch: pytest.MonkeyPatch
) -> None:
    db = _database([(i, "a") for i in range(1, 5)] * 100)  # 400 documents, v in 1..4
    seen = []
    within = query_module._within_cursors

    def counting(stored: Any, *args: Any) -> bool:
        seen.append(stored.name)
        return within(stored, *args)

    monkeypatch.setattr(query_module, "_within_cursors", counting)
    # After the 150th document in the walk's order: 50 left of its value, then the next.
    value, name = (3, 2) if not desc else (2, 397)
    compiled = query_module.compile_query(
        ROOT, _query(None, 0, desc, 5, 0, None, start=(value, name, False))
    )
    walked = query_module._ordered_walk(db, compiled)
    walked_past = len(seen)
    assert walked is not None
    assert [d.name for d in walked.docs] == [d.name for d in query_module.scan(db, compiled).docs]
    assert len(walked.docs) == 5
    # Only the cursor value's own documents up to the cursor are read past: at most 100 of
    # them, where walking from the start reads 150.
    assert walked_past <= 100 + 5
