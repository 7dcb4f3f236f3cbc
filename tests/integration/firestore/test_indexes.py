"""Strict mode: a compound query no composite index serves is refused as production refuses it
(FAILED_PRECONDITION with a create-index link); definitions come from services/jobs/schema.py
or a firestore.indexes.json."""

from __future__ import annotations

import base64
import json
import urllib.request
from collections.abc import Iterator
from datetime import UTC, datetime
from pathlib import Path
from typing import Any
from urllib.parse import parse_qs, urlparse

import pytest
from google.api_core import exceptions
from google.cloud import firestore
from google.cloud.firestore_admin_v1.types import index as admin_index
from google.cloud.firestore_v1.base_query import FieldFilter
from hypothesis import given, settings
from hypothesis import strategies as st

from emulators.firestore import errors, indexes
from emulators.firestore.server import Emulator, start
from services.jobs import schema

NOW = datetime(2026, 1, 1, tzinfo=UTC)
_PREFIX = "The query requires an index. You can create it here: "


def _ids(query: Any) -> list[str]:
    return [s.id for s in query.stream()]


def _wanted_index(error: exceptions.GoogleAPICallError) -> Any:
    assert error.message.startswith(_PREFIX), error.message
    link = urlparse(error.message[len(_PREFIX) :])
    assert link.netloc == "console.firebase.google.com"
    encoded = parse_qs(link.query)["create_composite"][0]
    raw = base64.urlsafe_b64decode(encoded + "=" * (-len(encoded) % 4))
    return admin_index.Index.pb().FromString(raw)


@pytest.mark.production_strict("composite-index enforcement")
def test_the_declared_index_serves_the_due_query_and_others_are_refused(
    firestore_client: Any, firestore_project: str
) -> None:
    """Production refuses a compound query no composite index serves
    (https://cloud.google.com/firestore/docs/query-data/indexing)."""
    jobs = firestore_client.collection(schema.JOBS)
    jobs.document("a").set({"state": "deferred", "due_at": NOW, "enqueued_at": NOW})
    due = (
        jobs.where(filter=FieldFilter("state", "==", "deferred"))
        .where(filter=FieldFilter("due_at", "<=", NOW))
        .order_by("due_at")
    )
    assert _ids(due) == ["a"]  # (state, due_at) is declared in schema.INDEXES
    other = firestore_client.collection("other")
    unindexed = other.where(filter=FieldFilter("state", "==", "deferred")).where(
        filter=FieldFilter("due_at", "<=", NOW)
    )
    with pytest.raises(exceptions.FailedPrecondition) as caught:
        _ids(unindexed)
    wanted = _wanted_index(caught.value)
    assert wanted.name == (
        f"projects/{firestore_project}/databases/(default)/collectionGroups/other/indexes/_"
    )
    assert [(f.field_path, f.order) for f in wanted.fields] == [
        ("state", 1),
        ("due_at", 1),
        ("__name__", 1),
    ]


def test_queries_single_field_indexes_serve_need_no_declaration(firestore_client: Any) -> None:
    col = firestore_client.collection("free")
    col.document("a").set({"x": 1, "y": 2, "tags": ["t"]})
    eq = FieldFilter("x", "==", 1)
    assert _ids(col.where(filter=eq).where(filter=FieldFilter("y", "==", 2))) == ["a"]
    assert _ids(col.where(filter=FieldFilter("x", ">", 0))) == ["a"]
    assert _ids(col.order_by("y", direction="DESCENDING").limit(1)) == ["a"]
    assert _ids(col.where(filter=FieldFilter("tags", "array_contains", "t"))) == ["a"]
    assert _ids(col.where(filter=eq).order_by("__name__")) == ["a"]
    assert col.where(filter=eq).count().get()[0][0].value == 1


@pytest.mark.production_strict("composite-index enforcement")
@pytest.mark.parametrize(
    "build",
    [
        lambda c: c.order_by("x").order_by("y"),
        lambda c: c.where(filter=FieldFilter("x", ">", 0)).where(filter=FieldFilter("y", "<", 5)),
        lambda c: c.where(filter=FieldFilter("tags", "array_contains", "t")).order_by("x"),
        lambda c: c.where(filter=FieldFilter("x", "==", 1)).order_by("y"),
    ],
    ids=["two-orders", "two-ranges", "contains-and-order", "equality-and-order"],
)
def test_compound_queries_without_an_index_are_refused(firestore_client: Any, build: Any) -> None:
    """Production refuses a compound query no composite index serves
    (https://cloud.google.com/firestore/docs/query-data/indexing)."""
    col = firestore_client.collection("free")
    col.document("a").set({"x": 1, "y": 2, "tags": ["t"]})
    with pytest.raises(exceptions.FailedPrecondition, match="requires an index"):
        _ids(build(col))


@pytest.mark.production_strict("composite-index enforcement")
def test_an_index_serves_only_its_own_directions_and_scope(
    firestore_client: Any, add_index: Any
) -> None:
    """Production refuses a compound query no composite index serves
    (https://cloud.google.com/firestore/docs/query-data/indexing)."""
    add_index("free", "x", "y")
    col = firestore_client.collection("free")
    col.document("a").set({"x": 1, "y": 2})
    assert _ids(col.where(filter=FieldFilter("x", "==", 1)).order_by("y")) == ["a"]
    with pytest.raises(exceptions.FailedPrecondition) as caught:
        _ids(col.where(filter=FieldFilter("x", "==", 1)).order_by("y", direction="DESCENDING"))
    wanted = _wanted_index(caught.value)
    assert [(f.field_path, f.order) for f in wanted.fields][-2:] == [("y", 2), ("__name__", 2)]
    group = firestore_client.collection_group("free")
    with pytest.raises(exceptions.FailedPrecondition) as caught:
        _ids(group.where(filter=FieldFilter("x", "==", 1)).order_by("y"))
    assert _wanted_index(caught.value).query_scope == 2  # COLLECTION_GROUP
    add_index("free", "x", "y", scope="COLLECTION_GROUP")
    assert _ids(group.where(filter=FieldFilter("x", "==", 1)).order_by("y")) == ["a"]


@pytest.mark.production_strict("composite-index enforcement")
def test_aggregations_and_or_queries_need_their_indexes_too(
    firestore_client: Any, add_index: Any
) -> None:
    """Production refuses a compound query no composite index serves
    (https://cloud.google.com/firestore/docs/query-data/indexing)."""
    col = firestore_client.collection("free")
    col.document("a").set({"x": 1, "y": 2, "z": 3})
    filtered = col.where(filter=FieldFilter("x", "==", 1))
    with pytest.raises(exceptions.FailedPrecondition):
        filtered.sum("y").get()
    either = col.where(
        filter=firestore.Or(
            [
                firestore.And([FieldFilter("x", "==", 1), FieldFilter("y", ">", 0)]),
                FieldFilter("z", "==", 3),
            ]
        )
    )
    with pytest.raises(exceptions.FailedPrecondition):
        _ids(either)
    add_index("free", "x", "y")
    assert filtered.sum("y", alias="s").get()[0][0].value == 2
    assert _ids(either) == ["a"]


@pytest.mark.builtin_emulator("strict index mode and the admin endpoint that adds an index")
def test_an_index_added_over_the_admin_api_serves_the_query(
    firestore_client: Any, firestore_emulator: Emulator, firestore_project: str
) -> None:
    col = firestore_client.collection("free")
    col.document("a").set({"x": 1, "y": 2})
    query = col.where(filter=FieldFilter("x", "==", 1)).order_by("y")
    with pytest.raises(exceptions.FailedPrecondition):
        _ids(query)
    body = {
        "project": firestore_project,
        "collectionGroup": "free",
        "queryScope": "COLLECTION",
        "fields": [
            {"fieldPath": "x", "order": "ASCENDING"},
            {"fieldPath": "y", "order": "ASCENDING"},
        ],
    }
    request = urllib.request.Request(
        firestore_emulator.admin_url + "/indexes", json.dumps(body).encode(), method="POST"
    )
    with urllib.request.urlopen(request) as response:
        assert response.status == 200
    assert _ids(query) == ["a"]


@pytest.fixture
def json_strict(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Any]:
    definitions = {
        "indexes": [
            {
                "collectionGroup": "tasks",
                "queryScope": "COLLECTION",
                "fields": [
                    {"fieldPath": "owner", "order": "ASCENDING"},
                    {"fieldPath": "due", "order": "DESCENDING"},
                ],
            }
        ],
        "fieldOverrides": [
            {"collectionGroup": "tasks", "fieldPath": "blob", "indexes": []},
            {
                "collectionGroup": "tasks",
                "fieldPath": "owner",
                "indexes": [{"order": "ASCENDING", "queryScope": "COLLECTION"}],
            },
        ],
    }
    path = tmp_path / "firestore.indexes.json"
    path.write_text(json.dumps(definitions))
    with start(admin_port=None, indexes=indexes.load(str(path))) as emulator:
        monkeypatch.setenv("FIRESTORE_EMULATOR_HOST", emulator.address)
        client = firestore.Client(project="json-strict")
        yield client
        client.close()


def test_definitions_load_from_a_firestore_indexes_json(json_strict: Any) -> None:
    tasks = json_strict.collection("tasks")
    tasks.document("t").set({"owner": "o", "due": 1})
    mine = tasks.where(filter=FieldFilter("owner", "==", "o"))
    assert _ids(mine.order_by("due", direction="DESCENDING")) == ["t"]
    with pytest.raises(exceptions.FailedPrecondition):
        _ids(mine.order_by("due"))
    with pytest.raises(exceptions.FailedPrecondition, match="exemption"):
        _ids(tasks.where(filter=FieldFilter("blob", "==", "x")))
    assert _ids(mine) == ["t"]  # an override that keeps an index is no exemption


@pytest.mark.parametrize(
    ("content", "complaint"),
    [
        ("not json", "not JSON"),
        ('{"fields": []}', "needs an 'indexes' list"),
        (
            '{"indexes": [{"collectionGroup": "c", "fields": [{"order": "ASCENDING"}]}]}',
            "fieldPath",
        ),
        (
            '{"indexes": [{"collectionGroup": "c",'
            ' "fields": [{"fieldPath": "a", "order": "UP"}]}]}',
            "mode 'UP'",
        ),
    ],
)
def test_malformed_definitions_are_refused_with_what_is_wrong(
    tmp_path: Path, content: str, complaint: str
) -> None:
    path = tmp_path / "firestore.indexes.json"
    path.write_text(content)
    with pytest.raises(indexes.IndexDefinitionError, match=complaint):
        indexes.load(str(path))


@pytest.mark.builtin_emulator("strict index mode: index declarations loaded")
def test_python_declarations_load_like_the_schema(firestore_emulator: Emulator) -> None:
    loaded = indexes.load("services.jobs.schema")
    assert [(i.collection_group, [f.path for f in i.fields]) for i in loaded] == [
        (i.collection, [tuple(f.path.split(".")) for f in i.fields]) for i in schema.INDEXES
    ]
    # The exemptions as the Pulumi program leaves them: the schema's and the TTL fields.
    exempt = {(e.collection, (e.field,)) for e in schema.INDEX_EXEMPTIONS}
    exempt |= {(t.collection, (t.field,)) for t in schema.TTL_FIELDS}
    assert loaded.exemptions == exempt
    assert list(indexes.load("services.jobs.schema:INDEXES")) == list(loaded)
    assert indexes.load("services.jobs.schema?shards=1") == loaded
    assert indexes.load("services.jobs.schema:INDEXES").exemptions == frozenset()
    assert firestore_emulator.strict
    with pytest.raises(indexes.IndexDefinitionError, match="cannot load"):
        indexes.load("services.jobs.schema:NO_SUCH_NAME")


def test_a_module_query_loads_the_index_set_of_that_configuration() -> None:
    four = indexes.load("services.jobs.schema?shards=4")
    declared, exempted = schema.index_definitions(4)
    assert [[f.path for f in i.fields] for i in four] == [
        [tuple(f.path.split(".")) for f in i.fields] for i in declared
    ]
    assert four.exemptions == {(e.collection, (e.field,)) for e in exempted}
    assert ("jobs", ("due_at",)) in four.exemptions
    for bad, complaint in [
        ("services.jobs.schema?shards=0", "cannot load"),
        ("services.jobs.schema?shards", "not key=value"),
        ("services.jobs.schema?colour=red", "cannot load"),
        ("services.jobs.schema:INDEXES?shards=4", "neither"),
    ]:
        with pytest.raises(indexes.IndexDefinitionError, match=complaint):
            indexes.load(bad)


@pytest.mark.production_strict("composite-index enforcement")
def test_a_query_on_a_field_exempted_from_indexing_is_refused(firestore_client: Any) -> None:
    """Production refuses a compound query no composite index serves
    (https://cloud.google.com/firestore/docs/query-data/indexing)."""
    jobs = firestore_client.collection(schema.JOBS)
    jobs.document("a").set({"state": "deferred", "cancel_requested": True, "params": {"b": 1}})
    for build in (
        lambda: jobs.where(filter=FieldFilter("cancel_requested", "==", True)),
        lambda: jobs.where(filter=FieldFilter("params.b", "==", 1)),  # inside an exempted map
        lambda: jobs.order_by("history"),
    ):
        with pytest.raises(exceptions.FailedPrecondition, match="disabled by an exemption"):
            _ids(build())
    assert _ids(jobs.where(filter=FieldFilter("state", "==", "deferred"))) == ["a"]
    other = firestore_client.collection("other")  # exemptions belong to their collection group
    other.document("o").set({"cancel_requested": True})
    assert _ids(other.where(filter=FieldFilter("cancel_requested", "==", True))) == ["o"]


_EQUALITY_FIELDS = ("state", "action")
_RANGE_FIELDS = ("due_at", "lease_until", "enqueued_at", "claim.claimed_at")
_ORDER_FIELDS = ("due_at", "lease_until", "state")


@settings(max_examples=200, deadline=None)
@given(
    equals=st.lists(st.sampled_from(_EQUALITY_FIELDS), unique=True, max_size=2),
    range_field=st.none() | st.sampled_from(_RANGE_FIELDS),
    op=st.sampled_from(["<", "<=", ">", ">="]),
    order_by=st.lists(st.sampled_from(_ORDER_FIELDS), unique=True, max_size=2),
)
def test_the_emulator_and_the_schemas_own_check_agree_on_every_store_query_shape(
    firestore_emulator: Emulator,  # the client below needs FIRESTORE_EMULATOR_HOST
    equals: list[str],
    range_field: str | None,
    op: str,
    order_by: list[str],
) -> None:
    """services/jobs/schema.py decides statically which store queries are served (the unit
    tests rely on it); the strict emulator decides at run time. They must agree."""
    from services.store.queries import QuerySpec, structured_query

    spec = QuerySpec(
        schema.JOBS,
        equals=tuple((f, "x") for f in equals),
        ranges=((range_field, op, NOW),) if range_field else (),
        order_by=tuple(order_by),
        limit=10,  # the store always bounds its queries; it also makes this a Query
    )
    # The StructuredQuery the store sends for it.
    query = structured_query(spec, "projects/shapes/databases/(default)/documents")
    served = indexes.IndexSet(indexes.load("services.jobs.schema"))
    try:
        served.check(("shapes", "(default)"), "", query)
        emulator_serves = True
    except errors.FailedPrecondition:
        emulator_serves = False
    assert emulator_serves == schema.is_served(spec.shape), spec
