"""With Firestore unreachable every store call gives up within its bounds and raises
StoreUnavailable, instead of waiting the client's defaults (300 s reads, 60 s commits).

Two kinds of unreachable: nothing listens (connection refused), and a listener that accepts
the connection but never answers (only the per-call timeout ends that). The store gets a
small timeout so the test is quick; no durations are asserted.
"""

from __future__ import annotations

import socket
from collections.abc import Callable, Iterator
from datetime import timedelta
from typing import Any

import pytest
from google.cloud import firestore

from services.jobs.clock import FakeClock
from services.jobs.errors import StoreUnavailable
from services.jobs.parts import ErrorInfo, Lease, Result
from services.store.job_store import FirestoreJobStore
from services.store.rejections import RejectionStore, rejection_of
from tests.fixtures.store import mark_enqueued
from tests.integration.jobs.conftest import LEASE, T0, WORKER, new_job

TIMEOUT_S = 0.1


def _refused_address() -> Iterator[str]:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    yield f"127.0.0.1:{port}"  # closed again: nothing listens there


def _silent_address() -> Iterator[str]:
    with socket.socket() as listener:
        listener.bind(("127.0.0.1", 0))
        listener.listen(16)  # the kernel completes handshakes; nobody ever answers
        yield f"127.0.0.1:{listener.getsockname()[1]}"


@pytest.fixture(params=[_refused_address, _silent_address], ids=["refused", "silent"])
def dead_client(
    request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch
) -> Iterator[firestore.Client]:
    addresses: Callable[[], Iterator[str]] = request.param
    for address in addresses():
        monkeypatch.setenv("FIRESTORE_EMULATOR_HOST", address)
        client = firestore.Client(project="unreachable")
        try:
            yield client
        finally:
            client.close()


@pytest.fixture
def dead_store(dead_client: firestore.Client) -> FirestoreJobStore:
    return FirestoreJobStore(dead_client, FakeClock(T0), timeout_s=TIMEOUT_S)


ERROR = ErrorInfo("transient", "x")
LOST_LEASE = Lease("j", 1, "token", WORKER, T0)
CALLS: dict[str, Callable[[FirestoreJobStore], Any]] = {
    "schedule": lambda s: s.schedule(new_job("j")),
    "get": lambda s: s.get("j"),
    "get_control": lambda s: s.get_control(),
    "get_idempotency": lambda s: s.get_idempotency("k"),
    "list_jobs": lambda s: s.list_jobs(),
    "stats": lambda s: s.stats(T0, timedelta(minutes=10)),
    "backlog": lambda s: s.backlog(T0, timedelta(minutes=10), timedelta(days=1)),
    "claim_due": lambda s: s.claim_due(T0, "run-1", 10),
    "reclaim_expired": lambda s: s.reclaim_expired(T0, timedelta(minutes=10), 10, "run-1"),
    "mark_enqueued": lambda s: mark_enqueued(s, "j", 1, "m-1"),
    "start": lambda s: s.start("j", 1, LEASE, WORKER),
    "complete": lambda s: s.complete(LOST_LEASE, Result("deleted")),
    "release": lambda s: s.release(LOST_LEASE, ERROR),
    "cancel": lambda s: s.cancel("j", "stop", "ann"),
    "update_control": lambda s: s.update_control("ann", "pause", paused=True),
}


@pytest.mark.parametrize("name", list(CALLS))
def test_every_store_call_raises_store_unavailable_when_firestore_is_unreachable(
    dead_store: FirestoreJobStore, name: str
) -> None:
    with pytest.raises(StoreUnavailable):
        CALLS[name](dead_store)


def test_batch_marking_reports_store_unavailable_per_item(dead_store: FirestoreJobStore) -> None:
    marks = dead_store.mark_enqueued_many([("a", 1, "m-a"), ("b", 1, "m-b")])
    assert [type(m.error) for m in marks] == [StoreUnavailable, StoreUnavailable]


def test_the_rejection_store_raises_store_unavailable_when_firestore_is_unreachable(
    dead_client: firestore.Client,
) -> None:
    rejections = RejectionStore(dead_client, timeout_s=TIMEOUT_S)
    rejection = rejection_of("bad_json", "x", b"{", {}, received_at=T0, message_id="m-1")
    with pytest.raises(StoreUnavailable):
        rejections.record(rejection)
    with pytest.raises(StoreUnavailable):
        rejections.recent()
    with pytest.raises(StoreUnavailable):
        rejections.get("r")


def test_a_store_timeout_must_be_positive(dead_client: firestore.Client) -> None:
    with pytest.raises(ValueError, match="timeout_s"):
        FirestoreJobStore(dead_client, FakeClock(T0), timeout_s=0)
