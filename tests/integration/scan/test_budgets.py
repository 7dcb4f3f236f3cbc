"""Budgets per action on the emulators (issue 32, item 4): a limited action's claims per run
equal its rate x interval while the other action drains at the catch-up rate, and a pause
recorded for one action (a dependency's Retry-After) stops that action's claims only."""

from __future__ import annotations

from collections.abc import Callable
from datetime import timedelta

import pytest

from services.jobs.actions import Action, ActionRequest, ActionResult, RetryPolicy
from services.jobs.errors import RetryAfter
from services.jobs.lanes import REST
from services.worker.actions import ActionRegistry
from services.worker.envelope import Delivery
from services.worker.processor import Processor
from tests.integration.scan.conftest import ACTION, Rig

OPERATOR = "operator:alice@example.com"
LIMITED = "trials.expire"
INTERVAL = timedelta(seconds=60)


def limited_rig(scan_rig: Callable[..., Rig], shards: int = 1) -> Rig:
    rig = scan_rig(
        max_per_run=2_000,
        page_size=200,
        interval_s=INTERVAL.total_seconds(),
        rates={LIMITED: 5},
        shards=shards,
    )
    rig.store.update_control(OPERATOR, "drain at 20/s", catch_up_rate=20.0)
    return rig


def test_a_limited_action_claims_its_rate_per_run_and_the_other_is_not_starved(
    scan_rig: Callable[..., Rig],
) -> None:
    limited_and_other_lanes(scan_rig, shards=1)


@pytest.mark.production_strict("pessimistic locking: concurrent shard claims wait or abort")
def test_at_four_shards_a_limited_action_claims_its_rate_and_the_other_is_not_starved(
    scan_rig: Callable[..., Rig],
) -> None:
    """Each lane claims its shards in parallel transactions. Production locks what a
    transaction reads and delays or aborts one side of a conflict
    (https://cloud.google.com/firestore/docs/transaction-data-contention); on Google's emulator
    parallel claimers hold locks up to ~30 s and the run outlived the 120 s request timeout
    (docs/emulators.md, row F2)."""
    limited_and_other_lanes(scan_rig, shards=4)


def limited_and_other_lanes(scan_rig: Callable[..., Rig], shards: int) -> None:
    # Each shard layout's own index set: the emulator refuses a query no declared index serves.
    rig = limited_rig(scan_rig, shards)
    # The limited action's backlog is older than the other's: without lanes it would fill
    # every page first.
    limited = rig.seed(
        700, due_at=rig.clock.now() - timedelta(hours=1), prefix="lim", action=LIMITED
    )
    other = rig.seed(1_500, prefix="oth")
    runs = []
    for _ in range(2):
        runs.append(rig.scan())
        rig.clock.advance(INTERVAL)
    # 5/s x 60 s = 300 of the limited action per run; 20/s x 60 s = 1,200 of the other.
    assert [rig.states(limited)["enqueued"], rig.states(other)["enqueued"]] == [600, 1_500]
    assert [r["claimed"] for r in runs] == [1_500, 600]
    assert [r["published"] for r in runs] == [1_500, 600]
    documents = [rig.runs.get(r["run_id"]) for r in runs]
    lanes = [d.lanes for d in documents if d is not None]
    assert [lane[LIMITED]["claimed"] for lane in lanes] == [300, 300]
    assert [lane[REST]["claimed"] for lane in lanes] == [1_200, 300]
    assert [lane[LIMITED]["budget"] for lane in lanes] == [300, 300]
    pulled = rig.pull()
    assert sum(pulled.values()) == 2_100 and set(pulled.values()) == {1}


def test_a_pause_stops_claims_of_that_action_only_until_it_ends(
    scan_rig: Callable[..., Rig],
) -> None:
    rig = limited_rig(scan_rig)
    limited = rig.seed(100, prefix="lim", action=LIMITED)
    other = rig.seed(100, prefix="oth")
    until = rig.clock.now() + timedelta(seconds=90)
    assert rig.store.record_action_pause(LIMITED, until) is True
    # The same window again writes nothing (a burst of 429s is one write).
    assert rig.store.record_action_pause(LIMITED, until) is False
    assert rig.store.get_control().action_pauses == {LIMITED: until}
    first = rig.scan()
    assert first["claimed"] == 100
    assert rig.states(limited) == {"deferred": 100} and rig.states(other) == {"enqueued": 100}
    document = rig.runs.get(first["run_id"])
    assert document is not None and document.lanes[LIMITED]["paused_until"] == until
    assert document.actions_paused == 1 and rig.sink.reports[-1].actions_paused == 1
    # An operator change keeps the pause.
    rig.store.update_control(OPERATOR, "still 20/s", catch_up_rate=20.0)
    rig.clock.advance(INTERVAL)
    assert rig.scan()["claimed"] == 0  # still paused at +60 s
    rig.clock.advance(INTERVAL)
    assert rig.scan()["claimed"] == 100  # the pause ended at +90 s
    assert rig.states(limited) == {"enqueued": 100}


def test_a_retry_after_in_the_worker_pauses_that_action_only_and_keeps_the_attempt(
    scan_rig: Callable[..., Rig],
) -> None:
    rig = limited_rig(scan_rig)
    limited = rig.seed(3, prefix="lim", action=LIMITED)
    other = rig.seed(3, prefix="oth")
    first = rig.scan()
    assert first["claimed"] == 6

    def busy(request: ActionRequest) -> ActionResult:
        raise RetryAfter(30)

    def done(request: ActionRequest) -> ActionResult:
        return ActionResult("done")

    registry = ActionRegistry(
        [Action(LIMITED, busy, RetryPolicy()), Action(ACTION, done, RetryPolicy())]
    )
    processor = Processor(
        rig.store, registry, rig.clock, lease=timedelta(seconds=60), worker_id="w"
    )
    for job_id in [*limited, *other]:
        job = rig.store.get(job_id)
        assert job is not None and job.claim is not None
        delivery = Delivery(job_id, job.claim.generation, first["run_id"], delivery_attempt=1)
        processor.process(delivery)
    paused_until = rig.clock.now() + timedelta(seconds=30)
    for job_id in limited:
        job = rig.store.get(job_id)
        assert job is not None
        assert (job.state.value, job.attempt, job.due_at) == ("deferred", 1, paused_until)
        # The first answered Retry-After; the worker held the others without a call.
        assert job.last_error is not None and job.last_error.code in {"retry_after", "paused"}
    assert rig.states(other) == {"completed": 3}
    assert rig.store.get_control().action_pauses == {LIMITED: paused_until}
    # New work of both actions: the next run claims the other action's only.
    fresh_limited = rig.seed(5, prefix="lim2", action=LIMITED)
    fresh_other = rig.seed(5, prefix="oth2")
    rig.clock.advance(timedelta(seconds=20))
    summary = rig.scan()
    assert summary["claimed"] == 5
    assert rig.states(fresh_other) == {"enqueued": 5}
    assert rig.states(fresh_limited) == {"deferred": 5}
    # Once the pause ends, the deferred jobs and the new ones are claimed.
    rig.clock.advance(timedelta(seconds=15))
    assert rig.scan()["claimed"] == 8
