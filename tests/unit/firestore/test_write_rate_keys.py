"""The keys `WriteRates` counts a written document under are those its rules give, computed here
the plain way: every timestamp field at any depth of maps counts under shard None when its
single-field index holds it (no exemption on it or on a map it lies in; every field when the
emulator is not strict), and once per composite index listing it whose every field the
document has, under the document's integer `shard` when `shard` stands before the timestamp
in that index. `write_rates.py` skips fields no index can reach and remembers per path what it
worked out; this checks it counts exactly what the rules say, for random documents and index
sets."""

from __future__ import annotations

from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st

from emulators.firestore.database import Document
from emulators.firestore.indexes import CompositeIndex, Definitions, IndexField, IndexSet
from emulators.firestore.values import MapValue, Value, format_field_path
from emulators.firestore.write_rates import WriteRates

DATABASE = ("p", "(default)")
ROOT = "projects/p/databases/(default)/documents"
TOP = ["due_at", "claim", "shard", "state", "lease"]
INNER = ["claimed_at", "until", "owner"]

scalars = st.one_of(
    st.just(Value(timestamp_value={"seconds": 5})),
    st.integers(0, 2).map(lambda n: Value(integer_value=n)),
    st.just(Value(string_value="a")),
    st.just(Value(null_value=0)),
)
maps = st.dictionaries(st.sampled_from(INNER), scalars, max_size=3).map(
    lambda fs: Value(map_value=MapValue(fields=fs))
)
nested = st.dictionaries(st.sampled_from(INNER), st.one_of(scalars, maps), max_size=3).map(
    lambda fs: Value(map_value=MapValue(fields=fs))
)
documents = st.dictionaries(st.sampled_from(TOP), st.one_of(scalars, nested), max_size=5)
paths = st.one_of(
    st.sampled_from(TOP).map(lambda f: (f,)),
    st.tuples(st.sampled_from(["claim", "lease"]), st.sampled_from(INNER)),
)
# The project's shapes (a sharded one with `shard` before the timestamp, one with it after)
# among random ones.
SHAPES = [
    [("state",), ("shard",), ("due_at",)],
    [("shard",), ("claim", "claimed_at")],
    [("due_at",), ("shard",)],
    [("state",), ("claim", "claimed_at")],
]
composites = st.lists(
    st.one_of(st.sampled_from(SHAPES), st.lists(paths, min_size=2, max_size=3, unique=True)),
    max_size=4,
)
exempted = st.sets(paths, max_size=3)


def _definitions(indexes: list[list[tuple[str, ...]]], exempt: set[tuple[str, ...]]) -> Any:
    return Definitions(
        tuple(
            CompositeIndex("jobs", "COLLECTION", tuple(IndexField(p, "ASCENDING") for p in index))
            for index in indexes
        ),
        frozenset(("jobs", p) for p in exempt),
    )


def _value_at(fields: Any, path: tuple[str, ...]) -> Any | None:
    value = None
    for name in path:
        if fields is None or name not in fields:
            return None
        value = fields[name]
        fields = value.map_value.fields if value.WhichOneof("value_type") == "map_value" else None
    return value


def _timestamps(fields: Any, prefix: tuple[str, ...] = ()) -> list[tuple[str, ...]]:
    out = []
    for name in fields:
        value = fields[name]
        which = value.WhichOneof("value_type")
        if which == "timestamp_value":
            out.append((*prefix, name))
        elif which == "map_value":
            out.extend(_timestamps(value.map_value.fields, (*prefix, name)))
    return out


def _expected(doc: Any, definitions: Any | None) -> set[tuple[str, str, int | None]]:
    fields = doc.fields
    shard_value = _value_at(fields, ("shard",))
    shard = (
        int(shard_value.integer_value)
        if shard_value is not None and shard_value.WhichOneof("value_type") == "integer_value"
        else None
    )
    keys = set()
    for path in _timestamps(fields):
        field = format_field_path(path)
        exempt = definitions is not None and any(
            ("jobs", path[:n]) in definitions.exemptions for n in range(1, len(path) + 1)
        )
        if not exempt:
            keys.add(("jobs", field, None))
        for index in definitions.indexes if definitions is not None else ():
            index_paths = [f.path for f in index.fields]
            if path not in index_paths:
                continue
            if any(_value_at(fields, p) is None for p in index_paths):
                continue
            before = index_paths[: index_paths.index(path)]
            keys.add(("jobs", field, shard if ("shard",) in before else None))
    return keys


@settings(max_examples=200, deadline=None)
@given(
    docs=st.lists(documents, min_size=1, max_size=4),
    indexes=composites,
    exempt=exempted,
    strict=st.booleans(),
)
def test_each_write_counts_under_the_keys_the_rules_give(
    docs: list[dict[str, Any]],
    indexes: list[list[tuple[str, ...]]],
    exempt: set[tuple[str, ...]],
    strict: bool,
) -> None:
    definitions = _definitions(indexes, exempt) if strict else None
    rates = WriteRates(IndexSet(definitions) if definitions is not None else None)
    expected: dict[tuple[str, str, int | None], int] = {}
    for n, fields in enumerate(docs):
        doc = Document(name=f"{ROOT}/jobs/j{n}", fields=fields)
        doc.update_time.seconds = 100
        rates.observe(DATABASE, [_Written(doc)])
        for key in _expected(doc, definitions):
            expected[key] = expected.get(key, 0) + 1
    counted = {(r["collection"], r["field"], r["shard"]): r["writes"] for r in rates.snapshot()}
    assert counted == expected


class _Written:
    """What `observe` reads of a write's outcome: the document written."""

    def __init__(self, doc: Any) -> None:
        self.doc = doc
