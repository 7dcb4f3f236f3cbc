"""mark_enqueued_many: mark_enqueued's rules per item, one transaction per page, 1 read + 1
write per job."""

from __future__ import annotations

from collections.abc import Callable
from datetime import timedelta
from typing import Any

import pytest

from services.jobs.clock import FakeClock
from services.jobs.errors import InvalidTransition, JobNotFound, StaleGeneration, ValidationError
from services.jobs.parts import Result
from services.jobs.state import State
from services.store.job_store import FirestoreJobStore
from tests.integration.jobs.conftest import LEASE, T0, WORKER, new_job

TIMEOUT = timedelta(minutes=10)


def _stored(store: FirestoreJobStore, job_id: str) -> Any:
    job = store.get(job_id)
    assert job is not None
    return job


def test_claimed_jobs_become_enqueued_with_their_message_ids_in_input_order(
    store: FirestoreJobStore, clock: FakeClock
) -> None:
    for n in range(5):
        store.schedule(new_job(f"j{n}"))
    claims = store.claim_due(clock.now(), "run-1", 5)
    at = clock.now() + timedelta(seconds=2)
    items = [(c.job_id, c.generation, f"msg-{c.job_id}") for c in reversed(claims)]

    marks = store.mark_enqueued_many(items, at, page_size=2)

    assert [m.job_id for m in marks] == [job_id for job_id, _, _ in items]
    assert all(m.ok and m.job is not None and m.job.state is State.ENQUEUED for m in marks)
    for job_id, _, message_id in items:
        job = _stored(store, job_id)
        assert (job.state, job.message_id, job.enqueued_at) == (State.ENQUEUED, message_id, at)
        assert job.history[-1].by == "scan:run-1"


def test_each_item_gets_the_error_mark_enqueued_would_raise_and_the_others_are_written(
    store: FirestoreJobStore, clock: FakeClock
) -> None:
    store.schedule(new_job("good"))
    store.schedule(new_job("stale"))
    store.schedule(new_job("never-claimed", T0 + timedelta(days=1)))
    claims = {c.job_id: c.generation for c in store.claim_due(clock.now(), "run-1", 5)}
    items = [
        ("good", claims["good"], "m1"),
        ("stale", claims["stale"] + 1, "m2"),
        ("never-claimed", 1, "m3"),
        ("missing", 1, "m4"),
        ("good-but-empty-message", 1, ""),
    ]

    marks = store.mark_enqueued_many(items)

    assert marks[0].ok and _stored(store, "good").state is State.ENQUEUED
    assert isinstance(marks[1].error, StaleGeneration)
    assert isinstance(marks[2].error, InvalidTransition)
    assert isinstance(marks[3].error, JobNotFound)
    assert isinstance(marks[4].error, ValidationError)
    assert _stored(store, "stale").state is State.CLAIMED
    assert _stored(store, "never-claimed").state is State.DEFERRED


def test_a_push_that_beat_the_batch_is_never_moved_back(
    store: FirestoreJobStore, clock: FakeClock
) -> None:
    store.schedule(new_job("running"))
    store.schedule(new_job("done"))
    claims = {c.job_id: c.generation for c in store.claim_due(clock.now(), "run-1", 5)}
    store.start("running", claims["running"], LEASE, WORKER)
    done = store.start("done", claims["done"], LEASE, WORKER)
    assert done.lease is not None
    store.complete(done.lease, Result("deleted"))

    marks = store.mark_enqueued_many(
        [("running", claims["running"], "m1"), ("done", claims["done"], "m2")]
    )

    assert [m.job.state if m.job else None for m in marks] == [State.RUNNING, State.COMPLETED]
    running, done = _stored(store, "running"), _stored(store, "done")
    assert (running.state, running.message_id, running.lease_owner) == (State.RUNNING, "m1", WORKER)
    assert (done.state, done.message_id) == (State.COMPLETED, "m2")


def test_marking_again_is_a_no_op(store: FirestoreJobStore, clock: FakeClock) -> None:
    store.schedule(new_job("j"))
    (claim,) = store.claim_due(clock.now(), "run-1", 1)
    store.mark_enqueued_many([("j", claim.generation, "m1")])
    before = _stored(store, "j")
    (mark,) = store.mark_enqueued_many([("j", claim.generation, "m1")])
    assert mark.job == before
    assert _stored(store, "j") == before


def test_a_job_reclaimed_before_its_mark_is_refused(
    store: FirestoreJobStore, clock: FakeClock
) -> None:
    store.schedule(new_job("j"))
    (claim,) = store.claim_due(clock.now(), "run-1", 1)
    clock.advance(TIMEOUT + timedelta(seconds=1))
    store.reclaim_expired(clock.now(), TIMEOUT, 10, "run-2")
    store.claim_due(clock.now(), "run-3", 1)
    (mark,) = store.mark_enqueued_many([("j", claim.generation, "late")])
    assert isinstance(mark.error, StaleGeneration)
    assert _stored(store, "j").message_id is None


@pytest.mark.builtin_emulator("billing counters")
def test_marking_the_claims_this_store_made_bills_one_write_per_job_and_no_read(
    store: FirestoreJobStore,
    clock: FakeClock,
    seed: Callable[..., list[str]],
    firestore_stats: Any,
) -> None:
    seed(150)
    claims = store.claim_due(clock.now(), "run-1", 150)
    firestore_stats.reset()
    marks = store.mark_enqueued_many([(c.job_id, c.generation, f"m-{c.job_id}") for c in claims])
    counts = firestore_stats.get()
    assert (counts["document_reads"], counts["document_writes"]) == (0, 150)
    assert all(m.ok for m in marks)
    assert {_stored(store, c.job_id).state for c in claims} == {State.ENQUEUED}
    assert _stored(store, claims[7].job_id).message_id == f"m-{claims[7].job_id}"


@pytest.mark.builtin_emulator("billing counters")
def test_marking_claims_another_process_made_bills_one_read_and_one_write_per_job(
    store: FirestoreJobStore,
    clock: FakeClock,
    seed: Callable[..., list[str]],
    firestore_client: Any,
    firestore_stats: Any,
) -> None:
    seed(150)
    claims = store.claim_due(clock.now(), "run-1", 150)
    other = FirestoreJobStore(firestore_client, clock)  # a restarted scan: nothing remembered
    firestore_stats.reset()
    marks = other.mark_enqueued_many([(c.job_id, c.generation, f"m-{c.job_id}") for c in claims])
    assert all(m.ok for m in marks)
    counts = firestore_stats.get()
    assert (counts["document_reads"], counts["document_writes"]) == (150, 150)


@pytest.mark.builtin_emulator("billing counters")
def test_a_claim_changed_since_is_refused_by_its_condition_and_marked_by_reading_it(
    store: FirestoreJobStore, clock: FakeClock, firestore_stats: Any
) -> None:
    for job_id in ("a", "b"):
        store.schedule(new_job(job_id))
    claims = {c.job_id: c for c in store.claim_due(clock.now(), "run-1", 2)}
    started = store.start("a", claims["a"].generation, LEASE, WORKER)  # the push came first
    firestore_stats.reset()
    marks = store.mark_enqueued_many(
        [(job_id, claims[job_id].generation, f"m-{job_id}") for job_id in ("a", "b")]
    )
    counts = firestore_stats.get()
    # b: its conditional write; a: refused, then read and written in a transaction.
    assert (counts["document_reads"], counts["document_writes"]) == (1, 2)
    assert [m.ok for m in marks] == [True, True]
    assert _stored(store, "a").state is State.RUNNING  # never moved backwards
    assert _stored(store, "a").message_id == "m-a"
    assert _stored(store, "a").lease_token == started.lease_token
    assert _stored(store, "b").state is State.ENQUEUED


def test_a_page_size_below_one_is_refused(store: FirestoreJobStore) -> None:
    with pytest.raises(ValidationError):
        store.mark_enqueued_many([], page_size=0)
