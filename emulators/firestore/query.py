"""Structured queries: validation, compilation into matchers, planning over indexes, execution."""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass, field, replace
from typing import Any

from google.cloud.firestore_v1.types import query as query_types

from emulators.firestore.database import Database, SortedIndex, Stored
from emulators.firestore.errors import InvalidArgument, Unimplemented
from emulators.firestore.names import DatabaseKey, documents_root, parse_parent
from emulators.firestore.values import (
    NAME_PATH,
    FieldPath,
    SortKey,
    is_nan,
    kind,
    parse_field_path,
    reference_key,
    reference_name,
    sort_key,
)

StructuredQuery = query_types.StructuredQuery.pb()
_FieldOp = StructuredQuery.FieldFilter.Operator
_UnaryOp = StructuredQuery.UnaryFilter.Operator
_CompositeOp = StructuredQuery.CompositeFilter.Operator
_DESCENDING = StructuredQuery.Direction.DESCENDING

_NULL_KEY: SortKey = (0,)
_NAN_KEY: SortKey = (2, 0, 0)
_MAX_DISJUNCTION = 30
_RANGE_OPS = {
    _FieldOp.LESS_THAN,
    _FieldOp.LESS_THAN_OR_EQUAL,
    _FieldOp.GREATER_THAN,
    _FieldOp.GREATER_THAN_OR_EQUAL,
}
_INEQUALITY_OPS = _RANGE_OPS | {_FieldOp.NOT_EQUAL, _FieldOp.NOT_IN}
_INDEX_WORTH_BUILDING = 1000

Matcher = Callable[[Stored], bool]


@dataclass
class Term:
    """One conjunct the planner can answer from an index."""

    op: int
    path: FieldPath
    keys: list[SortKey]


@dataclass
class Filter:
    matches: Matcher
    terms: list[Term] = field(default_factory=list)  # indexable conjuncts (AND only)
    inequality_paths: list[FieldPath] = field(default_factory=list)
    exact: bool = False  # one equality/in term: its index answers it without re-checking
    # The terms are the whole filter: a document matches exactly when it meets every one (an
    # AND of indexable conjuncts, nothing else).
    whole: bool = False


@dataclass
class Query:
    database: DatabaseKey
    parent: str
    collection_id: str
    all_descendants: bool
    filter: Filter | None
    orders: list[tuple[FieldPath, bool]]
    start: tuple[list[SortKey], bool] | None  # (cursor keys, inclusive)
    end: tuple[list[SortKey], bool] | None
    offset: int
    limit: int | None
    projection: list[FieldPath] | None


@dataclass
class Result:
    docs: list[Stored]
    skipped: int


# -- compilation ---------------------------------------------------------------------------


def compile_query(parent: str, pb: Any) -> Query:
    database, _ = parse_parent(parent)
    if pb.HasField("find_nearest"):
        raise Unimplemented("find_nearest (vector search) is not supported by this emulator.")
    selectors = list(pb.from_)
    if len(selectors) != 1:
        raise InvalidArgument("A query must name exactly one collection in 'from'.")
    selector = selectors[0]
    if not selector.all_descendants and not selector.collection_id:
        raise InvalidArgument("A collection query needs a collection_id.")
    where = _compile_filter(pb.where, database) if pb.HasField("where") else None
    orders = _orders(pb, where)
    start = _cursor(pb.start_at, orders, database) if pb.HasField("start_at") else None
    end = _cursor(pb.end_at, orders, database) if pb.HasField("end_at") else None
    if pb.offset < 0:
        raise InvalidArgument("offset must be non-negative.")
    limit = None
    if pb.HasField("limit"):
        if pb.limit.value < 0:
            raise InvalidArgument("limit must be non-negative.")
        limit = pb.limit.value
    projection = None
    if pb.HasField("select"):
        projection = [parse_field_path(f.field_path) for f in pb.select.fields]
    return Query(
        database=database,
        parent=parent,
        collection_id=selector.collection_id,
        all_descendants=selector.all_descendants,
        filter=where,
        orders=orders,
        start=(start[0], start[1]) if start else None,
        end=(end[0], not end[1]) if end else None,
        offset=pb.offset,
        limit=limit,
        projection=projection,
    )


def _orders(pb: Any, where: Filter | None) -> list[tuple[FieldPath, bool]]:
    orders: list[tuple[FieldPath, bool]] = []
    seen: set[FieldPath] = set()
    for order in pb.order_by:
        path = parse_field_path(order.field.field_path)
        if path in seen:
            raise InvalidArgument(f"Order by field {order.field.field_path!r} appears twice.")
        seen.add(path)
        orders.append((path, order.direction == _DESCENDING))
    last_desc = orders[-1][1] if orders else False
    if where is not None:
        for path in sorted(set(where.inequality_paths)):
            if path not in seen and path != NAME_PATH:
                seen.add(path)
                orders.append((path, last_desc))
    if NAME_PATH not in seen:
        orders.append((NAME_PATH, last_desc))
    return orders


def _cursor(
    cursor: Any, orders: list[tuple[FieldPath, bool]], database: DatabaseKey
) -> tuple[list[SortKey], bool]:
    values = list(cursor.values)
    if len(values) > len(orders):
        raise InvalidArgument("Too many cursor values for the query's ordering.")
    keys = []
    for (path, _), value in zip(orders, values, strict=False):
        if path == NAME_PATH:
            keys.append(_name_key(value, database))
        else:
            keys.append(sort_key(value))
    return keys, cursor.before


def _name_key(value: Any, database: DatabaseKey) -> SortKey:
    if kind(value) != "reference_value":
        raise InvalidArgument("A cursor or filter on __name__ must be a document reference.")
    name = value.reference_value
    if not name.startswith(documents_root(database)):
        raise InvalidArgument(f"Reference {name!r} is not in this database.")
    return (6, reference_key(name))


def _compile_filter(pb: Any, database: DatabaseKey) -> Filter:
    which = pb.WhichOneof("filter_type")
    if which == "composite_filter":
        return _compile_composite(pb.composite_filter, database)
    if which == "field_filter":
        return _compile_field(pb.field_filter, database)
    if which == "unary_filter":
        return _compile_unary(pb.unary_filter)
    raise InvalidArgument("Filter is empty.")


def _compile_composite(pb: Any, database: DatabaseKey) -> Filter:
    parts = [_compile_filter(f, database) for f in pb.filters]
    if not parts:
        raise InvalidArgument("A composite filter needs at least one filter.")
    inequality = [p for part in parts for p in part.inequality_paths]
    if pb.op == _CompositeOp.AND:
        matchers = [p.matches for p in parts]

        def all_match(doc: Stored) -> bool:
            return all(m(doc) for m in matchers)

        whole = all(p.whole for p in parts)
        return Filter(all_match, [t for p in parts for t in p.terms], inequality, whole=whole)
    if pb.op == _CompositeOp.OR:
        matchers = [p.matches for p in parts]

        def any_match(doc: Stored) -> bool:
            return any(m(doc) for m in matchers)

        return Filter(any_match, [], inequality)
    raise InvalidArgument("Composite filter operator must be AND or OR.")


def _compile_unary(pb: Any) -> Filter:
    path = parse_field_path(pb.field.field_path)
    op = pb.op
    if op == _UnaryOp.IS_NULL:
        term = Term(_FieldOp.EQUAL, path, [_NULL_KEY])
        return Filter(lambda d: d.key(path) == _NULL_KEY, [term], whole=True)
    if op == _UnaryOp.IS_NAN:
        term = Term(_FieldOp.EQUAL, path, [_NAN_KEY])
        return Filter(lambda d: d.key(path) == _NAN_KEY, [term], whole=True)
    if op == _UnaryOp.IS_NOT_NULL:
        return Filter(lambda d: d.key(path) not in (None, _NULL_KEY), [], [path])
    if op == _UnaryOp.IS_NOT_NAN:
        return Filter(lambda d: d.key(path) not in (None, _NULL_KEY, _NAN_KEY), [], [path])
    raise InvalidArgument("Unary filter operator is unspecified or unknown.")


def _operand_keys(pb: Any, path: FieldPath, database: DatabaseKey) -> list[SortKey]:
    value = pb.value
    if pb.op in (_FieldOp.IN, _FieldOp.NOT_IN, _FieldOp.ARRAY_CONTAINS_ANY):
        if kind(value) != "array_value":
            raise InvalidArgument("'in', 'not-in' and 'array-contains-any' need an array value.")
        items = list(value.array_value.values)
        if not items:
            raise InvalidArgument("'in', 'not-in' and 'array-contains-any' need a non-empty array.")
        if len(items) > _MAX_DISJUNCTION:
            raise InvalidArgument(f"At most {_MAX_DISJUNCTION} values in a disjunction.")
    else:
        items = [value]
    if path == NAME_PATH:
        if pb.op in (_FieldOp.ARRAY_CONTAINS, _FieldOp.ARRAY_CONTAINS_ANY):
            raise InvalidArgument("Array operators are not allowed on __name__.")
        return [_name_key(v, database) for v in items]
    return [sort_key(v) for v in items]


def _compile_field(pb: Any, database: DatabaseKey) -> Filter:
    path = parse_field_path(pb.field.field_path)
    op = pb.op
    value = pb.value
    if kind(value) is None:
        raise InvalidArgument("A field filter needs a value.")
    if op in _RANGE_OPS and (kind(value) == "null_value" or is_nan(value)):
        # Served, matching no document: the backend "has always accepted null and NaN for all
        # operators" (the Firebase SDKs dropped their own refusal to agree with it,
        # https://github.com/firebase/firebase-js-sdk/pull/3960), and Google's emulator
        # answers every such range filter with no document (tests/integration/firestore/
        # test_errors.py). It stays an inequality on the field.
        return Filter(lambda d: False, [], [path])
    keys = _operand_keys(pb, path, database)
    key = keys[0]
    if op == _FieldOp.EQUAL:
        exact = path != NAME_PATH
        return Filter(lambda d: d.key(path) == key, [Term(op, path, keys)], exact=exact, whole=True)
    if op == _FieldOp.NOT_EQUAL:
        return Filter(lambda d: d.key(path) not in (None, _NULL_KEY, key), [], [path])
    if op in _RANGE_OPS:
        compare = _RANGE_COMPARE[op]
        rank = key[0]

        def in_range(d: Stored) -> bool:
            other = d.key(path)
            return other is not None and other[0] == rank and compare(other, key)

        return Filter(in_range, [Term(op, path, keys)], [path], whole=True)
    if op == _FieldOp.IN:
        wanted = set(keys)
        exact = path != NAME_PATH
        return Filter(
            lambda d: d.key(path) in wanted, [Term(op, path, keys)], exact=exact, whole=True
        )
    if op == _FieldOp.NOT_IN:
        excluded = set(keys)
        if _NULL_KEY in excluded:
            return Filter(lambda d: False, [], [path])
        return Filter(
            lambda d: d.key(path) not in (None, _NULL_KEY) and d.key(path) not in excluded,
            [],
            [path],
        )
    if op in (_FieldOp.ARRAY_CONTAINS, _FieldOp.ARRAY_CONTAINS_ANY):
        wanted = set(keys)

        def contains(d: Stored) -> bool:
            other = d.key(path)
            return other is not None and other[0] == 8 and any(k in wanted for k in other[1])

        return Filter(contains, [Term(op, path, keys)], whole=True)
    raise InvalidArgument("Field filter operator is unspecified or unknown.")


_RANGE_COMPARE: dict[int, Callable[[SortKey, SortKey], bool]] = {
    _FieldOp.LESS_THAN: lambda a, b: a < b,
    _FieldOp.LESS_THAN_OR_EQUAL: lambda a, b: a <= b,
    _FieldOp.GREATER_THAN: lambda a, b: a > b,
    _FieldOp.GREATER_THAN_OR_EQUAL: lambda a, b: a >= b,
}


# -- execution ----------------------------------------------------------------------------


def _in_scope(query: Query) -> Callable[[str], bool]:
    if query.all_descendants:
        prefix = query.parent + "/"
        return lambda name: name.startswith(prefix)
    prefix = f"{query.parent}/{query.collection_id}/"
    return lambda name: name.startswith(prefix) and "/" not in name[len(prefix) :]


def _term_candidates(db: Database, cid: str, term: Term) -> tuple[int, Callable[[], Iterable[str]]]:
    """(estimated size, producer of names) for one indexable conjunct."""
    if term.path == NAME_PATH:
        if term.op in (_FieldOp.EQUAL, _FieldOp.IN):
            names = [reference_name(k[1]) for k in term.keys]
            return len(names), lambda: names
        return -1, lambda: ()
    if term.op in (_FieldOp.EQUAL, _FieldOp.IN):
        by_value = db.equality_index(cid, term.path)
        if by_value is None:  # exempted: no entries to narrow by
            return -1, lambda: ()
        sets = [by_value.get(k, set()) for k in term.keys]
        return sum(len(s) for s in sets), lambda: set().union(*sets)
    if term.op in (_FieldOp.ARRAY_CONTAINS, _FieldOp.ARRAY_CONTAINS_ANY):
        by_item = db.contains_index_of(cid, term.path)
        if by_item is None:
            return -1, lambda: ()
        sets = [by_item.get(k, set()) for k in term.keys]
        return sum(len(s) for s in sets), lambda: set().union(*sets)
    return -1, lambda: ()


def _range_bounds(term: Term) -> tuple[SortKey, bool, SortKey, bool]:
    key = term.keys[0]
    rank = key[0]
    if term.op in (_FieldOp.LESS_THAN, _FieldOp.LESS_THAN_OR_EQUAL):
        return (rank,), True, key, term.op == _FieldOp.LESS_THAN_OR_EQUAL
    return key, term.op == _FieldOp.GREATER_THAN_OR_EQUAL, (rank + 1,), False


def _range_candidates(
    db: Database, cid: str, term: Term
) -> tuple[int, Callable[[], Iterable[str]]]:
    index = db.sorted_index(cid, term.path)
    bounds = _range_bounds(term)
    return index.count_between(*bounds), lambda: index.between(*bounds)


def _ordered_walk(db: Database, query: Query) -> Result | None:
    """Serve ``[where a == x ...] order by f [, __name__] limit n`` by walking an index in
    order, stopping after n matches; None when the query does not have that shape or an
    equality index already narrows it well (unless the index to walk was built already and
    the walk stays within that equality).

    With equality filters the walk goes over the composite index (the equality fields, then
    f) within the equalities' prefix, so documents that fail them are never visited: as in
    production, the work grows with the results, not with the collection.
    """
    if query.limit is None or query.all_descendants or not query.collection_id:
        return None
    if len(query.orders) != 2 or query.orders[1][0] != NAME_PATH:
        return None
    (path, desc), (_, name_desc) = query.orders
    if path == NAME_PATH or desc != name_desc:
        return None
    cid = query.collection_id
    terms = query.filter.terms if query.filter is not None else []
    equal: dict[FieldPath, SortKey] = {}
    for term in terms:
        if term.op == _FieldOp.EQUAL and term.path not in (NAME_PATH, path):
            equal.setdefault(term.path, term.keys[0])
    paths = (*sorted(equal), path)
    built = (
        paths in db.composite_indexes.get(cid, {}) if equal else (cid, path) in db.sorted_indexes
    )
    for term in terms:
        if term.op in _RANGE_OPS:
            continue
        if built and term.op == _FieldOp.EQUAL and equal.get(term.path) == term.keys[0]:
            continue  # the walk stays within this equality's prefix of the index already built
        size, _ = _term_candidates(db, cid, term)
        if 0 <= size <= _INDEX_WORTH_BUILDING:
            return None
    index = db.composite_index(cid, paths) if equal else db.sorted_index(cid, path)
    lo, hi = _seek(index, equal, query, desc, *_span(index, equal, path, terms))
    in_scope = _in_scope(query)
    matches = query.filter.matches if query.filter is not None else None
    order_paths = [p for p, _ in query.orders]
    desc_flags = [d for _, d in query.orders]
    cursors = query.start is not None or query.end is not None
    wanted = query.offset + query.limit
    found: list[Stored] = []
    docs = db.docs
    for name in index.names(lo, hi, desc):
        if len(found) >= wanted:
            break
        stored = docs.get(name)
        if stored is None or not in_scope(name):
            continue
        if matches is not None and not matches(stored):
            continue
        if cursors and not _within_cursors(stored, query, order_paths, desc_flags):
            continue
        found.append(stored)
    skipped = min(query.offset, len(found))
    return Result(found[skipped : skipped + query.limit], skipped)


def _seek(
    index: SortedIndex,
    equal: dict[FieldPath, SortKey],
    query: Query,
    desc: bool,
    lo: int,
    hi: int,
) -> tuple[int, int]:
    """[lo, hi) narrowed to the walked field's keys the cursors allow: Firestore seeks to a
    cursor rather than reading past what lies before it, so a page behind a start_after
    cursor costs what the page does, not what precedes it. Inclusive on that key: a tie on
    it is settled by the later cursor values, which `_within_cursors` still checks. Walking
    down, the start cursor bounds from above."""
    start = query.start[0][0] if query.start is not None and query.start[0] else None
    end = query.end[0][0] if query.end is not None and query.end[0] else None
    low, high = (end, start) if desc else (start, end)
    prefix = _prefix(equal)
    if low is not None:
        key = (*prefix, low) if prefix else low
        lo = max(lo, index.span(key, True, key, True)[0])
    if high is not None:
        key = (*prefix, high) if prefix else high
        hi = min(hi, index.span(key, True, key, True)[1])
    return lo, max(lo, hi)


def _prefix(equal: dict[FieldPath, SortKey]) -> tuple[SortKey, ...]:
    """The equality fields' keys in the order a composite index holds them (by path)."""
    return tuple(equal[p] for p in sorted(equal))


def _span(
    index: SortedIndex, equal: dict[FieldPath, SortKey], path: FieldPath, terms: list[Term]
) -> tuple[int, int]:
    """Positions [lo, hi) of the entries of ``index`` (the composite one of the ``equal``
    fields then ``path``, or ``path``'s sorted one without equalities) that have the equal
    fields' keys and meet every range term on ``path``."""
    prefix = _prefix(equal)
    if prefix:
        lo, hi = index.span((*prefix,), True, (*prefix, _TOP), True)
    else:
        lo, hi = 0, len(index)
    for term in terms:
        if term.op in _RANGE_OPS and term.path == path:
            low, low_inclusive, high, high_inclusive = _range_bounds(term)
            if prefix:
                low, high = (*prefix, low), (*prefix, high)
            t_lo, t_hi = index.span(low, low_inclusive, high, high_inclusive)
            lo, hi = max(lo, t_lo), min(hi, t_hi)
    return lo, max(lo, hi)  # ranges that exclude each other: an empty span


class _Top:
    """Sorts after every sort key: the open upper end of a composite index's prefix."""

    def __lt__(self, other: object) -> bool:
        return False

    def __gt__(self, other: object) -> bool:
        return other is not self

    def __le__(self, other: object) -> bool:
        return other is self

    def __ge__(self, other: object) -> bool:
        return True


_TOP = _Top()


def candidates(db: Database, query: Query, read_us: int | None) -> Iterable[Stored]:
    """Documents that may match, narrowed by an index when one applies."""
    in_scope = _in_scope(query)
    cid = query.collection_id
    if read_us is not None:
        names: Iterable[str] = db.group_names(cid, read_us) if cid else db.all_names(read_us)
        for name in names:
            if in_scope(name):
                stored = db.get(name, read_us)
                if stored is not None:
                    yield stored
        return
    best: tuple[int, Callable[[], Iterable[str]]] | None = None
    terms = query.filter.terms if query.filter is not None and cid else []
    for term in terms:
        size, produce = _term_candidates(db, cid, term)
        if size >= 0 and (best is None or size < best[0]):
            best = (size, produce)
    for term in terms:
        if term.op in _RANGE_OPS and term.path != NAME_PATH:
            indexed = (cid, term.path) in db.sorted_indexes
            if indexed or best is None or best[0] > _INDEX_WORTH_BUILDING:
                size, produce = _range_candidates(db, cid, term)
                if best is None or size < best[0]:
                    best = (size, produce)
    if best is not None:
        pool: Iterable[str] = best[1]()
    elif not query.all_descendants:
        pool = db.by_collection.get(f"{query.parent}/{cid}", set())
    elif cid:
        pool = db.group_names(cid, None)
    else:
        pool = db.all_names(None)
    docs = db.docs
    for name in pool:
        stored = docs.get(name)
        if stored is not None and in_scope(name):
            yield stored


def _compare(a: list[SortKey], b: list[SortKey], desc: list[bool]) -> int:
    for x, y, d in zip(a, b, desc, strict=False):
        if x != y:
            r = -1 if x < y else 1
            return -r if d else r
    return 0


def ordered_by_aggregated(query: Query, paths: list[FieldPath]) -> Query:
    """``query`` as a sum/avg over ``paths`` runs it: production scans the aggregated field's
    index, so the field is an implied order (after the explicit and inequality ones, in the
    last order's direction) and a limit takes the first N in that order. Its system test
    sums the 12 smallest values under ``limit(12)``: test_sum_query_get_with_limit in
    https://github.com/googleapis/python-firestore/blob/main/tests/system/test_system.py
    """
    if not needs_order(query):
        return query  # the whole result set: its order cannot change the value
    orders = list(query.orders)
    ordered = {path for path, _ in orders}
    name_at = next(i for i, (path, _) in enumerate(orders) if path == NAME_PATH)
    cursors = [c for c in (query.start, query.end) if c is not None]
    if any(len(keys) > name_at for keys, _ in cursors):
        # A cursor that already names a document (a snapshot's values and __name__) fixes the
        # positions of the orders: an order inserted before __name__ would misread it.
        return query
    direction = orders[name_at][1]
    for path in paths:
        if path not in ordered:
            ordered.add(path)
            orders.insert(name_at, (path, direction))
            name_at += 1
    return replace(query, orders=orders)


def needs_order(query: Query) -> bool:
    """Whether the result order matters (limit, offset or cursors); aggregations without them
    can skip sorting."""
    return (
        query.limit is not None
        or query.offset > 0
        or query.start is not None
        or query.end is not None
    )


def run(db: Database, query: Query, read_us: int | None = None, ordered: bool = True) -> Result:
    """Matching documents in query order, after cursors, offset and limit."""
    if read_us is None:
        walked = _ordered_walk(db, query)
        if walked is not None:
            return walked
    return scan(db, query, read_us, ordered)


def scan(db: Database, query: Query, read_us: int | None = None, ordered: bool = True) -> Result:
    """The general plan: narrow candidates by an index, filter, sort, then cursors and limit."""
    matches = query.filter.matches if query.filter is not None else None
    if (
        query.filter is not None
        and query.filter.exact
        and read_us is None
        and query.collection_id
        and db.single_field_indexed(query.collection_id, query.filter.terms[0].path)
    ):
        matches = None  # the candidates came from this very equality index
    order_paths = [p for p, _ in query.orders]
    # __name__ is always present; only other ordered fields can be missing.
    field_orders = [p for p in order_paths if p != NAME_PATH]
    found = []
    for stored in candidates(db, query, read_us):
        if matches is not None and not matches(stored):
            continue
        if field_orders and any(stored.key(p) is None for p in field_orders):
            continue
        found.append(stored)
    for path, desc in reversed(query.orders if ordered or needs_order(query) else []):
        found.sort(key=lambda s, p=path: s.key(p), reverse=desc)  # type: ignore[misc]
    desc_flags = [d for _, d in query.orders]
    if query.start is not None or query.end is not None:
        found = [s for s in found if _within_cursors(s, query, order_paths, desc_flags)]
    skipped = min(query.offset, len(found))
    found = found[skipped:]
    if query.limit is not None:
        found = found[: query.limit]
    return Result(found, skipped)


def _within_cursors(
    stored: Stored, query: Query, order_paths: list[FieldPath], desc: list[bool]
) -> bool:
    keys = [stored.key(p) for p in order_paths]
    if query.start is not None:
        cursor, inclusive = query.start
        c = _compare(keys, cursor, desc)  # type: ignore[arg-type]
        if c < 0 or (c == 0 and not inclusive):
            return False
    if query.end is not None:
        cursor, inclusive = query.end
        c = _compare(keys, cursor, desc)  # type: ignore[arg-type]
        if c > 0 or (c == 0 and not inclusive):
            return False
    return True


def count_by_index(db: Database, query: Query) -> int | None:
    """The number of matches straight from the indexes, for a count over a whole collection
    filtered by at most one equality/in term, or by equalities and ranges on one field whose
    index was built (:func:`_count_in_span`); None when the query needs a scan."""
    if needs_order(query) or query.all_descendants or not query.collection_id:
        return None
    cid = query.collection_id
    collection = db.by_collection.get(f"{query.parent}/{cid}", set())
    if len(query.orders) != 1:
        # An inequality or an order added a field that documents may lack: only a range's
        # field is counted, from an index whose entries all have it.
        if query.filter is None or len(db.by_group.get(cid, ())) != len(collection):
            return None
        return _count_in_span(db, query)
    if query.filter is None:
        return len(collection)
    if not query.filter.exact or len(db.by_group.get(cid, ())) != len(collection):
        return None  # other collections share the id: names would need a scope check
    term = query.filter.terms[0]
    by_value = db.equality_index(cid, term.path)
    if by_value is None:
        return None  # exempted: no entries to count
    return sum(len(by_value.get(key, ())) for key in set(term.keys))


def _count_in_span(db: Database, query: Query) -> int | None:
    """The matches of ``[where a == x ...] and f <op> y ...`` counted as the span of an index
    that already exists (the composite one of the equality fields then f, or f's sorted one):
    each entry there has every equality key and an f in range, and each match is such an
    entry, as the index holds every document of the collection group having those fields.
    None for any other filter (an order on another field, a term of another kind, a term on
    __name__) or when no such index was built (building one here would cost every later
    write its upkeep)."""
    assert query.filter is not None
    if not query.filter.whole:
        return None
    equal: dict[FieldPath, SortKey] = {}
    ranged: set[FieldPath] = set()
    for term in query.filter.terms:
        if term.path == NAME_PATH:
            return None
        if term.op == _FieldOp.EQUAL:
            if equal.setdefault(term.path, term.keys[0]) != term.keys[0]:
                return None
        elif term.op in _RANGE_OPS:
            ranged.add(term.path)
        else:
            return None
    if len(ranged) != 1:
        return None
    (path,) = ranged
    if path in equal or any(p not in (path, NAME_PATH, *equal) for p, _ in query.orders):
        return None
    cid = query.collection_id
    if equal:
        index = db.composite_indexes.get(cid, {}).get((*sorted(equal), path))
    else:
        index = db.sorted_indexes.get((cid, path))
    if index is None:
        return None
    lo, hi = _span(index, equal, path, query.filter.terms)
    return hi - lo
