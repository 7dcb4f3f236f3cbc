"""Locks never outlive their owner: a handler waiting for a lock stops when its caller is gone,
and a transaction that has finished (rolled back, committed, expired) never takes a lock."""

from __future__ import annotations

import threading
import time
from datetime import UTC, datetime
from typing import Any

import pytest
from google.api_core import exceptions
from google.cloud import firestore

from emulators.firestore.server import Emulator, start
from services.jobs import schema
from services.jobs.clock import FakeClock
from services.jobs.errors import LostRace
from services.store.job_store import FirestoreJobStore
from tests.fixtures.firestore import seed_due_jobs

T0 = datetime(2026, 1, 1, tzinfo=UTC)


def _begun(client: Any) -> Any:
    transaction = client.transaction()
    transaction._begin()
    return transaction


def _wait_until(condition: Any, timeout_s: float = 5.0) -> bool:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if condition():
            return True
        time.sleep(0.02)
    return condition()


@pytest.mark.builtin_emulator("inspects the built-in engine's lock table")
def test_a_read_whose_client_deadline_passed_never_takes_the_lock_later(
    firestore_client: Any, firestore_emulator: Emulator
) -> None:
    ref = firestore_client.collection("docs").document("d")
    ref.set({"n": 0})
    holder = _begun(firestore_client)
    ref.get(transaction=holder)
    waiter = _begun(firestore_client)
    with pytest.raises(exceptions.DeadlineExceeded):
        ref.get(transaction=waiter, timeout=0.5, retry=None)
    waiter._rollback()  # what @transactional does with the error
    holder._rollback()
    # The abandoned read handler must not wake up now and lock the document for `waiter`.
    time.sleep(0.5)
    assert firestore_emulator.engine.held_locks() == 0
    third = _begun(firestore_client)
    assert ref.get(transaction=third, timeout=2, retry=None).get("n") == 0
    third.update(ref, {"n": 1})
    third._commit()
    assert ref.get().get("n") == 1


@pytest.mark.builtin_emulator("reads the built-in emulator's counters")
def test_a_transaction_rolled_back_while_its_read_waits_fails_that_read_at_once(
    firestore_client: Any, firestore_emulator: Emulator
) -> None:
    ref = firestore_client.collection("docs").document("d")
    ref.set({"n": 0})
    holder = _begun(firestore_client)
    ref.get(transaction=holder)
    waiter = _begun(firestore_client)
    outcome: list[BaseException | None] = []

    def read() -> None:
        try:
            ref.get(transaction=waiter, retry=None, timeout=30)
            outcome.append(None)
        except BaseException as exc:  # reported below
            outcome.append(exc)

    thread = threading.Thread(target=read)
    thread.start()
    assert _wait_until(lambda: firestore_emulator.stats()["calls"].get("BatchGetDocuments", 0) >= 3)
    firestore_client._firestore_api.rollback(
        request={"database": firestore_client._database_string, "transaction": waiter._id}
    )
    thread.join(5)
    assert not thread.is_alive(), "the read kept waiting for a rolled-back transaction"
    assert isinstance(outcome[0], exceptions.InvalidArgument)
    assert firestore_emulator.engine.held_locks() == 1  # only the holder's
    holder._rollback()
    assert firestore_emulator.engine.held_locks() == 0


@pytest.mark.builtin_emulator("inspects the built-in engine's lock table")
def test_a_scan_with_a_short_firestore_timeout_claims_everything_once_the_holder_is_gone(
    firestore_client: Any, firestore_emulator: Emulator
) -> None:
    """The JOBS_FIRESTORE_TIMEOUT_S shorter than the 20 s lock deadline case: a claim that
    timed out while a job was locked must leave no lock behind, so the next run claims all."""
    ids = seed_due_jobs(firestore_client, 20, T0)
    holder = _begun(firestore_client)
    firestore_client.collection(schema.JOBS).document(ids[0]).get(transaction=holder)
    store = FirestoreJobStore(firestore_client, FakeClock(T0), timeout_s=0.3)
    # A lock wait past the call timeout inside a begun transaction is contention, not an
    # outage (the scan answers 200 stopped_because=contention), so the store says LostRace.
    with pytest.raises(LostRace):
        store.claim_due(T0, "run-1", 20)
    holder._rollback()
    time.sleep(0.5)  # room for any still-waiting handler to (wrongly) take a lock
    assert firestore_emulator.engine.held_locks() == 0
    # The next run: a roomier timeout, so a loaded machine cannot turn this check of "no
    # lock left behind" into a timing test (a leftover lock would still make it LostRace).
    later = FirestoreJobStore(firestore_client, FakeClock(T0), timeout_s=10)
    claimed = later.claim_due(T0, "run-2", 20)
    assert sorted(c.job_id for c in claimed) == ids
    states = {s.id: s.get("state") for s in firestore_client.collection(schema.JOBS).stream()}
    assert set(states.values()) == {"claimed"}


def test_an_expired_idle_transaction_releases_its_locks_to_a_waiter(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    with start(admin_port=None, transaction_idle_timeout_s=1.0) as emulator:
        monkeypatch.setenv("FIRESTORE_EMULATOR_HOST", emulator.address)
        client = firestore.Client(project="idle")
        ref = client.collection("docs").document("d")
        ref.set({"n": 0})
        abandoned = _begun(client)
        ref.get(transaction=abandoned)  # then the client never comes back
        waiter = _begun(client)
        assert ref.get(transaction=waiter, timeout=10, retry=None).get("n") == 0
        assert emulator.engine.held_locks() == 1
        waiter._rollback()
        assert emulator.engine.held_locks() == 0
        client.close()


@pytest.mark.builtin_emulator("inspects the built-in engine's lock table")
def test_a_waiting_read_stops_as_soon_as_its_caller_cancels(
    firestore_client: Any, firestore_emulator: Emulator
) -> None:
    from google.cloud.firestore_v1.types import firestore as firestore_types

    ref = firestore_client.collection("docs").document("d")
    ref.set({"n": 0})
    holder = _begun(firestore_client)
    ref.get(transaction=holder)
    waiter = _begun(firestore_client)
    stub = firestore_client._firestore_api._transport.batch_get_documents  # raw gRPC callable
    request = firestore_types.BatchGetDocumentsRequest(
        database=firestore_client._database_string,
        documents=[ref._document_path],
        transaction=waiter._id,
    )
    call = stub(request, timeout=30)
    engine = firestore_emulator.engine
    assert _wait_until(lambda: engine.transactions[waiter._id].active == 1)
    call.cancel()
    # The handler notices within its poll interval and stops waiting: the transaction is idle.
    assert _wait_until(lambda: engine.transactions[waiter._id].active == 0, timeout_s=2)
    holder._rollback()
    time.sleep(0.3)
    assert engine.held_locks() == 0  # nobody took the lock for the cancelled read
    waiter._rollback()
