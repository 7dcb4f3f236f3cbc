"""`scanPartitions`: k Scheduler jobs, each naming its partition in its body, the shards split
so that every shard is in exactly one partition, and the scan told the same k (Pulumi mocks)."""

from __future__ import annotations

import base64
import json

import pytest

from services.edge.settings import CLOUD_RUN_SERVICE
from services.scan.partitions import PartitionError, partition_shards, shards_of
from services.scan.settings import SCAN_PARTITIONS, ScanSettings
from tests.infra.conftest import StackRun, run_stack

JOB = "cloudscheduler/job:Job"


def _scan_envs(run: object) -> dict[str, str]:
    service = run.one("cloudrunv2/service:Service", "scan-service").state  # type: ignore[attr-defined]
    envs = service["template"]["containers"][0]["envs"]
    return {e["name"]: e["value"] for e in envs if e["name"].startswith("JOBS_")}


def test_one_partition_keeps_the_single_job_with_an_empty_body() -> None:
    run = run_stack("prod")
    (job,) = run.of_type(JOB)
    assert job.name == "scan-trigger"
    assert "body" not in job.state["httpTarget"] or not job.state["httpTarget"].get("body")
    assert _scan_envs(run)[SCAN_PARTITIONS] == "1"


def test_k_partitions_make_k_jobs_each_naming_its_partition() -> None:
    overrides = {"shards": 8, "scanPartitions": 4, "scanMaxInstances": 2, "scanConcurrency": 2}
    run = run_stack("prod", overrides=overrides)
    jobs = sorted(run.of_type(JOB), key=lambda r: r.name)
    assert [j.name for j in jobs] == [f"scan-trigger-p{p}" for p in range(4)]
    bodies = [json.loads(base64.b64decode(j.state["httpTarget"]["body"])) for j in jobs]
    assert bodies == [{"partition": p} for p in range(4)]
    for job in jobs:
        target = job.state["httpTarget"]
        assert target["headers"] == {"Content-Type": "application/json"}
        # Every partition's job is signed for the scan as the single job was.
        assert target["oidcToken"]["audience"] == target["uri"]
        assert job.state["schedule"] == "* * * * *"
    assert len({j.state["name"] for j in jobs}) == 4
    # K_SERVICE: Cloud Run sets it in every container (the behind-IAM flag requires it).
    settings = ScanSettings.from_env({**_scan_envs(run), CLOUD_RUN_SERVICE: "deferred-jobs-scan"})
    assert (settings.partitions, settings.shards) == (4, 8)


@pytest.mark.parametrize(("partitions", "shards"), [(1, 1), (2, 4), (3, 8), (4, 4), (7, 64)])
def test_every_shard_is_in_exactly_one_partition(partitions: int, shards: int) -> None:
    groups = partition_shards(partitions, shards)
    owned = [s for group in groups.values() for s in group]
    assert sorted(owned) == list(range(shards))
    assert len(owned) == len(set(owned))
    sizes = [len(g) for g in groups.values()]
    assert max(sizes) - min(sizes) <= 1


def test_a_partition_without_shards_is_refused() -> None:
    with pytest.raises(PartitionError):
        partition_shards(5, 4)
    with pytest.raises(PartitionError):
        shards_of(4, 4, 8)
    assert shards_of(0, 1, 8) is None


# --- the gauges carry their partition ---------------------------------------------------


def test_every_scan_gauge_descriptor_declares_the_partition_label(prod: StackRun) -> None:
    from services.telemetry import metrics

    descriptors = prod.of_type("monitoring/metricDescriptor:MetricDescriptor")
    assert len(descriptors) == len(metrics.SCAN_GAUGES)
    for descriptor in descriptors:
        assert descriptor.state["labels"] == [
            {
                "key": metrics.PARTITION_LABEL,
                "valueType": "STRING",
                "description": "the scan partition whose run wrote the point",
            }
        ]


def test_gauge_alerts_reduce_over_partitions_and_absence_is_per_partition(
    prod: StackRun,
) -> None:
    from infra.monitoring import GAUGE_REDUCER
    from services.telemetry import metrics

    gauges = {g.type for g in metrics.SCAN_GAUGES}
    reduced = absent = 0
    for policy in prod.of_type("monitoring/alertPolicy:AlertPolicy"):
        (condition,) = policy.state["conditions"]
        body = condition.get("conditionThreshold") or condition["conditionAbsent"]
        if body["filter"].split('"')[1] not in gauges:
            continue
        if "conditionAbsent" in condition:
            absent += 1
            assert "aggregations" not in body  # each partition's series on its own
            continue
        reduced += 1
        assert [a["crossSeriesReducer"] for a in body["aggregations"]] == [GAUGE_REDUCER]
    assert (reduced, absent) == (5, 1)


def test_two_partitions_write_two_series_of_each_gauge() -> None:
    from services.edge.monitoring import CloudMonitoringSink
    from services.telemetry.metrics import PARTITION_LABEL, SCAN_GAUGES, ScanReport

    sink = CloudMonitoringSink(client=None, project="p", now=lambda: 1_700_000_000.0)
    series = [
        s
        for partition in (0, 1)
        for s in sink.time_series(ScanReport("r", 0.0, 0, 0, 0, 0, 0, 0, 0.0, partition=partition))
    ]
    keys = {(s.metric.type, s.metric.labels[PARTITION_LABEL]) for s in series}
    assert len(keys) == len(series) == 2 * len(SCAN_GAUGES)
