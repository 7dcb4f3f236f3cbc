"""Issue 24, finding 1: the outcome written after the side effect survives a transient error.

The real store on the Firestore emulator, whose fault injection refuses or delays the commit
that writes the outcome; the real media action on the storage emulator counts deletions.
"""

from __future__ import annotations

from collections.abc import Callable
from datetime import timedelta
from typing import Any

import pytest
from google.cloud import firestore

from services.jobs.actions import Action, ActionRequest, ActionResult
from services.jobs.errors import JobsError
from services.jobs.results import ClaimedJob
from services.jobs.state import State
from services.store.job_store import FirestoreJobStore
from services.worker.actions import ActionRegistry
from services.worker.envelope import Delivery
from services.worker.media import ACTION_NAME
from services.worker.processor import OutcomeKind, Processor
from tests.integration.worker.harness import LEASE, WorkerHarness, wait_until


def processor(
    worker: WorkerHarness,
    action: Callable[[ActionRequest], ActionResult],
    store: Any = None,
    **kw: Any,
) -> Processor:
    actions = ActionRegistry([Action(ACTION_NAME, action)])
    return Processor(store or worker.store, actions, worker.clock, lease=LEASE, worker_id="w", **kw)


def delivery(claimed: ClaimedJob, message_id: str = "m-1") -> Delivery:
    return Delivery(claimed.job_id, claimed.generation, "run-1", 1, message_id)


def then(action: Callable[[ActionRequest], ActionResult], after: Callable[[], None]) -> Any:
    def run(request: ActionRequest) -> ActionResult:
        result = action(request)
        after()
        return result

    return run


@pytest.mark.builtin_emulator("fault injection")
def test_one_unavailable_on_complete_is_retried_inside_the_lease(
    direct_worker: WorkerHarness, firestore_emulator: Any
) -> None:
    # Today: store_unavailable, then lease_held for the whole lease, then the take-over runs
    # the side effect again and (max_attempts=1) ends `failed: lease_expired`.
    worker = direct_worker
    worker.schedule("j", worker.upload("src/a.mp4"), max_attempts=1)
    claimed = worker.claim_one("j")
    worker.enqueue(claimed)
    refuse_next_commit = then(
        worker.deleter, lambda: firestore_emulator.inject_fault("Commit", "UNAVAILABLE")
    )
    try:
        first = processor(worker, refuse_next_commit).process(delivery(claimed))
    finally:
        firestore_emulator.clear_faults()
    again = processor(worker, worker.deleter).process(delivery(claimed, "m-2"))
    job = worker.job("j")
    assert [first.kind, again.kind] == [OutcomeKind.COMPLETED, OutcomeKind.DUPLICATE]
    assert (job.state, worker.deleter.deletions) == (State.COMPLETED, 1)


@pytest.mark.builtin_emulator("fault injection")
def test_a_complete_that_applied_although_its_answer_was_lost_is_a_success(
    direct_worker: WorkerHarness, firestore_emulator: Any, firestore_client: firestore.Client
) -> None:
    # The commit is delayed past the client's call timeout (DEADLINE_EXCEEDED) and then
    # applies; the retry finds the lease gone. Today: store_unavailable (503); a take-over
    # would then see the job completed. After: completed, settled by ended_lease_token.
    worker = direct_worker
    store = FirestoreJobStore(firestore_client, worker.clock, timeout_s=0.5)
    worker.schedule("j", worker.upload("src/a.mp4"))
    claimed = worker.claim_one("j")
    worker.enqueue(claimed)
    delay_next_commit = then(
        worker.deleter, lambda: firestore_emulator.inject_fault("Commit", delay_s=1.5)
    )

    def until_applied(_: float) -> None:
        # The delayed commit lands in the emulator; only then does the worker try again.
        wait_until(lambda: worker.job("j").state is State.COMPLETED, what="the delayed commit")

    try:
        outcome = processor(worker, delay_next_commit, store, sleep=until_applied).process(
            delivery(claimed)
        )
    finally:
        firestore_emulator.clear_faults()
    job = worker.job("j")
    assert (outcome.kind, job.state, worker.deleter.deletions) == (
        OutcomeKind.COMPLETED,
        State.COMPLETED,
        1,
    )
    assert job.ended_lease_token is not None and job.lease_token is None


@pytest.mark.builtin_emulator("fault injection")
def test_a_start_that_applied_although_its_answer_was_lost_does_not_fail_the_job(
    direct_worker: WorkerHarness, firestore_emulator: Any, firestore_client: firestore.Client
) -> None:
    # Today: start raises StoreUnavailable (503); the redelivery finds its own lease live
    # (lease_held) until it lapses, and then, max_attempts=1, fails a job that never ran.
    worker = direct_worker
    store = FirestoreJobStore(firestore_client, worker.clock, timeout_s=0.5)
    worker.schedule("j", worker.upload("src/a.mp4"), max_attempts=1)
    claimed = worker.claim_one("j")
    worker.enqueue(claimed)
    firestore_emulator.inject_fault("Commit", delay_s=1.5)
    try:
        try:
            job = store.start("j", claimed.generation, LEASE, "w/m-1")
        except JobsError as exc:  # today's answer: the write applied, the caller cannot know
            raise AssertionError(f"start answered {exc!r} for a lease it took") from exc
    finally:
        firestore_emulator.clear_faults()
    # The delayed commit lands later, conditioned on the record it read: it changes nothing.
    stored = worker.job("j")
    assert (job.state, stored.state, stored.attempt) == (State.RUNNING, State.RUNNING, 1)
    assert job.lease_token == stored.lease_token
    outcome = processor(worker, worker.deleter).process(delivery(claimed, "m-2"))
    assert outcome.kind is OutcomeKind.LEASE_HELD  # its own live lease, not a failed job


# --- finding 3: a completion is never refused for what it carries ------------------------------


def nested(levels: int) -> dict[str, Any]:
    value: dict[str, Any] = {"leaf": 1}
    for _ in range(levels - 1):
        value = {"k": value}
    return value


INVALID_DETAILS: list[dict[str, Any]] = [
    {"matrix": [[1, 2], [3]]},  # valid JSON, not a Firestore value: an array in an array
    {"__x__": 1},  # a reserved field name
    nested(20),  # with result and details above it: 22 map levels, Firestore allows 20
]


@pytest.mark.parametrize("details", INVALID_DETAILS, ids=["nested_array", "reserved_key", "depth"])
def test_invalid_result_details_are_replaced_by_a_note_and_the_job_completes(
    direct_worker: WorkerHarness, details: dict[str, Any]
) -> None:
    # Today: Firestore refuses every completion (store_rejected, 500), the action re-runs
    # each attempt and the job ends failed: lease_expired with the cause never recorded.
    worker = direct_worker
    worker.schedule("j", worker.upload("src/a.mp4"), max_attempts=1)
    claimed = worker.claim_one("j")
    worker.enqueue(claimed)

    def talkative(request: ActionRequest) -> ActionResult:
        worker.deleter(request)
        return ActionResult("deleted", details)

    outcome = processor(worker, talkative).process(delivery(claimed))
    job = worker.job("j")
    assert (outcome.kind, job.state, worker.deleter.deletions) == (
        OutcomeKind.COMPLETED,
        State.COMPLETED,
        1,
    )
    assert job.result is not None and job.result.details["invalid"] is True
    assert job.result.details["problem_count"] >= 1


@pytest.mark.builtin_emulator("fault injection")
def test_a_completion_firestore_refuses_fails_the_job_with_that_code(
    direct_worker: WorkerHarness, firestore_emulator: Any
) -> None:
    # Today: store_rejected (500) with the job left running until its lease lapses.
    worker = direct_worker
    worker.schedule("j", worker.upload("src/a.mp4"))
    claimed = worker.claim_one("j")
    worker.enqueue(claimed)
    refuse_next_commit = then(
        worker.deleter, lambda: firestore_emulator.inject_fault("Commit", "INVALID_ARGUMENT")
    )
    try:
        outcome = processor(worker, refuse_next_commit).process(delivery(claimed))
    finally:
        firestore_emulator.clear_faults()
    job = worker.job("j")
    assert (outcome.kind, job.state) == (OutcomeKind.FAILED, State.FAILED)
    assert job.last_error is not None and job.last_error.code == "store_rejected"


@pytest.mark.builtin_emulator("fault injection")
def test_a_stale_delivery_whose_outcome_write_fails_is_answered_stale_not_503(
    direct_worker: WorkerHarness, firestore_emulator: Any
) -> None:
    # Found by the fault drain: a worker frozen past its lease resumed, its refused outcome
    # write met an UNAVAILABLE, and it answered 503 (a pointless redelivery) although the
    # read-back showed another delivery had the job.
    worker = direct_worker
    worker.schedule("j", worker.upload("src/a.mp4"))
    claimed = worker.claim_one("j")
    worker.enqueue(claimed)
    outcomes: list[Any] = []

    def frozen_past_the_lease(request: ActionRequest) -> ActionResult:
        result = worker.deleter(request)
        worker.clock.advance(LEASE + timedelta(seconds=1))
        outcomes.append(processor(worker, worker.deleter).process(delivery(claimed, "m-2")))
        firestore_emulator.inject_fault("Commit", "UNAVAILABLE")
        return result

    try:
        late = processor(worker, frozen_past_the_lease).process(delivery(claimed, "m-1"))
    finally:
        firestore_emulator.clear_faults()
    assert [o.kind for o in outcomes] == [OutcomeKind.COMPLETED]
    assert late.kind is OutcomeKind.STALE and late.acknowledged
    assert worker.job("j").state is State.COMPLETED
