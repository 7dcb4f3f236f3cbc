"""Aggregations as production runs them: sum() and avg() with a limit take the first N in the
order of the aggregated field, and malformed aggregations get production's messages."""

from __future__ import annotations

from typing import Any

import pytest
from google.api_core import exceptions
from google.cloud.firestore_v1 import aggregation
from google.cloud.firestore_v1.base_query import FieldFilter


@pytest.fixture
def scores(firestore_client: Any) -> Any:
    col = firestore_client.collection("scores")
    # By name a..f; by value b(10) < d(20) < e(30) < c(40) < a(50); f has no value.
    values = {"a": 50, "b": 10, "c": 40, "d": 20, "e": 30}
    for name, value in values.items():
        col.document(name).set({"v": value, "kind": "x"})
    col.document("f").set({"kind": "x"})
    return col


def _values(query: Any) -> dict[str, Any]:
    return {r.alias: r.value for r in query.get()[0]}


def test_sum_and_avg_with_a_limit_take_the_smallest_values_first(scores: Any) -> None:
    assert _values(scores.limit(2).sum("v", alias="s")) == {"s": 30}  # 10 + 20, not a + b
    assert _values(scores.limit(3).avg("v", alias="m")) == {"m": 20.0}
    assert _values(scores.sum("v", alias="s")) == {"s": 150}
    assert _values(scores.limit(2).count(alias="n")) == {"n": 2}


def test_the_implied_order_follows_the_last_explicit_direction(scores: Any, add_index: Any) -> None:
    add_index("scores", "kind", "v")
    query = scores.order_by("v", direction="DESCENDING").limit(2)
    assert _values(query.sum("v", alias="s")) == {"s": 90}  # 50 + 40
    by_kind = scores.where(filter=FieldFilter("kind", "==", "x")).limit(2)
    assert _values(by_kind.sum("v", alias="s")) == {"s": 30}


def test_a_limit_counts_only_documents_that_have_the_aggregated_field(scores: Any) -> None:
    agg = aggregation.AggregationQuery(scores.limit(10))
    agg.count(alias="n").sum("v", alias="s")
    assert _values(agg) == {"n": 5, "s": 150}  # f has no v: not in the field's index


def test_a_duplicate_alias_is_refused_with_productions_message(scores: Any) -> None:
    with pytest.raises(exceptions.InvalidArgument) as caught:
        scores.count(alias="total").count(alias="total").get()
    assert "Aggregation aliases contain duplicate alias" in caught.value.message


def test_no_aggregation_is_refused_with_productions_message(scores: Any) -> None:
    with pytest.raises(exceptions.InvalidArgument) as caught:
        aggregation.AggregationQuery(scores.where(filter=FieldFilter("kind", "==", "x"))).get()
    assert "Aggregations can not be empty" in caught.value.message


def test_default_aliases_number_only_the_unnamed_aggregations(
    firestore_client: Any, scores: Any
) -> None:
    responses = firestore_client._firestore_api.run_aggregation_query(
        request={
            "parent": firestore_client._database_string + "/documents",
            "structured_aggregation_query": {
                "structured_query": scores.limit(10)._to_protobuf(),
                "aggregations": [
                    {"alias": "named", "count": {}},
                    {"count": {"up_to": 2}},
                    {"sum": {"field": {"field_path": "v"}}},
                ],
            },
        }
    )
    (fields,) = [dict(r.result.aggregate_fields) for r in responses]
    assert set(fields) == {"named", "field_1", "field_2"}


def test_a_sum_or_avg_after_an_explicit_name_order_is_refused_as_no_index_serves_it(
    scores: Any,
) -> None:
    """The aggregated field is an implied order, and no index has a field after __name__:
    Google's emulator refuses these (with or without a cursor or limit) and so does the
    built-in one. Ordered by the aggregated field first, a cursor reads right."""
    after_b = scores.order_by("__name__").start_after(scores.document("b").get()).limit(2)
    for refused in (after_b.sum("v"), scores.order_by("__name__").avg("v")):
        with pytest.raises(exceptions.InvalidArgument, match=r"\[v\] after __name__"):
            refused.get()
    after_20 = scores.order_by("v").start_after({"v": 20}).limit(2)
    assert _values(after_20.sum("v", alias="s")) == {"s": 70}  # e(30) + c(40), by value
