"""Overlapping runs share the rate: a partition's lease and Cloud Scheduler's duplicate
requests, with real concurrency against the emulators (two scan instances over HTTP through
the local Cloud Run front end, sharing one Firestore and one topic).

A paced run claims its budget over its time budget; its waits advance the shared FakeClock and
really sleep a little, so a second request arrives while the first still claims.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from datetime import timedelta
from typing import Any

import pytest

from services.edge.scheduler_request import JOB_NAME_HEADER, SCHEDULE_TIME_HEADER
from services.jobs import schema
from services.store.partition_leases import lease_document_id
from tests.integration.scan.conftest import Rig

JOB = "deferred-jobs-scan"
AT = "2026-06-01T12:01:00Z"


def scheduled(at: str = AT) -> dict[str, str]:
    return {JOB_NAME_HEADER: JOB, SCHEDULE_TIME_HEADER: at}


def paced_pair(scan_rig: Callable[..., Rig]) -> tuple[Rig, Rig]:
    """Two scan instances (own app, scanner, publisher) over one Firestore and one clock."""

    def slow(rig_clock: list[Any]) -> Callable[[float], None]:
        def sleep(seconds: float) -> None:
            time.sleep(min(seconds, 0.02))
            rig_clock[0].advance(timedelta(seconds=seconds))

        return sleep

    clock_box: list[Any] = []
    settings = {
        "mode": "paced",
        "time_budget_s": 20.0,
        "interval_s": 30.0,
        "max_per_run": 10_000,
        "page_size": 50,
        "end_when_idle": False,
        "poll_s": 2.0,
    }
    first = scan_rig(sleep=slow(clock_box), **settings)
    clock_box.append(first.clock)
    second = scan_rig(clock=first.clock, sleep=slow(clock_box), **settings)
    # 5 jobs/s x 30 s = 150 per run, paced over the 20 s run at 7.5/s (pages of 4).
    first.store.update_control("test", "paced overlap test", catch_up_rate=5, claim_budget=10_000)
    return first, second


def wait_for_holder(rig: Rig, timeout_s: float = 30.0) -> str:
    ref = rig.client.collection(schema.CONTROL).document(lease_document_id(0))
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        snapshot = ref.get()
        holder = (snapshot.to_dict() or {}).get("holder") if snapshot.exists else None
        if holder:
            return str(holder)
        time.sleep(0.02)
    raise AssertionError("the first run never took the lease")


def post_in_thread(rig: Rig, headers: dict[str, str], out: list[Any]) -> threading.Thread:
    def call() -> None:
        out.append(rig.post(headers=headers))

    thread = threading.Thread(target=call)
    thread.start()
    return thread


def test_a_scheduler_retry_and_a_manual_run_during_a_run_claim_nothing(
    scan_rig: Callable[..., Rig],
) -> None:
    first, second = paced_pair(scan_rig)
    ids = first.seed(1000)
    answers: list[Any] = []
    running = post_in_thread(first, scheduled(), answers)
    holder = wait_for_holder(first)
    # The same scheduled execution again (Cloud Scheduler's retry after the attempt
    # deadline), on another instance, while the first still claims:
    retry = second.post(headers=scheduled())
    # A manual run (no Scheduler headers) at the same time:
    manual = second.post()
    running.join(timeout=120)
    assert retry.status_code == manual.status_code == 200
    retried, forced = retry.get_json(), manual.get_json()
    assert (retried["stopped_because"], retried["claimed"]) == ("duplicate", 0)
    assert (forced["stopped_because"], forced["claimed"]) == ("overlap", 0)
    assert holder in forced["note"] and "leased by run" in forced["note"]
    done = answers[0].get_json()
    assert answers[0].status_code == 200
    assert done["run_id"] == holder and done["mode"] == "paced"
    # The first run alone claimed: its budget, not twice it.
    assert done["claimed"] == done["published"] == 150
    pulled = first.pull()
    assert sum(pulled.values()) == 150 and set(pulled.values()) == {1}
    assert set(pulled) <= set(ids)
    # Both refusals are on record, with their reason.
    recorded = {r.run_id: r for r in first.runs.recent(10)}
    assert recorded[retried["run_id"]].stopped_because == "duplicate"
    assert recorded[forced["run_id"]].note == forced["note"]


def test_a_duplicate_after_the_run_finished_does_nothing_and_the_next_execution_runs(
    scan_rig: Callable[..., Rig],
) -> None:
    first, second = paced_pair(scan_rig)
    first.seed(400)
    done = first.post(headers=scheduled()).get_json()
    assert done["claimed"] == 150
    # A lost acknowledgement: Cloud Scheduler sends the same execution again after it ended.
    again = second.post(headers=scheduled())
    assert again.status_code == 200
    assert (again.get_json()["stopped_because"], again.get_json()["claimed"]) == ("duplicate", 0)
    # The next scheduled execution is a new one: it claims.
    following = second.post(headers=scheduled("2026-06-01T12:02:00Z")).get_json()
    assert following["claimed"] == 150
    pulled = first.pull()
    assert sum(pulled.values()) == 300 and set(pulled.values()) == {1}


def test_two_runs_started_together_never_both_claim(scan_rig: Callable[..., Rig]) -> None:
    first, second = paced_pair(scan_rig)
    first.seed(600)
    barrier = threading.Barrier(2)
    answers: list[Any] = []
    lock = threading.Lock()

    def call(rig: Rig, at: str) -> None:
        barrier.wait()
        response = rig.post(headers=scheduled(at))
        with lock:
            answers.append(response)

    threads = [
        threading.Thread(target=call, args=(rig, at))
        for rig, at in ((first, AT), (second, "2026-06-01T12:02:00Z"))
    ]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=120)
    bodies = [a.get_json() for a in answers]
    assert [a.status_code for a in answers] == [200, 200]
    assert "overlap" in {b["stopped_because"] for b in bodies}
    assert sorted(b["claimed"] for b in bodies) == [0, 150]
    pulled = first.pull()
    assert sum(pulled.values()) == 150 and set(pulled.values()) == {1}


@pytest.mark.production_strict("pessimistic locking: concurrent shard claims wait or abort")
def test_two_partitions_run_at_once_each_on_its_own_shards(scan_rig: Callable[..., Rig]) -> None:
    """Production locks what a transaction reads and delays or aborts one side of a conflict
    (https://cloud.google.com/firestore/docs/transaction-data-contention); on Google's emulator
    (its transaction locks held up to ~30 s) one partition's run claimed 50 of its 300 due jobs
    (measured 2026-12-02)."""
    from services.jobs.shard import shard_of
    from services.scan.partitions import partition_shards

    first = scan_rig(shards=4, partitions=2, max_per_run=1000, page_size=50)
    second = scan_rig(shards=4, partitions=2, max_per_run=1000, page_size=50, clock=first.clock)
    first.store.update_control("test", "partitions", catch_up_rate=10, claim_budget=1000)
    ids = first.seed(800)
    answers: dict[int, Any] = {}

    def call(rig: Rig, partition: int) -> None:
        answers[partition] = rig.post(f'{{"partition": {partition}}}')

    threads = [threading.Thread(target=call, args=(r, p)) for r, p in ((first, 0), (second, 1))]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=120)
    bodies = {p: a.get_json() for p, a in answers.items()}
    assert {p: a.status_code for p, a in answers.items()} == {0: 200, 1: 200}
    # Different partitions hold different leases: both claim, each half of 10/s x 60 s.
    assert {p: (b["partition"], b["claimed"]) for p, b in bodies.items()} == {
        0: (0, 300),
        1: (1, 300),
    }
    groups = partition_shards(2, 4)
    pulled = first.pull()
    assert sum(pulled.values()) == 600 and set(pulled.values()) == {1}
    runs = {r.run_id: r for r in first.runs.recent(5)}
    for partition, body in bodies.items():
        assert runs[body["run_id"]].partition == partition
    claimed = {job_id for job_id in pulled}
    for job_id in claimed:
        assert job_id in ids
    by_partition = {p: {j for j in claimed if shard_of(j, 4) in groups[p]} for p in groups}
    assert len(by_partition[0]) == len(by_partition[1]) == 300
    # A partition the deployment does not have is a 400.
    assert first.post('{"partition": 2}').status_code == 400


def test_a_forced_run_with_the_next_executions_time_does_not_swallow_that_execution(
    scan_rig: Callable[..., Rig],
) -> None:
    # `gcloud scheduler jobs run` may carry the NEXT scheduled time (emulators/scheduler's
    # ForcedScheduleTime.NEXT). The clock is at 12:01:00; the forced run says 12:02:00.
    first, second = paced_pair(scan_rig)
    first.seed(400)
    forced = first.post(headers=scheduled("2026-06-01T12:02:00Z")).get_json()
    assert forced["claimed"] == 150
    # At 12:02 the real execution arrives: a new run, not a duplicate of the forced one.
    first.clock.set(first.clock.now().replace(minute=2, second=0) + timedelta(seconds=1))
    real = second.post(headers=scheduled("2026-06-01T12:02:00Z")).get_json()
    assert (real["stopped_because"], real["claimed"]) != ("duplicate", 0)
    assert real["claimed"] == 150
    # Its own retry after it finished is still a duplicate.
    again = second.post(headers=scheduled("2026-06-01T12:02:00Z")).get_json()
    assert (again["stopped_because"], again["claimed"]) == ("duplicate", 0)
    pulled = first.pull()
    assert sum(pulled.values()) == 300 and set(pulled.values()) == {1}
