"""The enqueue mark (a claim this store made) and the completion (with its delivery's basis) as
one write conditioned on the previous write's update_time: the cost of a whole job when both
apply, and the transaction each falls back to when it cannot."""

from __future__ import annotations

from datetime import timedelta
from typing import Any

import pytest
from google.cloud import firestore

from services.jobs.clock import FakeClock
from services.jobs.errors import AlreadyTerminal, JobNotFound, LeaseHeld, LeaseLost
from services.jobs.parts import Lease, Result
from services.jobs.record import Job
from services.jobs.state import State
from services.store.job_store import FirestoreJobStore
from tests.integration.jobs.conftest import LEASE, WORKER, new_job


def _started(store: FirestoreJobStore, job_id: str, **extra: Any) -> Job:
    store.schedule(new_job(job_id, **extra))
    (claim,) = [c for c in store.claim_due(store.clock.now(), "run-1", 100) if c.job_id == job_id]
    store.mark_enqueued_many([(job_id, claim.generation, f"msg-{job_id}")])
    return store.start(job_id, claim.generation, LEASE, WORKER)


def _lease(job: Job) -> Lease:
    assert job.lease is not None
    return job.lease


def _reads_writes(stats: Any) -> tuple[int, int]:
    counts = stats.get()
    return counts["document_reads"], counts["document_writes"]


@pytest.mark.builtin_emulator("billing counters")
def test_a_whole_job_costs_six_billed_operations_claim_mark_start_complete(
    store: FirestoreJobStore, clock: FakeClock, firestore_stats: Any
) -> None:
    store.schedule(new_job("j"))
    firestore_stats.reset()
    (claim,) = store.claim_due(clock.now(), "run-1", 10)
    store.mark_enqueued_many([("j", claim.generation, "m-1")])
    job = store.start("j", claim.generation, LEASE, WORKER)
    done = store.complete(_lease(job), Result("deleted"), basis=job)
    # claim 1 read + 1 write; mark 1 write; start 1 read + 1 write; complete 1 write.
    assert _reads_writes(firestore_stats) == (2, 4)
    assert done.state is State.COMPLETED
    stored = store.get("j")
    assert stored is not None and stored.state is State.COMPLETED
    assert stored.message_id == "m-1"
    assert stored.result is not None and stored.result.outcome == "deleted"
    assert [e.to_state for e in stored.history][-4:] == [
        State.CLAIMED,
        State.ENQUEUED,
        State.RUNNING,
        State.COMPLETED,
    ]


@pytest.mark.builtin_emulator("billing counters")
def test_a_completion_after_a_heartbeat_reads_the_record_in_a_transaction(
    store: FirestoreJobStore, clock: FakeClock, firestore_stats: Any
) -> None:
    job = _started(store, "j")
    clock.advance(timedelta(seconds=30))
    beaten = store.extend_lease(_lease(job), LEASE)
    firestore_stats.reset()
    done = store.complete(_lease(beaten), Result("deleted"), basis=job)
    assert _reads_writes(firestore_stats) == (1, 1)
    assert done.state is State.COMPLETED


def test_a_stale_lease_is_refused_even_when_this_store_remembers_the_start(
    store: FirestoreJobStore, clock: FakeClock
) -> None:
    first = _started(store, "j")
    clock.advance(LEASE + timedelta(seconds=1))
    second = store.start("j", first.generation, LEASE, "worker-2")  # took the lapsed lease
    with pytest.raises(LeaseLost):
        store.complete(_lease(first), Result("deleted"), basis=first)
    stored = store.get("j")
    assert stored is not None and stored.state is State.RUNNING
    assert stored.lease_token == second.lease_token


@pytest.mark.builtin_emulator("billing counters")
def test_a_cancel_request_after_start_makes_the_conditional_write_fail_over_to_the_rules(
    store: FirestoreJobStore, firestore_stats: Any
) -> None:
    job = _started(store, "j")
    store.cancel("j", "operator changed their mind", "ops")
    firestore_stats.reset()
    done = store.complete(_lease(job), Result("deleted"), basis=job)
    # Refused by its condition (the cancel request wrote the record): read, then the rules.
    assert _reads_writes(firestore_stats)[0] == 1
    stored = store.get("j")
    assert stored is not None and stored.state is done.state


@pytest.mark.builtin_emulator("billing counters")
def test_a_completion_without_a_basis_reads_the_record_in_a_transaction(
    store: FirestoreJobStore,
    clock: FakeClock,
    firestore_client: firestore.Client,
    firestore_stats: Any,
) -> None:
    job = _started(store, "j")
    other = FirestoreJobStore(firestore_client, clock)
    firestore_stats.reset()
    other.complete(_lease(job), Result("deleted"))
    assert _reads_writes(firestore_stats) == (1, 1)


@pytest.mark.builtin_emulator("billing counters")
def test_an_explicit_key_completes_in_a_transaction_with_its_key_document(
    store: FirestoreJobStore, firestore_stats: Any, firestore_client: firestore.Client
) -> None:
    job = _started(store, "j", idempotency_key="shared-key-1")
    firestore_stats.reset()
    store.complete(_lease(job), Result("deleted"), basis=job)
    # The job and its key document, both read and both written.
    assert _reads_writes(firestore_stats) == (2, 2)
    key = firestore_client.collection("idempotency").document("shared-key-1").get()
    assert key.get("outcome") == "deleted"


def _lose_the_race_after_the_read(
    monkeypatch: pytest.MonkeyPatch,
    store: FirestoreJobStore,
    other: FirestoreJobStore,
    generation: int,
) -> list[Job]:
    """`store`'s first read of job "j" is followed by `other` starting it (worker-2) before
    `store` writes; returns the job `other` started, once it has."""
    read = store._docs.tx.get_document
    others: list[Job] = []

    def read_then_lose_the_race(ref: Any) -> Any:
        snapshot = read(ref)
        if not others:
            others.append(other.start("j", generation, LEASE, "worker-2"))
        return snapshot

    monkeypatch.setattr(store._docs.tx, "get_document", read_then_lose_the_race)
    return others


def _enqueued(store: FirestoreJobStore, job_id: str, **extra: Any) -> int:
    store.schedule(new_job(job_id, **extra))
    (claim,) = [c for c in store.claim_due(store.clock.now(), "run-1", 100) if c.job_id == job_id]
    store.mark_enqueued_many([(job_id, claim.generation, f"msg-{job_id}")])
    return claim.generation


@pytest.mark.builtin_emulator("billing counters")
def test_start_is_one_read_and_one_conditional_write_without_a_transaction(
    store: FirestoreJobStore, firestore_stats: Any
) -> None:
    generation = _enqueued(store, "j")
    firestore_stats.reset()
    job = store.start("j", generation, LEASE, WORKER)
    assert _reads_writes(firestore_stats) == (1, 1)
    assert firestore_stats.get()["calls"] == {"GetDocument": 1, "Commit": 1}
    stored = store.get("j")
    assert stored is not None and stored.state is State.RUNNING
    assert stored.lease_token == _lease(job).token
    # The update_time start returns is the stored one: the completion's condition holds.
    assert job.update_time == stored.update_time


def test_a_start_whose_record_changed_after_its_read_is_decided_in_a_transaction(
    store: FirestoreJobStore,
    clock: FakeClock,
    firestore_client: firestore.Client,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Two deliveries read the same record; the other one starts first. This one's write is
    refused by its condition, and the transaction finds the other's live lease."""
    generation = _enqueued(store, "j")
    others = _lose_the_race_after_the_read(
        monkeypatch, store, FirestoreJobStore(firestore_client, clock), generation
    )
    with pytest.raises(LeaseHeld):
        store.start("j", generation, LEASE, WORKER)
    stored = store.get("j")
    assert stored is not None and stored.state is State.RUNNING
    assert stored.lease_token == _lease(others[0]).token


@pytest.mark.builtin_emulator("billing counters")
def test_start_with_a_shared_key_takes_the_key_in_a_transaction(
    store: FirestoreJobStore, firestore_stats: Any, firestore_client: firestore.Client
) -> None:
    generation = _enqueued(store, "j", idempotency_key="shared-key-2")
    firestore_stats.reset()
    job = store.start("j", generation, LEASE, WORKER)
    # The unlocked read finds the shared key; the transaction then reads (and locks) only the
    # key and writes both, the job's write conditioned on that read: as a whole transaction
    # would bill.
    assert _reads_writes(firestore_stats) == (2, 2)
    assert firestore_stats.get()["calls"] == {
        "GetDocument": 1,
        "BeginTransaction": 1,
        "BatchGetDocuments": 1,
        "Commit": 1,
    }
    key = firestore_client.collection("idempotency").document("shared-key-2").get()
    assert key.get("holder")["token"] == _lease(job).token


def test_start_of_an_unknown_job_is_decided_by_the_transaction_read(
    store: FirestoreJobStore,
) -> None:
    with pytest.raises(JobNotFound):
        store.start("nobody", 1, LEASE, WORKER)


def test_start_and_completion_append_their_history_entries_to_the_stored_ones(
    store: FirestoreJobStore,
) -> None:
    generation = _enqueued(store, "j")
    job = store.start("j", generation, LEASE, WORKER)
    done = store.complete(_lease(job), Result("deleted"), basis=job)
    stored = store.get("j")
    assert stored is not None
    assert stored.history == done.history
    assert [e.to_state for e in stored.history] == [
        State.DEFERRED,
        State.CLAIMED,
        State.ENQUEUED,
        State.RUNNING,
        State.COMPLETED,
    ]


def test_a_history_at_its_bound_is_trimmed_not_appended_to(
    firestore_client: firestore.Client, clock: FakeClock
) -> None:
    bounded = FirestoreJobStore(firestore_client, clock, history_limit=2)
    generation = _enqueued(bounded, "j")
    job = bounded.start("j", generation, LEASE, WORKER)
    done = bounded.complete(_lease(job), Result("deleted"), basis=job)
    stored = bounded.get("j")
    assert stored is not None and stored.history == done.history
    assert len(stored.history) == 2 and stored.history[-1].to_state is State.COMPLETED


def test_a_stored_history_that_does_not_decode_exactly_is_rewritten_whole_by_start(
    store: FirestoreJobStore, firestore_client: firestore.Client
) -> None:
    generation = _enqueued(store, "j")
    ref = firestore_client.collection("jobs").document("j")
    raw = ref.get().to_dict() or {}
    # An entry with a key this version does not know (an older writer's, say).
    ref.update({"history": [{**raw["history"][0], "note": "legacy"}, *raw["history"][1:]]})
    job = store.start("j", generation, LEASE, WORKER)
    stored = ref.get().to_dict() or {}
    assert stored["history"] == [entry.to_document() for entry in job.history]


def test_a_shared_key_start_whose_record_changed_after_its_read_is_decided_afresh(
    store: FirestoreJobStore,
    clock: FakeClock,
    firestore_client: firestore.Client,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    generation = _enqueued(store, "j", idempotency_key="shared-key-3")
    others = _lose_the_race_after_the_read(
        monkeypatch, store, FirestoreJobStore(firestore_client, clock), generation
    )
    with pytest.raises(LeaseHeld):
        store.start("j", generation, LEASE, WORKER)
    stored = store.get("j")
    assert stored is not None and stored.lease_token == _lease(others[0]).token
    key = firestore_client.collection("idempotency").document("shared-key-3").get()
    assert key.get("holder")["token"] == _lease(others[0]).token


def test_a_shared_key_start_is_refused_by_its_condition_when_the_record_changed(
    store: FirestoreJobStore,
    clock: FakeClock,
    firestore_client: firestore.Client,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """An operator's cancel lands between the read and the key's transaction: the job's
    write is refused by its condition and the fresh transaction sees the cancel."""
    generation = _enqueued(store, "j", idempotency_key="shared-key-4")
    other = FirestoreJobStore(firestore_client, clock)
    read = store._docs.tx.get_document
    cancelled: list[Job] = []

    def read_then_cancel(ref: Any) -> Any:
        snapshot = read(ref)
        cancelled.append(other.cancel("j", "not needed", "ops"))
        return snapshot

    monkeypatch.setattr(store._docs.tx, "get_document", read_then_cancel)
    try:
        started: Job | None = store.start("j", generation, LEASE, WORKER)
    except AlreadyTerminal:
        started = None
    stored = store.get("j")
    assert stored is not None
    assert stored.state is cancelled[0].state
    if started is not None:
        assert started.cancel_requested is not None
