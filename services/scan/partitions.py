"""Partitions: k Cloud Scheduler jobs, each running the scan over its own group of shards.

One scan process tops out near 2,000 claims/s however many shards it claims in parallel
(docs/capacity.md); k partitions are k runs at once, on k Cloud Run request slots, each with
its own lease (services/store/partition_leases.py) and 1/k of the catch-up rate
(budget.partition_share), so together they drain at the rate the operator set, never k times
it. Shard s belongs to partition s mod k: every shard in exactly one partition, and the groups
differ in size by at most one. The Pulumi program creates one Scheduler job per partition with
`{"partition": p}` as its body (infra/scheduler.py); both sides import this module.
"""

from __future__ import annotations

from collections.abc import Mapping


class PartitionError(ValueError):
    """The partition count does not fit the shard count."""


def partition_shards(partitions: int, shards: int) -> Mapping[int, tuple[int, ...]]:
    """{partition: its shards}; raises PartitionError unless 1 <= partitions <= shards."""
    if partitions < 1 or shards < 1:
        raise PartitionError(f"partitions ({partitions}) and shards ({shards}) must be >= 1")
    if partitions > shards:
        raise PartitionError(
            f"{partitions} partitions need at least as many shards; the deployment has {shards}"
        )
    groups = {p: tuple(range(p, shards, partitions)) for p in range(partitions)}
    owned = sorted(s for group in groups.values() for s in group)
    # The invariant the infra and the scan both rely on, checked where it is made.
    if owned != list(range(shards)):
        raise PartitionError("every shard must be in exactly one partition")
    return groups


def shards_of(partition: int, partitions: int, shards: int) -> tuple[int, ...] | None:
    """The shards partition `partition` claims; None with one partition (all of them, as an
    unpartitioned scan: the store's own unsharded query at shards 1)."""
    if partitions == 1:
        if partition != 0:
            raise PartitionError(f"partition {partition} does not exist (1 partition)")
        return None
    groups = partition_shards(partitions, shards)
    if partition not in groups:
        raise PartitionError(f"partition {partition} is outside 0-{partitions - 1}")
    return groups[partition]
