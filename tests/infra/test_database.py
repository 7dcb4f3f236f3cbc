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


# --- a field is indexed only if a query needs it ----------------------------------------------


def _store_query_shapes() -> set[schema.QueryShape]:
    from tests.unit.jobs.test_indexes import every_store_query

    return {spec.shape for spec in every_store_query()}


def _needed_by_queries(shapes: Iterable[schema.QueryShape]) -> set[Key]:
    """Independently of schema.py's helpers: a query that no composite index serves uses the
    automatic single-field indexes of every field it filters or orders on."""
    needed = set()
    for shape in shapes:
        if schema.serving_index(shape) is not None:
            continue  # a composite index serves it; single-field indexes play no part
        for path in {*shape.equality, *(f.path for f in shape.ordered)}:
            needed.add((shape.collection, path.split(".")[0]))
    return needed


def test_every_query_the_store_runs_is_a_declared_query_shape() -> None:
    store = _store_query_shapes()
    jobs_shapes = {s for s in schema.QUERY_SHAPES if s.collection == schema.JOBS}
    assert store == jobs_shapes


def test_a_field_is_indexed_only_if_a_query_needs_it() -> None:
    needed = _needed_by_queries(schema.QUERY_SHAPES)
    assert {(schema.JOBS, "state"), (schema.JOBS, "due_at")} <= needed
    exempt = _exemption_keys()
    for collection, fields in schema.DOCUMENT_FIELDS.items():
        for name in fields:
            key = (collection, name)
            # exempt exactly when nothing needs it: no query loses an index, no index is idle
            assert (key in exempt) == (key not in needed), key
    assert exempt <= {(c, f) for c, fields in schema.DOCUMENT_FIELDS.items() for f in fields}


def test_the_growing_timestamps_of_the_jobs_collection_are_not_indexed() -> None:
    exempt = _exemption_keys()
    for name in ("updated_at", "created_at", "scheduled_due_at", "enqueued_at", "lease_until"):
        assert (schema.JOBS, name) in exempt, name
    assert (schema.JOBS, "claim") in exempt  # claim.claimed_at is in a composite index only
    assert (schema.IDEMPOTENCY, "completed_at") in exempt


def test_the_declared_fields_are_the_fields_the_documents_have() -> None:
    from datetime import UTC, datetime

    from services.jobs.model import NewJob
    from services.jobs.record import Job
    from services.jobs.results import IdempotencyRecord
    from services.store.rejections import rejection_of

    now = datetime(2026, 1, 1, tzinfo=UTC)
    job = Job.create(NewJob("job-1", "media.delete_source", "s", now), now)
    assert set(job.to_document()) == set(schema.DOCUMENT_FIELDS[schema.JOBS])
    record = IdempotencyRecord("k", "job-1", "a", "s", "done", {}, now, now)
    assert set(record.to_document()) == set(schema.DOCUMENT_FIELDS[schema.IDEMPOTENCY])
    rejection = rejection_of("bad", "detail", b"{}", {}, received_at=now)
    assert set(rejection.to_document()) == set(schema.DOCUMENT_FIELDS[schema.REJECTED])


def test_exemptions_follow_the_declarations_for_a_new_field() -> None:
    # A new field (say a `shard` the scan filters on) is exempt while only a composite index
    # serves its queries, and indexed as soon as a query needs its single-field index.
    fields = {schema.JOBS: ("state", "due_at", "shard")}
    composite = schema.QueryShape(
        schema.JOBS, frozenset({"state", "shard"}), (schema.IndexField("due_at"),)
    )
    only_equalities = schema.QueryShape(schema.JOBS, frozenset({"shard"}), ())
    exempt = {e.field for e in schema.index_exemptions(fields, (composite,))}
    assert exempt == {"state", "due_at", "shard"}
    exempt = {e.field for e in schema.index_exemptions(fields, (composite, only_equalities))}
    assert exempt == {"state", "due_at"}


def test_the_stack_leaves_indexed_what_queries_need(stack: StackRun) -> None:
    configured = set(_keys(stack.of_type(FIELD)))
    for key in _needed_by_queries(schema.QUERY_SHAPES):
        assert key not in configured, key


def test_index_configuration_changes_run_one_at_a_time(stack: StackRun) -> None:
    # Firestore answers 409 to concurrent index and field operations on one database.
    ordered = [
        *(database.index_resource_name(i) for i in schema.INDEXES),
        *(database.field_resource_name(o) for o in database.field_overrides()),
        *(r.name for r in stack.of_type("firestore/backupSchedule:BackupSchedule")),
    ]
    assert len(ordered) > 20
    for position, name in enumerate(ordered):
        assert set(ordered[:position]) <= stack.waits_for(name), name
