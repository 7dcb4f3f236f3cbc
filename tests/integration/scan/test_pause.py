"""Pause and catch-up: a paused scan measures and reports but claims nothing; after resume,
each run enqueues at most the budget the operator's catch-up rate allows."""

from __future__ import annotations

import itertools
from collections.abc import Callable
from datetime import timedelta

from google.cloud import firestore

from services.jobs import schema
from tests.integration.scan.conftest import Rig

OPERATOR = "operator:alice@example.com"


def test_a_paused_scan_claims_nothing_but_still_reports(scan_rig: Callable[..., Rig]) -> None:
    rig = scan_rig()
    ids = rig.seed(20)
    rig.store.update_control(OPERATOR, "incident 42: storage errors", paused=True)
    summary = rig.scan()
    assert (summary["paused"], summary["stopped_because"]) == (True, "paused")
    assert (summary["claimed"], summary["published"], summary["due_count"]) == (0, 0, 20)
    assert rig.states(ids) == {"deferred": 20}
    assert rig.pull() == {}
    (report,) = rig.sink.reports
    assert (report.due_count, report.claimed, report.oldest_overdue_age_s) == (20, 0, 60.0)
    assert rig.runs.get(summary["run_id"]) is not None


def test_after_a_long_pause_runs_drain_the_backlog_at_the_chosen_rate(
    scan_rig: Callable[..., Rig],
) -> None:
    interval = timedelta(seconds=60)
    rig = scan_rig(max_per_run=1000, page_size=300, interval_s=interval.total_seconds())
    ids = rig.seed(5000)
    rig.store.update_control(OPERATOR, "maintenance", paused=True)

    paused_runs = []
    for _ in range(3):
        paused_runs.append(rig.scan())
        rig.clock.advance(interval)
    assert [r["claimed"] for r in paused_runs] == [0, 0, 0]
    assert [r["due_count"] for r in paused_runs] == [5000, 5000, 5000]
    ages = [r["oldest_overdue_age_s"] for r in paused_runs]
    assert ages == [60.0, 120.0, 180.0]  # the backlog ages while paused, and it is visible

    # The operator resumes at 5 jobs/s: 300 per 60 s run, well under the 1,000 cap.
    rig.store.update_control(OPERATOR, "resume slowly", paused=False, catch_up_rate=5.0)
    drained = []
    for _ in range(3):
        drained.append(rig.scan())
        rig.clock.advance(interval)
    assert [r["budget"] for r in drained] == [300, 300, 300]
    assert [r["claimed"] for r in drained] == [300, 300, 300]
    assert [r["published"] for r in drained] == [300, 300, 300]
    assert [r["due_count"] for r in drained] == [4700, 4400, 4100]
    assert all(r["stopped_because"] == "budget" for r in drained)
    # The drain rate the summaries show is the rate the operator chose.
    rates = [
        (a["due_count"] - b["due_count"]) / interval.total_seconds()
        for a, b in itertools.pairwise(drained)
    ]
    assert rates == [5.0, 5.0]

    pulled = rig.pull()
    assert sum(pulled.values()) == 900 and set(pulled.values()) == {1}
    assert len(rig.sink.reports) == 6
    per_state = rig.store.stats(rig.clock.now(), timedelta(minutes=10)).per_state
    assert {s.value: n for s, n in per_state.items() if n} == {"enqueued": 900, "deferred": 4100}
    assert len(ids) == 5000
    recent = rig.runs.recent(limit=6)
    assert [r.claimed for r in recent] == [300, 300, 300, 0, 0, 0]  # newest first


def test_a_control_document_with_out_of_range_values_does_not_break_the_scan(
    scan_rig: Callable[..., Rig], firestore_client: firestore.Client
) -> None:
    # Written by something other than jobsctl (a console edit, another service): the scan
    # must keep running on the defaults instead of answering 500 on every run.
    rig = scan_rig(max_per_run=10)
    ids = rig.seed(5)
    firestore_client.collection(schema.CONTROL).document(schema.CONTROL_DOCUMENT).set(
        {"paused": False, "catch_up_rate": 1e308, "claim_budget": -3, "claim_timeout_s": 1e300}
    )
    summary = rig.scan()
    assert (summary["claimed"], summary["published"]) == (5, 5)
    assert rig.states(ids) == {"enqueued": 5}


def test_a_corrupt_paused_flag_reads_as_paused(
    scan_rig: Callable[..., Rig], firestore_client: firestore.Client
) -> None:
    rig = scan_rig()
    ids = rig.seed(3)
    firestore_client.collection(schema.CONTROL).document(schema.CONTROL_DOCUMENT).set(
        {"paused": "no"}
    )
    summary = rig.scan()
    assert (summary["paused"], summary["claimed"], summary["due_count"]) == (True, 0, 3)
    assert rig.states(ids) == {"deferred": 3}
