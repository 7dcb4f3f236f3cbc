"""Budgets and pauses per HTTP target on the emulators (issue 32, item 4): an http.request
target with a `rate` is claimed at that rate per run in a lane of its own
(`http.request/<target>`), the action's other targets drain with the rest, and a Retry-After
from one target pauses that target's jobs only."""

from __future__ import annotations

from collections.abc import Callable
from datetime import timedelta

import pytest

from services.jobs.actions import Action, ActionRequest, ActionResult, RetryPolicy
from services.jobs.errors import RetryAfter
from services.jobs.http_request import ACTION_NAME
from services.jobs.lanes import REST, lane_key
from services.worker.actions import ActionRegistry
from services.worker.envelope import Delivery
from services.worker.processor import Processor
from tests.integration.scan.conftest import Rig

OPERATOR = "operator:alice@example.com"
INTERVAL = timedelta(seconds=60)
RATED = "trials"  # a target with rate 5/s
OTHER = "billing"  # a target without a rate
RATED_LANE = lane_key(ACTION_NAME, RATED)


def target_rig(scan_rig: Callable[..., Rig], shards: int = 1, rated: bool = True) -> Rig:
    rig = scan_rig(
        max_per_run=2_000,
        page_size=200,
        interval_s=INTERVAL.total_seconds(),
        # What the scan's app computes from JOBS_HTTP_TARGETS (services/jobs/http_request.py
        # target_rates) for a target `trials` with rate 5.
        rates={RATED_LANE: 5} if rated else {},
        shards=shards,
    )
    rig.store.update_control(OPERATOR, "drain at 20/s", catch_up_rate=20.0)
    return rig


def seed_target(rig: Rig, count: int, target: str, prefix: str, **kwargs: object) -> list[str]:
    params = {"target": target, "path": f"/hooks/{prefix}"}
    return rig.seed(count, prefix=prefix, action=ACTION_NAME, params=params, **kwargs)  # type: ignore[arg-type]


def test_a_rated_target_claims_its_rate_per_run_and_the_other_target_is_not_starved(
    scan_rig: Callable[..., Rig],
) -> None:
    rated_and_other_targets(scan_rig, shards=1)


@pytest.mark.production_strict("pessimistic locking: concurrent shard claims wait or abort")
def test_at_four_shards_a_rated_target_claims_its_rate_and_the_other_is_not_starved(
    scan_rig: Callable[..., Rig],
) -> None:
    """Each lane claims its shards in parallel transactions. Production locks what a
    transaction reads and delays or aborts one side of a conflict
    (https://cloud.google.com/firestore/docs/transaction-data-contention); on Google's emulator
    parallel claimers hold locks up to ~30 s (docs/emulators.md, row F2)."""
    rated_and_other_targets(scan_rig, shards=4)


def rated_and_other_targets(scan_rig: Callable[..., Rig], shards: int) -> None:
    rig = target_rig(scan_rig, shards)
    # The rated target's backlog is older than the other target's: without its lane it would
    # fill every page first.
    rated = seed_target(rig, 700, RATED, "rtd", due_at=rig.clock.now() - timedelta(hours=1))
    other = seed_target(rig, 900, OTHER, "oth")
    media = rig.seed(300, prefix="med")
    runs = []
    for _ in range(2):
        runs.append(rig.scan())
        rig.clock.advance(INTERVAL)
    # 5/s x 60 s = 300 of the rated target per run; the rest (the other target's jobs and the
    # media action's) share the catch-up budget, 20/s x 60 s = 1,200.
    assert rig.states(rated) == {"enqueued": 600, "deferred": 100}
    assert rig.states(other) == {"enqueued": 900} and rig.states(media) == {"enqueued": 300}
    documents = [rig.runs.get(r["run_id"]) for r in runs]
    lanes = [d.lanes for d in documents if d is not None]
    assert [lane[RATED_LANE]["claimed"] for lane in lanes] == [300, 300]
    assert [lane[RATED_LANE]["budget"] for lane in lanes] == [300, 300]
    assert [lane[REST]["claimed"] for lane in lanes] == [1_200, 0]
    assert set(lanes[0]) == {RATED_LANE, REST}
    pulled = rig.pull()
    assert sum(pulled.values()) == 1_800 and set(pulled.values()) == {1}


@pytest.mark.parametrize("rated", [False, True])
def test_a_retry_after_from_one_target_pauses_that_targets_jobs_only(
    scan_rig: Callable[..., Rig], rated: bool
) -> None:
    rig = target_rig(scan_rig, rated=rated)
    busy_jobs = seed_target(rig, 3, RATED, "rtd")
    fine_jobs = seed_target(rig, 3, OTHER, "oth")
    first = rig.scan()
    assert first["claimed"] == 6

    def call(request: ActionRequest) -> ActionResult:
        target = request.params["target"]
        if target == RATED:
            raise RetryAfter(30, target=target)  # what http.request raises on a 429
        return ActionResult("called")

    registry = ActionRegistry([Action(ACTION_NAME, call, RetryPolicy())])
    processor = Processor(
        rig.store, registry, rig.clock, lease=timedelta(seconds=60), worker_id="w"
    )
    for job_id in [*busy_jobs, *fine_jobs]:
        job = rig.store.get(job_id)
        assert job is not None and job.claim is not None
        delivery = Delivery(job_id, job.claim.generation, first["run_id"], delivery_attempt=1)
        processor.process(delivery)
    paused_until = rig.clock.now() + timedelta(seconds=30)
    assert rig.states(busy_jobs) == {"deferred": 3} and rig.states(fine_jobs) == {"completed": 3}
    # The pause is the target's, not the action's.
    assert rig.store.get_control().action_pauses == {RATED_LANE: paused_until}
    # New work of both targets: the next run claims the other target's only.
    fresh_busy = seed_target(rig, 5, RATED, "rtd2")
    fresh_fine = seed_target(rig, 5, OTHER, "oth2")
    rig.clock.advance(timedelta(seconds=20))
    summary = rig.scan()
    assert summary["claimed"] == 5
    assert rig.states(fresh_fine) == {"enqueued": 5}
    assert rig.states(fresh_busy) == {"deferred": 5}
    document = rig.runs.get(summary["run_id"])
    assert document is not None and document.lanes[RATED_LANE]["paused_until"] == paused_until
    # Once the pause ends, the deferred jobs and the new ones are claimed.
    rig.clock.advance(timedelta(seconds=15))
    assert rig.scan()["claimed"] == 8
    assert rig.states([*busy_jobs, *fresh_busy]) == {"enqueued": 8}
