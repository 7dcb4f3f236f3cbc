"""Contention is not an outage (issue 12, finding 7), on the emulator with real transactions.

Another transaction holds the locks of the records a scan wants (an overlapping scan, a worker
mid-commit). The scan waits at most its call timeout, then ends the run with 200 and
`stopped_because: contention`; the reclaimer skips a locked record and claiming goes on.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from datetime import timedelta
from typing import Any

import pytest
from google.cloud import firestore

from services.jobs import schema
from services.jobs.state import State
from tests.integration.scan.conftest import Rig

LEASE = timedelta(minutes=1)


@contextmanager
def holding(client: firestore.Client, job_ids: list[str]) -> Iterator[None]:
    """A read-write transaction that has read (and so locked) `job_ids`, open meanwhile."""
    transaction = client.transaction()
    transaction._begin()
    try:
        for job_id in job_ids:
            client.collection(schema.JOBS).document(job_id).get(transaction=transaction)
        yield
    finally:
        transaction._rollback()


@pytest.mark.production_strict("pessimistic locking: locked records wait or abort")
def test_a_scan_whose_due_records_are_locked_answers_200_contention_not_503(
    scan_rig: Callable[..., Rig],
) -> None:
    """Production (standard edition: pessimistic concurrency) makes a transaction's reads lock
    what they read and resolves contention by delaying or aborting one side
    (https://cloud.google.com/firestore/docs/transaction-data-contention); Google's emulator
    neither waits nor wounds this way: it answers "Transaction lock timeout" instead.
    """
    rig = scan_rig(firestore_timeout_s=0.5)
    ids = rig.seed(5)
    with holding(rig.client, ids):
        response = rig.post()
    assert response.status_code == 200, response.get_data(as_text=True)
    body = response.get_json()
    assert (body["stopped_because"], body["claimed"]) == ("contention", 0)
    assert rig.states(ids) == {"deferred": 5}
    assert rig.pull() == {}
    # Once the holder is gone the next run claims every record: the waits that timed out
    # left no lock behind (Firestore ends a wait whose RPC was cancelled, and so does the
    # built-in emulator).
    later = rig.scan()
    assert (later["claimed"], later["published"], later["stopped_because"]) == (5, 5, "drained")
    assert rig.states(ids) == {"enqueued": 5}
    assert rig.pull() == dict.fromkeys(ids, 1)


def test_a_locked_expired_lease_never_stops_claiming_the_unrelated_due_jobs(
    scan_rig: Callable[..., Rig], caplog: pytest.LogCaptureFixture
) -> None:
    rig = scan_rig(firestore_timeout_s=0.5)
    rig.seed(1, prefix="stuck")
    (claim,) = rig.store.claim_due(rig.clock.now(), "run-0", 1)
    rig.store.start("stuck-000000", claim.generation, LEASE, "crashed-worker")
    rig.clock.advance(LEASE * 2)  # its lease is long expired
    due = rig.seed(20)
    caplog.set_level(logging.WARNING)

    with holding(rig.client, ["stuck-000000"]):
        body = rig.scan()

    assert body["claimed"] == 20 and body["published"] == 20
    assert rig.states(due) == {"enqueued": 20}
    fields: list[dict[str, Any]] = [getattr(r, "fields", {}) for r in caplog.records]
    assert any(f.get("reason") == "reclaim_skipped" for f in fields)
    assert rig.states(["stuck-000000"]) == {State.RUNNING.value: 1}  # left for a later run

    # The holder gone, the next run reclaims it: the skipped reclaim left no lock behind.
    later = rig.scan()
    assert (later["reclaimed"], later["claimed"], later["published"]) == (1, 1, 1), later
    assert rig.states(["stuck-000000"]) == {"enqueued": 1}  # reclaimed, then claimed again
