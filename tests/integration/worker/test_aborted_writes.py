"""Issue 33, finding 5: ABORTED on a conditional write outside a transaction is settled, never
answered 500.

Firestore may answer ABORTED to a non-transactional commit under contention, and its error
pages say to retry it (https://cloud.google.com/firestore/docs/understand-error-codes). The
worker's compare-and-set writes (start's, complete's) are such commits: before the fix the
ABORTED escaped the processor as `Contention` and the push was answered 500 `internal_error`.
The contract: a push is answered 2xx, 429 or 503 only, and the job completes once. The real
worker app and store on the Firestore emulator, whose fault injection answers ABORTED to the
next commits; the real media action on the storage emulator counts deletions.
"""

from __future__ import annotations

from typing import Any

import pytest

from services.jobs.state import State
from services.worker.processor import OutcomeKind
from tests.integration.worker.harness import WorkerHarness, envelope
from tests.integration.worker.test_terminal_writes import delivery, processor, then

_REDELIVER = {429, 503}


def _ready(worker: WorkerHarness, job_id: str) -> Any:
    worker.schedule(job_id, worker.upload(f"src/{job_id}.mp4"))
    claimed = worker.claim_one(job_id)
    worker.enqueue(claimed)
    return claimed


@pytest.mark.builtin_emulator("fault injection")
def test_aborted_on_the_start_write_is_settled_and_the_push_answered_2xx(
    direct_worker: WorkerHarness, firestore_emulator: Any
) -> None:
    # Today: 500 internal_error (the compare-and-set start's ABORTED escapes as Contention).
    worker = direct_worker
    claimed = _ready(worker, "a1")
    firestore_emulator.inject_fault("Commit", "ABORTED")
    try:
        response = worker.post(envelope("a1", claimed.generation))
    finally:
        firestore_emulator.clear_faults()
    assert 200 <= response.status_code < 300, response.text
    assert (worker.job("a1").state, worker.deleter.deletions) == (State.COMPLETED, 1)


@pytest.mark.builtin_emulator("fault injection")
def test_aborted_on_the_completion_write_is_settled_and_the_job_completes_once(
    direct_worker: WorkerHarness, firestore_emulator: Any
) -> None:
    # Today: 500 internal_error after the delete; the outcome waits for the lease to lapse.
    worker = direct_worker
    claimed = _ready(worker, "a2")
    worker.deleter.after_delete = lambda _: firestore_emulator.inject_fault("Commit", "ABORTED")
    try:
        first = worker.post(envelope("a2", claimed.generation))
    finally:
        worker.deleter.after_delete = None
        firestore_emulator.clear_faults()
    again = worker.post(envelope("a2", claimed.generation, message_id="m-2"))
    assert 200 <= first.status_code < 300, first.text
    assert 200 <= again.status_code < 300, again.text
    job = worker.job("a2")
    assert (job.state, worker.deleter.deletions, worker.deleter.calls) == (State.COMPLETED, 1, 1)


@pytest.mark.builtin_emulator("fault injection")
def test_persistent_aborted_before_the_action_asks_for_a_redelivery_never_500(
    direct_worker: WorkerHarness, firestore_emulator: Any
) -> None:
    # Every commit ABORTED, past the transaction's own retries: 503 (redeliver), nothing done;
    # the redelivery once contention ends completes the job once. Today: 500.
    worker = direct_worker
    claimed = _ready(worker, "a3")
    firestore_emulator.inject_fault("Commit", "ABORTED", count=10_000)
    try:
        first = worker.post(envelope("a3", claimed.generation))
    finally:
        firestore_emulator.clear_faults()
    assert first.status_code in _REDELIVER, first.text
    assert worker.deleter.calls == 0
    again = worker.post(envelope("a3", claimed.generation, message_id="m-2"))
    assert 200 <= again.status_code < 300, again.text
    assert (worker.job("a3").state, worker.deleter.deletions) == (State.COMPLETED, 1)


@pytest.mark.builtin_emulator("fault injection")
def test_persistent_aborted_on_the_completion_is_retried_within_the_lease_then_503(
    direct_worker: WorkerHarness, firestore_emulator: Any
) -> None:
    # The outcome write meets ABORTED on every commit: retried (read back each time) within
    # the lease, then the delivery asks for a redelivery (503) with the lease still its own,
    # so the job's record is never left to a 500. Today: Contention escapes (500).
    worker = direct_worker
    claimed = _ready(worker, "a4")
    aborting = then(
        worker.deleter,
        lambda: firestore_emulator.inject_fault("Commit", "ABORTED", count=10_000),
    )
    try:
        outcome = processor(
            worker, aborting, sleep=lambda _: None, outcome_retry_attempts=2
        ).process(delivery(claimed))
    finally:
        firestore_emulator.clear_faults()
    assert (outcome.kind, outcome.acknowledged) == (OutcomeKind.UNAVAILABLE, False)
    job = worker.job("a4")
    assert (job.state, worker.deleter.deletions) == (State.RUNNING, 1)
    assert job.lease_owner is not None and job.lease_owner.startswith("w/")
