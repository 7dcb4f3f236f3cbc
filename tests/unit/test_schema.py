from services.jobs import metrics, schema


def test_every_index_is_on_a_declared_collection_and_starts_with_the_equality_field() -> None:
    collections = {schema.JOBS, schema.IDEMPOTENCY, schema.CONTROL, schema.SCAN_RUNS}
    for index in schema.INDEXES:
        assert index.collection in collections
        assert index.field_paths[0] == "state"
        assert len(set(index.field_paths)) == len(index.field_paths)


def test_metric_names_are_unique() -> None:
    gauges = [g.type for g in metrics.SCAN_GAUGES]
    logs = [m.name for m in metrics.LOG_METRICS]
    assert len(gauges) == len(set(gauges))
    assert len(logs) == len(set(logs))
