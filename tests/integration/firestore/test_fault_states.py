"""An injected fault leaves the emulator in the state the real failure would: an ABORTED ends
the transaction it names (locks released, nothing applied); any other status stands for a
request that never reached the backend, so the transaction is untouched."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest
from google.api_core import exceptions
from google.cloud import firestore

from emulators.firestore.server import Emulator

pytestmark = pytest.mark.builtin_emulator("fault injection")


@pytest.fixture(autouse=True)
def _no_faults_left(firestore_emulator: Emulator) -> Iterator[None]:
    yield
    firestore_emulator.clear_faults()


def _increment(client: Any, ref: Any) -> None:
    @firestore.transactional
    def body(transaction: Any) -> None:
        snapshot = ref.get(transaction=transaction)
        transaction.update(ref, {"n": snapshot.get("n") + 1})

    body(client.transaction())


def test_an_aborted_commit_releases_its_locks_so_the_clients_retry_succeeds(
    firestore_client: Any, firestore_emulator: Emulator, firestore_stats: Any
) -> None:
    ref = firestore_client.collection("counters").document("c")
    ref.set({"n": 0})
    firestore_stats.reset()
    firestore_emulator.inject_fault("Commit", status="ABORTED", count=1)
    _increment(firestore_client, ref)  # before the fix: the retry's read waited 20 s, ABORTED
    assert ref.get().get("n") == 1
    calls = firestore_stats.get()["calls"]
    assert calls["Commit"] == 2 and calls["BeginTransaction"] == 2
    assert calls.get("Rollback", 0) == 0
    assert firestore_emulator.engine.held_locks() == 0


def test_an_unavailable_commit_leaves_the_transaction_open_for_the_clients_retry(
    firestore_client: Any, firestore_emulator: Emulator, firestore_stats: Any
) -> None:
    ref = firestore_client.collection("counters").document("c")
    ref.set({"n": 0})
    firestore_stats.reset()
    firestore_emulator.inject_fault("Commit", status="UNAVAILABLE", count=1)
    _increment(firestore_client, ref)
    assert ref.get().get("n") == 1
    calls = firestore_stats.get()["calls"]
    # The client re-sent the same commit (same transaction): one transaction in all.
    assert calls["Commit"] == 2 and calls["BeginTransaction"] == 1
    assert firestore_emulator.engine.held_locks() == 0


def test_an_aborted_read_ends_its_transaction_and_frees_what_it_had_locked(
    firestore_client: Any, firestore_emulator: Emulator
) -> None:
    first = firestore_client.collection("docs").document("a")
    second = firestore_client.collection("docs").document("b")
    first.set({"n": 0})
    second.set({"n": 0})
    transaction = firestore_client.transaction()
    transaction._begin()
    first.get(transaction=transaction)
    assert firestore_emulator.engine.held_locks() == 1
    firestore_emulator.inject_fault("BatchGetDocuments", status="ABORTED", count=1)
    with pytest.raises(exceptions.Aborted):
        second.get(transaction=transaction, retry=None)
    assert firestore_emulator.engine.held_locks() == 0
    transaction.update(first, {"n": 1})
    with pytest.raises(exceptions.InvalidArgument, match="expired or is no longer valid"):
        transaction._commit()
    assert first.get().get("n") == 0


def test_an_unavailable_read_leaves_the_transaction_and_its_locks(
    firestore_client: Any, firestore_emulator: Emulator
) -> None:
    first = firestore_client.collection("docs").document("a")
    first.set({"n": 0})
    transaction = firestore_client.transaction()
    transaction._begin()
    first.get(transaction=transaction)
    firestore_emulator.inject_fault("BatchGetDocuments", status="UNAVAILABLE", count=1)
    with pytest.raises(exceptions.ServiceUnavailable):
        first.get(transaction=transaction, retry=None)
    assert firestore_emulator.engine.held_locks() == 1
    transaction.update(first, {"n": 1})
    transaction._commit()
    assert first.get().get("n") == 1
