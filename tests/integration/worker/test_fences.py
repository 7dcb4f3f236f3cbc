"""Regression tests for issue 12's findings at the worker: the real store on the Firestore
emulator, the real media action on the storage emulator, real threads where it matters.

The clock is a FakeClock the storage hook moves on, so "30 s per object" is deterministic; the
heartbeat's background thread never fires here (it polls every few real seconds), so every
lease extension seen comes from the action's own deadline checks.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from datetime import timedelta
from typing import Any

import pytest
from google.cloud import firestore

from services.jobs import schema
from services.jobs.actions import Action, ActionRequest, ActionResult
from services.jobs.errors import PermanentError
from services.jobs.results import ClaimedJob
from services.jobs.state import State
from services.worker.actions import ActionRegistry
from services.worker.envelope import Delivery
from services.worker.media import ACTION_NAME
from services.worker.processor import OutcomeKind, Processor
from tests.fixtures.store import stored_document
from tests.integration.worker.harness import LEASE, WorkerHarness, envelope

CLAIM_TIMEOUT = timedelta(minutes=10)


def processor(
    worker: WorkerHarness, action: Callable[[ActionRequest], ActionResult] | None = None, **kw: Any
) -> Processor:
    actions = ActionRegistry([Action(ACTION_NAME, action or worker.deleter)])
    return Processor(worker.store, actions, worker.clock, lease=LEASE, worker_id="w", **kw)


def delivery(claimed: ClaimedJob, message_id: str = "m-1") -> Delivery:
    return Delivery(claimed.job_id, claimed.generation, "run-1", 1, message_id)


def per_object(worker: WorkerHarness, hook: Callable[[str], None]) -> None:
    """Run `hook(name)` after each object the media action deletes."""
    inner = worker.deleter.inner
    real = inner._delete

    def delete_then(bucket: Any, name: str, generation: str) -> str:
        done = real(bucket, name, generation)
        hook(name)
        return done

    inner._delete = delete_then  # type: ignore[method-assign]


def reclaim(worker: WorkerHarness) -> int:
    now = worker.clock.now()
    return len(worker.store.reclaim_expired(now, CLAIM_TIMEOUT, 10, "reclaimer"))


# --- 2. a healthy long job keeps its lease ----------------------------------------------------


def test_a_long_healthy_job_heartbeats_and_is_never_reclaimed(worker: WorkerHarness) -> None:
    names = worker.upload(*(f"src/{n}.mp4" for n in range(6)))
    worker.schedule("long", names)
    claimed = worker.claim_one("long")
    worker.enqueue(claimed)
    reclaims: list[int] = []

    def half_a_lease_per_object(name: str) -> None:
        worker.clock.advance(LEASE / 2)  # 6 objects: three whole leases of work
        reclaims.append(reclaim(worker))

    per_object(worker, half_a_lease_per_object)
    outcome = processor(worker).process(delivery(claimed))

    assert outcome.kind is OutcomeKind.COMPLETED
    assert reclaims == [0] * 6
    assert worker.objects() == set()
    job = worker.job("long")
    assert (job.state, job.attempt) == (State.COMPLETED, 1)
    assert [e.to_state for e in job.history].count(State.RUNNING) == 1


def test_a_delivery_out_of_time_stops_between_objects_and_the_next_resumes(
    worker: WorkerHarness,
) -> None:
    names = worker.upload(*(f"src/{n}.mp4" for n in range(5)))
    worker.schedule("long", names)
    claimed = worker.claim_one("long")
    worker.enqueue(claimed)
    deleted: list[str] = []

    def slow(name: str) -> None:
        deleted.append(name)
        worker.clock.advance(timedelta(seconds=25))

    per_object(worker, slow)
    limited = processor(worker, max_delivery=timedelta(seconds=60))

    first = limited.process(delivery(claimed))
    assert first.kind is OutcomeKind.RETRY  # released: Pub/Sub redelivers it
    job = worker.job("long")
    assert job.state is State.ENQUEUED and job.progress is not None
    assert sorted(job.progress["deleted"]) == deleted == names[:3]

    second = limited.process(delivery(claimed, "m-1"))
    assert second.kind is OutcomeKind.COMPLETED
    assert deleted == names  # each object deleted once, the rest resumed where it stopped
    job = worker.job("long")
    assert job.result is not None and sorted(job.result.details["deleted"]) == names
    assert job.progress is None


# --- 6. a cancel request stops a running action ----------------------------------------------


def test_a_cancel_while_the_action_runs_stops_it_at_the_next_check(
    worker: WorkerHarness,
) -> None:
    names = worker.upload(*(f"src/{n}.mp4" for n in range(4)))
    worker.schedule("j", names)
    claimed = worker.claim_one("j")
    worker.enqueue(claimed)

    def cancel_after_the_first(name: str) -> None:
        if name == names[0]:
            worker.store.cancel("j", "media restored", "ann")
        worker.clock.advance(LEASE / 2)  # the next check heartbeats and sees the request

    per_object(worker, cancel_after_the_first)
    outcome = processor(worker).process(delivery(claimed))

    assert outcome.kind is OutcomeKind.CANCELLED
    job = worker.job("j")
    assert job.state is State.CANCELLED
    assert job.progress is not None
    assert (job.progress["deleted"], job.progress["already_absent"]) == (names[:1], [])
    # The generations read for the rest are kept: a delivery that resumed would delete those.
    assert set(job.progress["generations"]) == set(names[1:])
    assert worker.objects() == set(names[1:])  # nothing after the request was touched


# --- 1. a stale delivery in the same instance ------------------------------------------------


def test_a_slow_deliverys_late_failure_after_a_take_over_is_refused(
    worker: WorkerHarness,
) -> None:
    worker.schedule("j", worker.upload("src/a.mp4"))
    claimed = worker.claim_one("j")
    worker.enqueue(claimed)
    one = processor(worker)  # one instance: the same worker name for both deliveries
    outcomes: list[Any] = []
    calls = []

    def slow_then_fails(request: ActionRequest) -> ActionResult:
        calls.append(request.job_id)
        if len(calls) == 1:
            # While the first delivery hangs, its lease lapses and a redelivery in the same
            # instance takes over, deletes the object and completes.
            worker.clock.advance(LEASE + timedelta(seconds=1))
            outcomes.append(one.process(delivery(claimed, "m-2")))
            raise PermanentError("bucket is gone")
        return worker.deleter(request)

    one = processor(worker, slow_then_fails)
    late = one.process(delivery(claimed, "m-1"))

    assert [o.kind for o in outcomes] == [OutcomeKind.COMPLETED]
    assert late.kind is OutcomeKind.STALE
    job = worker.job("j")
    assert job.state is State.COMPLETED  # the late failure changed nothing
    assert worker.objects() == set()


# --- 3. a push for a malformed job is acknowledged and recorded ------------------------------


def test_a_push_for_an_undecodable_job_is_quarantined_acknowledged_and_recorded(
    worker: WorkerHarness, firestore_client: firestore.Client
) -> None:
    worker.schedule("bad", worker.upload("src/bad.mp4"))
    claimed = worker.claim_one("bad")
    worker.enqueue(claimed)
    firestore_client.collection(schema.JOBS).document("bad").update({"attempt": "one"})

    response = worker.post(envelope("bad", claimed.generation))

    assert response.status_code == 200
    assert response.json()["reason"] == "invalid_record"
    (rejection,) = worker.rejected_documents()
    assert rejection["reason"] == "invalid_record" and rejection["job_id"] == "bad"
    raw = stored_document(firestore_client, "bad")
    assert raw is not None and raw["state"] == "failed"
    assert worker.objects() == {"src/bad.mp4"}  # nothing acted on a record it cannot read


# --- 5. two jobs sharing a key never both act --------------------------------------------------


def test_two_jobs_sharing_an_explicit_key_act_once_under_real_concurrency(
    worker: WorkerHarness,
) -> None:
    key = "media-1:retention-decision-9"
    worker.schedule("a", worker.upload("src/a.mp4"), idempotency_key=key)
    worker.schedule("b", ["src/a.mp4"], idempotency_key=key)
    claims = {c.job_id: c for c in worker.claim()}
    for claimed in claims.values():
        worker.enqueue(claimed)
    acting = threading.Event()
    release = threading.Event()
    runs: list[str] = []

    def hold(request: ActionRequest) -> ActionResult:
        runs.append(request.job_id)
        acting.set()
        release.wait(timeout=30)
        return worker.deleter(request)

    proc = processor(worker, hold)
    results: dict[str, Any] = {}
    first = threading.Thread(target=lambda: results.update(a=proc.process(delivery(claims["a"]))))
    first.start()
    assert acting.wait(timeout=30)
    results["b"] = proc.process(delivery(claims["b"]))  # while a holds the key
    release.set()
    first.join(timeout=30)
    results["b-again"] = proc.process(delivery(claims["b"], "m-2"))

    assert results["a"].kind is OutcomeKind.COMPLETED
    assert results["b"].kind is OutcomeKind.LEASE_HELD and not results["b"].acknowledged
    assert results["b-again"].kind is OutcomeKind.COMPLETED  # the recorded result, reused
    assert runs == ["a"]
    assert worker.deleter.deletions == 1


@pytest.mark.parametrize("max_attempts", [1, 2])
def test_a_redelivery_that_finds_a_lapsed_lease_applies_the_reclaimers_attempt_rule(
    worker: WorkerHarness, max_attempts: int
) -> None:
    # Finding 9: whether a crash cost an attempt depended on who found the expired lease.
    worker.schedule("j", worker.upload("src/a.mp4"), max_attempts=max_attempts)
    claimed = worker.claim_one("j")
    worker.enqueue(claimed)
    worker.store.start("j", claimed.generation, LEASE, "crashed")
    worker.clock.advance(LEASE + timedelta(seconds=1))
    outcome = processor(worker).process(delivery(claimed, "m-2"))
    job = worker.job("j")
    if max_attempts == 1:
        assert (outcome.kind, job.state, job.attempt) == (OutcomeKind.FAILED, State.FAILED, 1)
    else:
        assert (outcome.kind, job.state, job.attempt) == (
            OutcomeKind.COMPLETED,
            State.COMPLETED,
            2,
        )
