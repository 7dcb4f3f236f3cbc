"""Overlapping scans over real HTTP: the claim is atomic, so each job is published once."""

from __future__ import annotations

import threading
from collections.abc import Callable
from contextlib import ExitStack
from typing import Any

import pytest
import requests

from tests.integration.scan.conftest import Rig


@pytest.mark.production_strict("pessimistic locking: locked records wait or abort")
@pytest.mark.parametrize("shards", [1, 4])
def test_two_concurrent_scan_requests_publish_every_job_exactly_once(
    scan_rig: Callable[..., Rig], shards: int
) -> None:
    # Two scan instances (own app, own publisher) over the same records, as two Cloud Run
    # instances would be if a slow run overlapped a manual trigger; with JOBS_SHARDS=4 each
    # also claims its shards on parallel threads.
    """Production (standard edition: pessimistic concurrency) makes a transaction's reads lock
    what they read and resolves contention by delaying or aborting one side
    (https://cloud.google.com/firestore/docs/transaction-data-contention); Google's emulator
    neither waits nor wounds this way: it answers "Transaction lock timeout" instead.
    """
    first = scan_rig(max_per_run=1000, page_size=40, shards=shards)
    second = scan_rig(max_per_run=1000, page_size=40, shards=shards)
    ids = first.seed(600)
    stored = {s.get("shard") for s in first.client.collection("jobs").stream()}
    assert stored == set(range(shards))
    barrier = threading.Barrier(2)
    results: list[dict[str, Any]] = []
    lock = threading.Lock()

    def trigger(url: str, token: str) -> None:
        barrier.wait()
        response = requests.post(url, headers={"Authorization": f"Bearer {token}"}, timeout=120)
        assert response.status_code == 200, response.text
        with lock:
            results.append(response.json())

    with ExitStack() as stack:
        urls = [stack.enter_context(rig.serve()) for rig in (first, second)]
        threads = [
            threading.Thread(target=trigger, args=(url, rig.token()))
            for url, rig in zip(urls, (first, second), strict=True)
        ]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join(timeout=180)
    assert len(results) == 2
    assert len({r["run_id"] for r in results}) == 2
    # Whatever contention left behind, a later run drains it.
    leftover = first.scan()
    pulled = first.pull()
    claimed = sum(r["claimed"] for r in results) + leftover["claimed"]
    assert claimed == len(ids)
    assert sum(r["published"] for r in [*results, leftover]) == len(ids)
    assert set(pulled) == set(ids)
    assert set(pulled.values()) == {1}, {k: v for k, v in pulled.items() if v != 1}
    assert first.states(ids) == {"enqueued": len(ids)}
