"""Paced bulk scheduling against the emulator's own write counters: `schedule_paced` keeps every
`due_at` index range under its rate, where one unpaced `schedule_many` goes over it.

The pacer runs on the system clock here (the emulator counts by commit time) at a scale-model
rate, 20 writes/s per range against a stand-in limit of 25 (the production 400 against 500);
the assertions are the emulator's counts, not times."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest
from google.cloud import firestore

from services.jobs.clock import FakeClock, SystemClock
from services.jobs.results import ScheduleResult
from services.jobs.write_pacer import WritePacer
from services.store.job_store import FirestoreJobStore
from tests.fixtures.firestore import FirestoreStats
from tests.integration.jobs.conftest import new_job

pytestmark = pytest.mark.builtin_emulator("write-rate counters")

SHARDS = 4
RATE, LIMIT = 20, 25  # per range: the pacer's aim, the scale model's limit


def _due_at_peaks(stats: dict[str, Any]) -> dict[Any, int]:
    return {
        r["shard"]: r["peak_writes_per_s"]
        for r in stats["write_rates"]
        if r["collection"] == "jobs" and r["field"] == "due_at"
    }


@pytest.fixture
def sharded(
    firestore_client: firestore.Client, clock: FakeClock, shard_indexes: Callable[[int], None]
) -> FirestoreJobStore:
    shard_indexes(SHARDS)  # the N = 4 index set: one due_at range per shard, none unsharded
    return FirestoreJobStore(firestore_client, clock, shards=SHARDS)


def test_paced_scheduling_keeps_every_range_under_its_rate_where_one_batch_goes_over(
    sharded: FirestoreJobStore, firestore_stats: FirestoreStats
) -> None:
    firestore_stats.reset()
    unpaced = sharded.schedule_many([new_job(f"burst-{n:03d}") for n in range(200)])
    assert all(isinstance(o, ScheduleResult) and o.created for o in unpaced)
    assert max(_due_at_peaks(firestore_stats.get()).values()) > LIMIT

    firestore_stats.reset()
    pacer = WritePacer(SystemClock(), SHARDS, per_range_per_s=RATE, ramp_start_per_s=40)
    jobs = [new_job(f"paced-{n:03d}") for n in range(200)]
    outcomes = [o for batch in sharded.schedule_paced(jobs, pacer) for o in batch]
    assert len(outcomes) == 200
    assert all(isinstance(o, ScheduleResult) and o.created for o in outcomes)
    peaks = _due_at_peaks(firestore_stats.get())
    assert set(peaks) == set(range(SHARDS))  # one range per shard, nothing unsharded
    assert max(peaks.values()) <= LIMIT


def test_a_pacer_for_another_shard_count_is_refused(sharded: FirestoreJobStore) -> None:
    pacer = WritePacer(SystemClock(), 1)
    with pytest.raises(ValueError, match="paces 1 index range"):
        list(sharded.schedule_paced([new_job("x")], pacer))
