import pytest

from services.jobs import schema
from services.telemetry import metrics


@pytest.mark.parametrize("shards", [1, 2, 64])
def test_every_index_is_on_a_declared_collection_and_starts_with_an_equality_field(
    shards: int,
) -> None:
    collections = {schema.JOBS, schema.IDEMPOTENCY, schema.CONTROL, schema.SCAN_RUNS}
    for index in schema.composite_indexes(shards):
        assert index.collection in collections
        assert index.field_paths[0] in ("state", schema.SHARD)
        assert len(set(index.field_paths)) == len(index.field_paths)


@pytest.mark.parametrize("shards", [1, 4])
def test_queries_and_indexes_agree_for_each_shard_count(shards: int) -> None:
    # Each declared query is served by that N's indexes and exemptions, and each declared
    # composite index serves a query of that N or of N > 1 (built ahead of raising N).
    indexes, exemptions = schema.index_definitions(shards)
    shapes = schema.query_shapes(shards)
    assert all(schema.is_served(s, indexes, exemptions) for s in shapes)
    later = schema.query_shapes(max(shards, 2))
    used = {schema.serving_index(s, indexes) for s in (*shapes, *later)}
    assert set(indexes) <= used


def test_the_index_set_of_a_bad_shard_count_is_refused() -> None:
    for bad in (0, 65):
        with pytest.raises(ValueError, match="shards"):
            schema.composite_indexes(bad)


def test_metric_names_are_unique() -> None:
    gauges = [g.type for g in metrics.SCAN_GAUGES]
    logs = [m.name for m in metrics.LOG_METRICS]
    assert len(gauges) == len(set(gauges))
    assert len(logs) == len(set(logs))
