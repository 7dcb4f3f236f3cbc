"""Reads inside read-write transactions can answer ABORTED, as production's can: on real
contention (wound-wait) and, when configured, at a rate that exercises the callers' handling."""

from __future__ import annotations

from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
from google.api_core import exceptions
from google.cloud import firestore

from emulators.firestore import indexes
from emulators.firestore.server import Emulator, start
from emulators.launcher import PROJECT_INDEXES
from services.jobs.clock import FakeClock
from services.jobs.model import NewJob
from services.jobs.parts import Result
from services.jobs.state import State
from services.store.job_store import FirestoreJobStore
from tests.fixtures.firestore import seed_due_jobs
from tests.fixtures.store import mark_enqueued

T0 = datetime(2026, 1, 1, tzinfo=UTC)


def _begun(client: Any) -> Any:
    transaction = client.transaction()
    transaction._begin()
    return transaction


@pytest.mark.production_strict("read-time aborts and lock waits (wound-wait)")
def test_an_older_transaction_wounds_a_younger_holder_whose_next_read_aborts(
    firestore_client: Any, firestore_emulator: Emulator
) -> None:
    """Production locks what a transaction reads and delays or aborts one side of a conflict
    (https://cloud.google.com/firestore/docs/transaction-data-contention)."""
    a = firestore_client.collection("docs").document("a")
    b = firestore_client.collection("docs").document("b")
    a.set({"n": 0})
    b.set({"n": 0})
    older = _begun(firestore_client)
    younger = _begun(firestore_client)
    a.get(transaction=younger)
    # The older one does not wait for the younger: it takes the lock at once.
    assert a.get(transaction=older, timeout=2, retry=None).get("n") == 0
    with pytest.raises(exceptions.Aborted, match="Too much contention on these documents"):
        b.get(transaction=younger, retry=None)
    younger.update(a, {"n": 2})
    with pytest.raises(exceptions.Aborted):
        younger._commit()
    older.update(a, {"n": 1})
    older._commit()
    assert a.get().get("n") == 1
    assert firestore_emulator.engine.held_locks() == 0


@pytest.mark.production_strict("read-time aborts and lock waits (wound-wait)")
def test_a_younger_transaction_waits_for_an_older_holder_instead(
    firestore_client: Any, firestore_emulator: Emulator
) -> None:
    """Production locks what a transaction reads and delays or aborts one side of a conflict
    (https://cloud.google.com/firestore/docs/transaction-data-contention)."""
    a = firestore_client.collection("docs").document("a")
    a.set({"n": 0})
    older = _begun(firestore_client)
    younger = _begun(firestore_client)
    a.get(transaction=older)
    with pytest.raises(exceptions.DeadlineExceeded):
        a.get(transaction=younger, timeout=0.5, retry=None)  # it waited, nobody was wounded
    older.update(a, {"n": 1})
    older._commit()
    younger._rollback()
    assert a.get().get("n") == 1


@pytest.fixture
def aborting(monkeypatch: pytest.MonkeyPatch) -> Iterator[tuple[Emulator, Any]]:
    emulator = start(
        admin_port=None, indexes=indexes.load(PROJECT_INDEXES), read_abort_rate=0.3, seed=14
    )
    monkeypatch.setenv("FIRESTORE_EMULATOR_HOST", emulator.address)
    client = firestore.Client(project="read-aborts")
    try:
        yield emulator, client
    finally:
        client.close()
        emulator.stop()


def test_at_a_configured_rate_only_transactional_reads_abort(
    aborting: tuple[Emulator, Any],
) -> None:
    emulator, client = aborting
    emulator.engine.read_abort_rate = 1.0
    ref = client.collection("docs").document("a")
    ref.set({"n": 1})
    assert ref.get().get("n") == 1  # outside a transaction: never
    read_only = client.transaction(read_only=True)
    read_only._begin()
    assert ref.get(transaction=read_only).get("n") == 1
    read_write = _begun(client)
    with pytest.raises(exceptions.Aborted, match="Too much contention"):
        ref.get(transaction=read_write, retry=None)
    assert emulator.engine.random_read_aborts == 1


def test_the_store_claims_every_due_job_once_through_random_read_aborts(
    aborting: tuple[Emulator, Any],
) -> None:
    emulator, client = aborting
    clock = FakeClock(T0)
    ids = seed_due_jobs(client, 30, T0)
    store = FirestoreJobStore(client, clock)
    claimed = store.claim_due(T0, "run-1", 30, page_size=5)
    assert sorted(c.job_id for c in claimed) == ids
    assert emulator.engine.random_read_aborts > 0  # the abort path was exercised
    assert store.claim_due(T0, "run-2", 30, page_size=5) == []


def test_a_job_goes_through_its_whole_life_through_random_read_aborts(
    aborting: tuple[Emulator, Any],
) -> None:
    """Every store transition's transaction reads first: each meets read-time aborts and
    retries them, and the job still ends completed exactly once."""
    emulator, client = aborting
    emulator.engine.read_abort_rate = 0.4
    clock = FakeClock(T0)
    store = FirestoreJobStore(client, clock)
    new = NewJob(
        "job-life", "media.delete_source", "media-life", T0, {"object": "media-life/source.mp4"}
    )
    store.schedule(new)
    (claimed,) = store.claim_due(T0, "run-1", 10)
    mark_enqueued(store, claimed.job_id, claimed.generation, "message-1")
    started = store.start(claimed.job_id, claimed.generation, timedelta(minutes=5), "worker-1")
    assert started.lease is not None
    done = store.complete(started.lease, Result("deleted"))
    assert done.state is State.COMPLETED
    assert store.get("job-life").state is State.COMPLETED  # type: ignore[union-attr]
    assert emulator.engine.random_read_aborts > 0
