"""`mutation.apply` against a plain model of a write: the fields it leaves, whether it changed
the document, and the times it stamps. `apply` copies whole messages and compares documents in
the protobuf runtime (not field by field in Python), so this checks every kind of update: with
and without a mask, a field set, replaced by an equal value, deleted, a map or an array, on a
new or an existing document, with a server-time transform."""

from __future__ import annotations

from typing import Any

import pytest
from google.cloud.firestore_v1.types import write as write_types
from hypothesis import given, settings
from hypothesis import strategies as st

from emulators.firestore.database import Database, Document, Stored
from emulators.firestore.engine import Engine
from emulators.firestore.mutation import apply, micros, timestamp
from emulators.firestore.values import Value
from tests.unit.firestore.test_database_indexes import (
    EVERY_SORTED,
    EXEMPT,
    SOME_SORTED,
    values_of,
)
from tests.unit.firestore.test_database_indexes import _build_composites as build_composites
from tests.unit.firestore.test_database_indexes import _build_sorted as build_sorted
from tests.unit.firestore.test_database_indexes import _indexes as indexes_of

Write = write_types.Write.pb()
NAME = "projects/p/databases/(default)/documents/jobs/j1"
FIELDS = ["state", "n", "tags", "lease"]
CREATED_US, UPDATED_US, COMMIT_US = 1_000_000, 2_000_000, 3_000_000

scalars = st.one_of(
    st.integers(-1, 1).map(lambda n: Value(integer_value=n)),
    st.sampled_from([1.0, -0.0, 0.0]).map(lambda d: Value(double_value=d)),
    st.sampled_from(["a", "b"]).map(lambda s: Value(string_value=s)),
    st.just(Value(null_value=0)),
)
values = values_of(scalars, 2)
field_maps = st.dictionaries(st.sampled_from(FIELDS), values, max_size=4)


def _update(name: str, sent: dict[str, Any], mask: list[str] | None) -> Any:
    """An update of `name` sending `sent` (only the masked fields, with a mask)."""
    write = Write()
    write.update.name = name
    for field, value in sent.items():
        if mask is None or field in mask:
            write.update.fields[field].CopyFrom(value)
    if mask is not None:
        write.update_mask.field_paths.extend(mask)
    return write


def _stored(fields: dict[str, Any]) -> Stored:
    doc = Document(name=NAME, fields=fields)
    doc.create_time.CopyFrom(timestamp(CREATED_US))
    doc.update_time.CopyFrom(timestamp(UPDATED_US))
    return Stored(doc, UPDATED_US)


def _expected(
    old: dict[str, Any] | None, sent: dict[str, Any], mask: list[str] | None
) -> dict[str, Any]:
    if mask is None:
        return dict(sent)
    result = dict(old or {})
    for name in mask:
        if name in sent:
            result[name] = sent[name]
        else:
            result.pop(name, None)
    return result


@settings(max_examples=300, deadline=None)
@given(
    old=st.one_of(st.none(), field_maps),
    sent=field_maps,
    mask=st.one_of(st.none(), st.lists(st.sampled_from(FIELDS), unique=True, max_size=4)),
    stamp=st.booleans(),
)
def test_apply_leaves_the_modelled_fields_and_moves_update_time_only_on_a_change(
    old: dict[str, Any] | None, sent: dict[str, Any], mask: list[str] | None, stamp: bool
) -> None:
    write = _update(NAME, sent, mask)
    if stamp:
        server_time = write.update_transforms.add(field_path="stamped")
        server_time.set_to_server_value = server_time.REQUEST_TIME
    current = _stored(old) if old is not None else None

    outcome = apply(write, NAME, current, COMMIT_US)

    kept = {name: value for name, value in sent.items() if mask is None or name in mask}
    expected = _expected(old, kept, mask)
    if stamp:
        expected["stamped"] = Value(timestamp_value=timestamp(COMMIT_US))
    assert dict(outcome.doc.fields) == expected
    assert outcome.doc.name == NAME
    changed = old is None or expected != old
    assert outcome.changed is changed
    assert micros(outcome.doc.create_time) == (CREATED_US if old is not None else COMMIT_US)
    assert micros(outcome.doc.update_time) == (COMMIT_US if changed else UPDATED_US)
    assert outcome.result.update_time == outcome.doc.update_time
    if current is not None:  # the stored version is never modified in place
        assert dict(current.doc.fields) == old
        assert micros(current.doc.update_time) == UPDATED_US


def test_a_set_ignores_the_times_a_client_put_in_the_document() -> None:
    write = Write()
    write.update.name = NAME
    write.update.fields["state"].string_value = "a"
    write.update.update_time.CopyFrom(timestamp(5))
    write.update.create_time.CopyFrom(timestamp(5))

    outcome = apply(write, NAME, _stored({"state": Value(string_value="b")}), COMMIT_US)

    assert micros(outcome.doc.create_time) == CREATED_US
    assert micros(outcome.doc.update_time) == COMMIT_US


# Masked updates through the engine: each put re-indexes only the fields its write touched
# (Outcome.touched); the indexes must still be those of the final documents from scratch.
NAMES = [f"projects/p/databases/(default)/documents/jobs/j{n}" for n in range(3)]
engine_writes = st.lists(
    st.tuples(
        st.sampled_from(NAMES),
        field_maps,
        st.one_of(st.none(), st.lists(st.sampled_from(FIELDS), unique=True, max_size=3)),
        st.booleans(),
    ),
    min_size=1,
    max_size=10,
)


@pytest.mark.parametrize("exempt", [frozenset(), EXEMPT], ids=["no exemptions", "exemptions"])
@pytest.mark.parametrize("sorted_paths", [EVERY_SORTED, SOME_SORTED], ids=["every", "some"])
@settings(max_examples=150, deadline=None)
@given(sequence=engine_writes)
def test_masked_updates_leave_the_indexes_of_the_final_documents(
    exempt: frozenset[Any],
    sorted_paths: tuple[tuple[str, ...], ...],
    sequence: list[tuple[str, dict[str, Any], list[str] | None, bool]],
) -> None:
    engine = Engine()
    engine.exemptions = lambda _: exempt
    key = ("p", "(default)")
    db = engine.database(key)
    build_sorted(db, sorted_paths)
    build_composites(db)
    for name, sent, mask, delete in sequence:
        if delete:
            write = Write()
            write.delete = name
        else:
            write = _update(name, sent, mask)
        engine.commit(key, [write], None)
    fresh = Database(key, exempt)
    for name, stored in db.docs.items():
        fresh.put(name, stored.doc, 1)
    build_sorted(fresh, sorted_paths)
    build_composites(fresh)
    assert indexes_of(db) == indexes_of(fresh)
