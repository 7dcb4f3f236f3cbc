"""The Firestore resources equal services/jobs/schema.py: indexes, TTL policies, exemptions.

Each Firestore field has one configuration, so the program must register one firestore.Field
per (collection, field), merging a TTL field that is also an index exemption.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable

import pytest

from infra import database
from services.jobs import schema
from tests.infra.conftest import Registered, StackRun, run_stack

FIELD = "firestore/field:Field"
INDEX = "firestore/index:Index"

Key = tuple[str, str]


def _keys(fields: Iterable[Registered]) -> list[Key]:
    return [(r.state["collection"], r.state["field"]) for r in fields]


def _indexing_disabled(field: Registered) -> bool:
    return field.state.get("indexConfig") == {"indexes": []}


def _ttl_keys() -> set[Key]:
    return {(ttl.collection, ttl.field) for ttl in schema.TTL_FIELDS}


def _exemption_keys() -> set[Key]:
    return {(exempt.collection, exempt.field) for exempt in schema.INDEX_EXEMPTIONS}


def test_firestore_indexes_equal_the_schema(stack: StackRun) -> None:
    declared = {
        (index.collection, tuple((f.path, f.order) for f in index.fields))
        for index in schema.INDEXES
    }
    created = {
        (r.state["collection"], tuple((f["fieldPath"], f["order"]) for f in r.state["fields"]))
        for r in stack.of_type(INDEX)
    }
    assert created == declared
    assert len(stack.of_type(INDEX)) == len(schema.INDEXES)


def test_ttl_policies_equal_the_schema(stack: StackRun) -> None:
    with_ttl = [r for r in stack.of_type(FIELD) if "ttlConfig" in r.state]
    assert sorted(_keys(with_ttl)) == sorted(_ttl_keys())


def test_index_exemptions_created_equal_the_schema(stack: StackRun) -> None:
    exempt = [r for r in stack.of_type(FIELD) if _indexing_disabled(r)]
    # TTL fields are exempt as well (an ever-growing indexed timestamp is a write hotspot).
    assert set(_keys(exempt)) == _exemption_keys() | _ttl_keys()
    without_ttl = [r for r in exempt if "ttlConfig" not in r.state]
    assert set(_keys(without_ttl)) == _exemption_keys() - _ttl_keys()


def test_every_field_configuration_is_one_resource(stack: StackRun) -> None:
    counts = Counter(_keys(stack.of_type(FIELD)))
    assert [key for key, n in counts.items() if n > 1] == []
    assert set(counts) == _exemption_keys() | _ttl_keys()
    assert all(_indexing_disabled(r) for r in stack.of_type(FIELD))


def test_a_ttl_field_that_is_also_exempt_is_one_override_with_both() -> None:
    ttl = (schema.TtlField("jobs", "expire_at"), schema.TtlField("runs", "expire_at"))
    exemptions = (
        schema.IndexExemption("jobs", "params"),
        schema.IndexExemption("jobs", "expire_at"),
        schema.IndexExemption("runs", "params"),
        schema.IndexExemption("jobs", "params"),
    )
    overrides = database.field_overrides(ttl, exemptions)
    assert overrides == (
        database.FieldOverride("jobs", "expire_at", ttl=True),
        database.FieldOverride("runs", "expire_at", ttl=True),
        database.FieldOverride("jobs", "params", ttl=False),
        database.FieldOverride("runs", "params", ttl=False),
    )
    names = [database.field_resource_name(o) for o in overrides]
    assert len(set(names)) == len(names)


def test_a_stack_whose_schema_exempts_a_ttl_field_registers_it_once(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    overlap = schema.IndexExemption(schema.JOBS, schema.EXPIRE_AT)
    monkeypatch.setattr(schema, "INDEX_EXEMPTIONS", (*schema.INDEX_EXEMPTIONS, overlap))
    fields = run_stack("dev").of_type(FIELD)
    merged = [r for r in fields if _keys([r]) == [(schema.JOBS, schema.EXPIRE_AT)]]
    assert len(merged) == 1
    assert "ttlConfig" in merged[0].state and _indexing_disabled(merged[0])
    assert len(fields) == len(_exemption_keys() | _ttl_keys())


def test_field_resource_names_are_stable_and_distinct() -> None:
    overrides = database.field_overrides()
    names = [database.field_resource_name(o) for o in overrides]
    assert len(set(names)) == len(names)
    # Names TTL fields had before exemptions existed: renaming them would replace them.
    assert {f"ttl-{t.collection}-{t.field}" for t in schema.TTL_FIELDS} <= set(names)


def test_adopting_the_existing_database_still_creates_its_indexes_and_fields() -> None:
    run = run_stack("dev", overrides={"createDatabase": False})
    assert run.of_type("firestore/database:Database") == []
    indexes, fields = run.of_type(INDEX), run.of_type(FIELD)
    assert len(indexes) == len(schema.INDEXES)
    assert len(fields) == len(database.field_overrides())
    assert {r.state["database"] for r in [*indexes, *fields]} == {database.DATABASE_NAME}
