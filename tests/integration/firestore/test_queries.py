"""RunQuery and RunAggregationQuery semantics through the real client."""

from __future__ import annotations

import datetime as dt
import math
from typing import Any

import pytest
from google.cloud import firestore
from google.cloud.firestore_v1.base_query import And, FieldFilter, Or
from google.cloud.firestore_v1.vector import Vector

UTC = dt.UTC


@pytest.fixture
def numbers(firestore_client: Any) -> Any:
    col = firestore_client.collection("nums")
    batch = firestore_client.batch()
    for i in range(10):
        batch.set(
            col.document(f"n{i}"),
            {
                "i": i,
                "parity": "even" if i % 2 == 0 else "odd",
                "tags": [f"t{i % 3}", "all"],
                "maybe": None if i == 0 else i,
            },
        )
    batch.set(col.document("nofield"), {"other": True})
    batch.commit()
    return col


def ids(query: Any) -> list[str]:
    return [d.id for d in query.stream()]


@pytest.mark.parametrize(
    ("op", "value", "expected"),
    [
        ("<", 3, ["n0", "n1", "n2"]),
        ("<=", 2, ["n0", "n1", "n2"]),
        (">", 7, ["n8", "n9"]),
        (">=", 8, ["n8", "n9"]),
        ("==", 4, ["n4"]),
        ("!=", 4, ["n0", "n1", "n2", "n3", "n5", "n6", "n7", "n8", "n9"]),
        ("in", [1, 5, 42], ["n1", "n5"]),
        ("not-in", [0, 1, 2, 3, 4, 5, 6], ["n7", "n8", "n9"]),
    ],
)
def test_field_filters_match_like_production(
    numbers: Any, op: str, value: Any, expected: list[str]
) -> None:
    assert ids(numbers.where(filter=FieldFilter("i", op, value))) == expected


def test_array_contains_and_array_contains_any(numbers: Any) -> None:
    assert ids(numbers.where(filter=FieldFilter("tags", "array_contains", "t1"))) == [
        "n1",
        "n4",
        "n7",
    ]
    got = ids(numbers.where(filter=FieldFilter("tags", "array_contains_any", ["t2", "zz"])))
    assert got == ["n2", "n5", "n8"]


def test_null_and_nan_unary_filters(firestore_client: Any) -> None:
    col = firestore_client.collection("u")
    col.document("null").set({"v": None})
    col.document("nan").set({"v": math.nan})
    col.document("one").set({"v": 1})
    col.document("none").set({"w": 1})
    assert ids(col.where(filter=FieldFilter("v", "==", None))) == ["null"]
    assert ids(col.where(filter=FieldFilter("v", "!=", None))) == ["nan", "one"]
    assert ids(col.where(filter=FieldFilter("v", "==", math.nan))) == ["nan"]
    assert ids(col.where(filter=FieldFilter("v", "!=", math.nan))) == ["one"]


def test_composite_and_or_filters(numbers: Any, add_index: Any) -> None:
    add_index("nums", "parity", "i")
    both = And([FieldFilter("parity", "==", "odd"), FieldFilter("i", ">", 4)])
    assert ids(numbers.where(filter=both)) == ["n5", "n7", "n9"]
    either = Or([FieldFilter("i", "==", 1), FieldFilter("parity", "==", "even")])
    assert sorted(ids(numbers.where(filter=either))) == ["n0", "n1", "n2", "n4", "n6", "n8"]
    nested = Or(
        [
            And([FieldFilter("i", ">=", 8), FieldFilter("parity", "==", "odd")]),
            FieldFilter("i", "==", 0),
        ]
    )
    assert sorted(ids(numbers.where(filter=nested))) == ["n0", "n9"]


def test_order_by_excludes_documents_lacking_the_field_and_breaks_ties_by_name(
    numbers: Any, add_index: Any
) -> None:
    add_index("nums", "parity", ("i", "DESCENDING"))
    got = ids(numbers.order_by("parity").order_by("i", direction="DESCENDING"))
    assert got == ["n8", "n6", "n4", "n2", "n0", "n9", "n7", "n5", "n3", "n1"]
    assert "nofield" not in ids(numbers.order_by("i"))
    assert ids(numbers.order_by("parity").limit(3)) == ["n0", "n2", "n4"]


def test_cursors_offset_limit_and_limit_to_last(numbers: Any) -> None:
    by_i = numbers.order_by("i")
    assert ids(by_i.start_at({"i": 7})) == ["n7", "n8", "n9"]
    assert ids(by_i.start_after({"i": 7})) == ["n8", "n9"]
    assert ids(by_i.end_at({"i": 1})) == ["n0", "n1"]
    assert ids(by_i.end_before({"i": 1})) == ["n0"]
    assert ids(by_i.offset(2).limit(3)) == ["n2", "n3", "n4"]
    snapshot = numbers.document("n5").get()
    assert ids(by_i.start_after(snapshot).limit(2)) == ["n6", "n7"]
    desc = numbers.order_by("i", direction="DESCENDING")
    assert ids(desc.start_at({"i": 2})) == ["n2", "n1", "n0"]
    # Last: the client flips the orders of the query it was called on, in place.
    assert [d.id for d in numbers.order_by("i").limit_to_last(2).get()] == ["n8", "n9"]


def test_pagination_with_document_cursor_on_equal_values(numbers: Any) -> None:
    query = numbers.order_by("parity").limit(4)
    seen: list[str] = []
    page = list(query.stream())
    while page:
        seen.extend(d.id for d in page)
        page = list(query.start_after(page[-1]).stream())
    assert seen == ["n0", "n2", "n4", "n6", "n8", "n1", "n3", "n5", "n7", "n9"]


def test_values_of_different_types_order_like_firestore(firestore_client: Any) -> None:
    col = firestore_client.collection("mixed")
    ref = firestore_client.collection("x").document("y")
    values = {
        "a_null": None,
        "b_false": False,
        "c_true": True,
        "d_nan": math.nan,
        "e_neg": -5,
        "f_int": 1,
        "g_float": 1.5,
        "h_time": dt.datetime(2020, 1, 1, tzinfo=UTC),
        "i_str": "abc",
        "j_bytes": b"\x00\x01",
        "k_ref": ref,
        "l_geo": firestore.GeoPoint(1.0, 2.0),
        "m_array": [1, 2],
        "n_vector": Vector([1.0]),
        "o_map": {"a": 1},
    }
    batch = firestore_client.batch()
    for name, value in values.items():
        batch.set(col.document(name), {"v": value})
    batch.commit()
    assert ids(col.order_by("v")) == sorted(values)
    assert ids(col.order_by("v", direction="DESCENDING")) == sorted(values, reverse=True)
    assert ids(col.where(filter=FieldFilter("v", ">", 0))) == ["f_int", "g_float"]
    assert ids(col.where(filter=FieldFilter("v", ">=", "a"))) == ["i_str"]


def test_integers_and_doubles_compare_as_numbers(firestore_client: Any) -> None:
    col = firestore_client.collection("n")
    col.document("int").set({"v": 1})
    col.document("double").set({"v": 1.0})
    col.document("half").set({"v": 0.5})
    assert sorted(ids(col.where(filter=FieldFilter("v", "==", 1)))) == ["double", "int"]
    assert ids(col.order_by("v").limit(1)) == ["half"]


def test_strings_order_by_utf8_bytes(firestore_client: Any) -> None:
    col = firestore_client.collection("s")
    for name, value in {"a": "Z", "b": "a", "c": "é", "d": "😀", "e": "\uffff"}.items():
        col.document(name).set({"v": value})
    assert ids(col.order_by("v")) == ["a", "b", "c", "e", "d"]


def test_collection_group_query_spans_parents_and_respects_the_parent_prefix(
    firestore_client: Any,
) -> None:
    jobs = firestore_client.collection("jobs")
    jobs.document("a").collection("runs").document("r1").set({"ok": True})
    jobs.document("b").collection("runs").document("r2").set({"ok": False})
    firestore_client.collection("runs").document("r3").set({"ok": True})
    group = firestore_client.collection_group("runs")
    assert ids(group) == ["r3", "r1", "r2"] or sorted(ids(group)) == ["r1", "r2", "r3"]
    assert sorted(ids(group.where(filter=FieldFilter("ok", "==", True)))) == ["r1", "r3"]
    assert ids(jobs.document("a").collection("runs")) == ["r1"]


def test_projection_returns_only_selected_fields(numbers: Any) -> None:
    docs = list(numbers.where(filter=FieldFilter("i", "==", 3)).select(["parity"]).stream())
    assert [d.to_dict() for d in docs] == [{"parity": "odd"}]
    names_only = list(numbers.where(filter=FieldFilter("i", "==", 3)).select([]).stream())
    assert names_only[0].to_dict() == {}


def test_query_on_nested_map_field(firestore_client: Any) -> None:
    col = firestore_client.collection("docs")
    col.document("a").set({"claim": {"generation": 2}})
    col.document("b").set({"claim": {"generation": 5}})
    assert ids(col.where(filter=FieldFilter("claim.generation", ">", 3))) == ["b"]


def test_count_sum_and_avg_aggregations(numbers: Any, add_index: Any) -> None:
    add_index("nums", "parity", "i")  # sum/avg scan i's index within parity == odd
    from google.cloud.firestore_v1 import aggregation

    query = numbers.where(filter=FieldFilter("parity", "==", "odd"))
    agg = aggregation.AggregationQuery(query)
    agg.count(alias="n").sum("i", alias="total").avg("i", alias="mean")
    result = {r.alias: r.value for r in agg.get()[0]}
    assert result == {"n": 5, "total": 25, "mean": 5.0}
    assert numbers.count().get()[0][0].value == 11


def _raw_aggregation(client: Any, query: Any, aggregation: dict[str, Any]) -> Any:
    """The raw AggregationResult fields (the client maps null to 0.0; the wire says null)."""
    responses = client._firestore_api.run_aggregation_query(
        request={
            "parent": client._database_string + "/documents",
            "structured_aggregation_query": {
                "structured_query": query._to_protobuf(),
                "aggregations": [aggregation],
            },
        }
    )
    return [r.result.aggregate_fields for r in responses]


def test_avg_over_no_numeric_values_is_null(firestore_client: Any, numbers: Any) -> None:
    query = numbers.where(filter=FieldFilter("i", ">", 100))
    fields = _raw_aggregation(
        firestore_client, query, {"alias": "a", "avg": {"field": {"field_path": "i"}}}
    )
    assert "null_value" in fields[0]["a"]


def test_count_up_to_caps_the_count(firestore_client: Any, numbers: Any) -> None:
    query = numbers.where(filter=FieldFilter("i", ">=", 0))
    fields = _raw_aggregation(firestore_client, query, {"alias": "c", "count": {"up_to": 3}})
    assert [f["c"].integer_value for f in fields] == [3]


def test_query_inside_a_read_only_transaction_sees_its_snapshot(numbers: Any) -> None:
    client = numbers._client
    transaction = client.transaction(read_only=True)
    transaction._begin()
    numbers.document("n0").delete()
    assert "n0" in ids_in(numbers.order_by("i"), transaction)
    transaction._rollback()


def ids_in(query: Any, transaction: Any) -> list[str]:
    return [d.id for d in query.stream(transaction=transaction)]


@pytest.mark.builtin_emulator("billing counters")
def test_query_billing_counts_returned_documents_with_a_minimum_of_one(
    numbers: Any, firestore_stats: Any
) -> None:
    firestore_stats.reset()
    assert ids(numbers.where(filter=FieldFilter("i", "<", 3))) == ["n0", "n1", "n2"]
    assert firestore_stats.get()["document_reads"] == 3
    firestore_stats.reset()
    assert ids(numbers.where(filter=FieldFilter("i", ">", 100))) == []
    assert firestore_stats.get()["document_reads"] == 1
    firestore_stats.reset()
    assert numbers.count().get()[0][0].value == 11
    stats = firestore_stats.get()
    assert stats["document_reads"] == 1
    assert stats["index_entries_counted"] == 11
    assert stats["calls"] == {"RunAggregationQuery": 1}


@pytest.mark.builtin_emulator("billing counters")
def test_documents_skipped_by_an_offset_are_billed(numbers: Any, firestore_stats: Any) -> None:
    firestore_stats.reset()
    assert ids(numbers.order_by("i").offset(4).limit(2)) == ["n4", "n5"]
    assert firestore_stats.get()["document_reads"] == 6


@pytest.mark.builtin_emulator("billing counters")
def test_reads_inside_a_transaction_are_billed_like_reads_outside(
    numbers: Any, firestore_stats: Any
) -> None:
    client = numbers._client
    firestore_stats.reset()

    @firestore.transactional
    def read_three(transaction: Any) -> list[str]:
        query = numbers.where(filter=FieldFilter("i", "<", 3))
        return [d.id for d in query.stream(transaction=transaction)]

    assert read_three(client.transaction()) == ["n0", "n1", "n2"]
    stats = firestore_stats.get()
    assert stats["document_reads"] == 3
    assert stats["calls"] == {"BeginTransaction": 1, "Commit": 1, "RunQuery": 1}
