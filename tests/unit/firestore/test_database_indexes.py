"""The indexes an update leaves behind are those of the final documents indexed from scratch:
`Database.put` re-indexes only the fields an update changed, so this checks every kind of
change (value, type, a map's inner field, an array, a field added or removed, a delete); with
single-field index exemptions too, which leave no equality or array-contains entries for the
exempted fields (a map's exemption covering its inner fields) and every other entry as it was."""

from __future__ import annotations

from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from emulators.firestore.database import Database, Document
from emulators.firestore.values import ArrayValue, MapValue, Value

ROOT = "projects/p/databases/(default)/documents"
NAMES = [f"{ROOT}/jobs/j{n}" for n in range(3)]
FIELDS = ["state", "n", "tags", "lease"]

scalars = st.one_of(
    st.integers(-2, 2).map(lambda n: Value(integer_value=n)),
    st.sampled_from([1.0, 0.5]).map(lambda d: Value(double_value=d)),
    st.sampled_from(["a", "b"]).map(lambda s: Value(string_value=s)),
    st.just(Value(null_value=0)),
)


def values_of(scalars: st.SearchStrategy[Any], max_items: int) -> st.SearchStrategy[Any]:
    """A scalar, an array of up to `max_items` of them, or a map of `owner` and `until`."""
    return st.one_of(
        scalars,
        st.lists(scalars, max_size=max_items).map(
            lambda vs: Value(array_value=ArrayValue(values=vs))
        ),
        st.dictionaries(st.sampled_from(["owner", "until"]), scalars, max_size=2).map(
            lambda fs: Value(map_value=MapValue(fields=fs))
        ),
    )


values = values_of(scalars, 3)
documents = st.one_of(st.none(), st.dictionaries(st.sampled_from(FIELDS), values, max_size=4))
writes = st.lists(st.tuples(st.sampled_from(NAMES), documents), min_size=1, max_size=12)


def _doc(name: str, fields: dict[str, Any]) -> Any:
    return Document(name=name, fields=fields)


# Composite indexes (equality fields, then the ordered one) built before the writes too: one
# put changing several of their fields must move the document's entry once.
COMPOSITES = [(("state",), ("n",)), (("state",), ("lease", "until")), (("n",), ("tags",))]


def _build_composites(db: Database) -> None:
    for paths in COMPOSITES:
        db.composite_index("jobs", paths)


def _indexes(db: Database) -> tuple[Any, Any, Any]:
    def tidy(index: Any) -> dict[Any, Any]:
        return {
            path: {key: set(names) for key, names in by_key.items() if names}
            for path, by_key in index.items()
            if any(by_key.values())
        }

    sorted_entries = {path: list(index.entries) for path, index in db.sorted_indexes.items()}
    composite_entries = {
        paths: list(index.entries) for paths, index in db.composite_indexes.get("jobs", {}).items()
    }
    return tidy(db.eq_index), tidy(db.contains_index), (sorted_entries, composite_entries)


# A map (`lease`, inner fields included) and an array field exempted; `state` and `n` not.
EXEMPT = frozenset({("jobs", ("lease",)), ("jobs", ("tags",))})


# The sorted indexes a database has: on every field (and inner `owner`), or only on some, so
# that an exempted field without one (`tags`) has no entries at all and a put skips it, while
# an exempted map with one inside it (`lease.owner`) still has sorted entries to move.
EVERY_SORTED = tuple(path for field in FIELDS for path in ((field,), (field, "owner")))
SOME_SORTED = (("state",), ("lease", "owner"))


def _build_sorted(db: Database, paths: tuple[tuple[str, ...], ...]) -> None:
    for path in paths:
        db.sorted_index("jobs", path)


def _fresh(
    final: dict[str, dict[str, Any] | None],
    exempt: frozenset[Any],
    sorted_paths: tuple[tuple[str, ...], ...] = EVERY_SORTED,
) -> Database:
    """The final documents put once each, then every index built."""
    fresh = Database(("p", "(default)"), exempt)
    for name, fields in final.items():
        if fields is not None:
            fresh.put(name, _doc(name, fields), 1)
    _build_sorted(fresh, sorted_paths)
    _build_composites(fresh)
    return fresh


def _single_field(index: dict[Any, Any], keep: Any) -> dict[Any, Any]:
    return {key: value for key, value in index.items() if keep(key[1])}


@pytest.mark.parametrize("exempt", [frozenset(), EXEMPT], ids=["no exemptions", "exemptions"])
@pytest.mark.parametrize("sorted_paths", [EVERY_SORTED, SOME_SORTED], ids=["every", "some"])
@settings(max_examples=150, deadline=None)
@given(sequence=writes, built_after=st.integers(0, 12))
def test_indexes_after_updates_equal_the_final_documents_indexed_from_scratch(
    exempt: frozenset[Any],
    sorted_paths: tuple[tuple[str, ...], ...],
    sequence: list[tuple[str, dict[str, Any] | None]],
    built_after: int,
) -> None:
    db = Database(("p", "(default)"), exempt)
    # Sorted indexes built after some writes (from the documents or the equality entries),
    # and maintained by every put from then on.
    _build_composites(db)
    final: dict[str, dict[str, Any] | None] = {}
    for time_us, (name, fields) in enumerate(sequence, start=1):
        if time_us == built_after + 1:
            _build_sorted(db, sorted_paths)
        db.put(name, None if fields is None else _doc(name, fields), time_us)
        final[name] = fields
    _build_sorted(db, sorted_paths)
    assert _indexes(db) == _indexes(_fresh(final, exempt, sorted_paths))
    if not exempt:
        return
    equality, contains, ordered = _indexes(db)
    everything = _indexes(_fresh(final, frozenset(), sorted_paths))
    exempted = {path for _, path in exempt}

    def kept(path: Any) -> bool:
        return path[:1] not in exempted

    assert all(kept(path) for _, path in [*equality, *contains])
    assert equality == _single_field(everything[0], kept)
    assert contains == _single_field(everything[1], kept)
    # Sorted and composite indexes (the planner's own) hold every document either way.
    assert ordered == everything[2]


@settings(max_examples=60, deadline=None)
@given(sequence=writes, first=st.sampled_from([frozenset(), EXEMPT]))
def test_other_exemptions_rebuild_the_single_field_entries(
    sequence: list[tuple[str, dict[str, Any] | None]], first: frozenset[Any]
) -> None:
    """A project given other index definitions: its entries become those of the documents
    indexed from scratch under the new exemptions."""
    db = Database(("p", "(default)"), first)
    final: dict[str, dict[str, Any] | None] = {}
    for time_us, (name, fields) in enumerate(sequence, start=1):
        db.put(name, None if fields is None else _doc(name, fields), time_us)
        final[name] = fields
    then = EXEMPT if not first else frozenset()
    db.set_unindexed(then)
    _build_sorted(db, EVERY_SORTED)
    _build_composites(db)
    assert _indexes(db) == _indexes(_fresh(final, then))
