"""What a scan run with nothing due bills, from the emulator's counters, with and without the
housekeeping interval; and that housekeeping still comes round."""

from __future__ import annotations

from collections.abc import Callable
from datetime import timedelta
from typing import Any

import pytest

from services.jobs.budget import DEFAULT_HOUSEKEEPING_INTERVAL_S
from tests.integration.scan.conftest import T0, Rig


def _billed(stats: Any) -> int:
    counts = stats.get()
    return int(counts["document_reads"] + counts["document_writes"])


def _runs_recorded(rig: Rig) -> int:
    return sum(1 for _ in rig.client.collection("scan_runs").stream())


@pytest.mark.builtin_emulator("billing counters")
@pytest.mark.parametrize("shards", [1, 4])
def test_with_an_interval_an_idle_run_bills_four_operations_whatever_the_store_holds(
    scan_rig: Callable[..., Rig], firestore_stats: Any, shards: int
) -> None:
    rig = scan_rig(housekeeping_interval_s=DEFAULT_HOUSEKEEPING_INTERVAL_S, shards=shards)
    firestore_stats.reset()
    rig.scan()  # the first run ever does its housekeeping, and marks it
    if shards == 1:
        # The 13 of a housekeeping run (below), the mark in the control document, and (once
        # in a deployment's life) the shard layout recorded in it: 1 read, 1 write.
        assert _billed(firestore_stats) == 16
    # With 4 shards the claim is one `shard in [...]` probe, as cheap as N = 1's query.
    firestore_stats.reset()
    rig.clock.advance(timedelta(seconds=60))
    empty = rig.scan()
    # The control document, the expired-claim and expired-lease queries, the claim query.
    assert _billed(firestore_stats) == 4
    rig.seed(300, due_at=T0 + timedelta(days=30))  # future jobs only
    firestore_stats.reset()
    rig.clock.advance(timedelta(seconds=60))
    busy = rig.scan()
    assert _billed(firestore_stats) == 4
    assert (empty["claimed"], busy["claimed"]) == (0, 0)
    assert busy["due_count"] == 0
    assert _runs_recorded(rig) == 1


@pytest.mark.builtin_emulator("billing counters")
def test_a_new_instance_and_an_operator_change_keep_the_mark(
    scan_rig: Callable[..., Rig], firestore_stats: Any
) -> None:
    first = scan_rig(housekeeping_interval_s=900)
    first.scan()
    first.store.update_control("ops", "slower tonight", catch_up_rate=1)
    # A cold instance (a new app and scanner) reads the mark with the control document.
    cold = scan_rig(housekeeping_interval_s=900, clock=first.clock)
    first.clock.advance(timedelta(seconds=300))
    firestore_stats.reset()
    summary = cold.scan()
    assert _billed(firestore_stats) == 4
    assert summary["claimed"] == 0 and summary["budget"] == 60  # 1/s x 60 s: the change took effect
    assert _runs_recorded(first) == 1


@pytest.mark.builtin_emulator("billing counters")
def test_without_an_interval_every_run_does_its_housekeeping(
    scan_rig: Callable[..., Rig], firestore_stats: Any
) -> None:
    rig = scan_rig()
    rig.scan()
    rig.seed(300, due_at=T0 + timedelta(days=30))
    firestore_stats.reset()
    rig.clock.advance(timedelta(seconds=60))
    rig.scan()
    # control, 3 reclaimer queries, 2 due_at type checks (1 read each with future jobs), the
    # claim query, 2 limit-1 and 3 count queries, and the scan_runs document.
    assert _billed(firestore_stats) == 13
    assert _runs_recorded(rig) == 2


def test_a_stuck_claim_is_reclaimed_within_its_timeout_plus_one_run_not_the_interval(
    scan_rig: Callable[..., Rig],
) -> None:
    # Finding 5: before, the claim waited for the next housekeeping (timeout + 900 s).
    rig = scan_rig(housekeeping_interval_s=900)  # the claim timeout is 600 s
    [job_id] = rig.seed(1, due_at=T0)
    # A claim abandoned by a run that died (claimed, never published).
    rig.store.claim_due(rig.clock.now(), "dead-run", 1)
    first = rig.scan()
    assert first["claimed"] == 0  # too early to reclaim
    rig.clock.advance(timedelta(seconds=700))
    second = rig.scan()  # past the claim timeout, within the housekeeping interval
    assert second["reclaimed"] == 1 and second["claimed"] == 1
    assert rig.pull()[job_id] == 1
    assert _runs_recorded(rig) == 2  # a run that reclaims records itself
