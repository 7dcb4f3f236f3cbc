from __future__ import annotations

from datetime import timedelta

from services.scan.summary import (
    SUMMARY_KEYS,
    RunBacklog,
    RunTally,
    log_fields,
    response_body,
    scan_report,
)
from services.store.runs import MAX_FAILED_IDS, ScanRun
from services.telemetry import metrics
from tests.unit.scan.fakes import T0


def finished_run() -> ScanRun:
    tally = RunTally(reclaimed=2)
    tally.add_claimed(5)
    for latency in (0.5, 2.0, 1.0):
        tally.add_published(latency)
    tally.add_failed("a")
    tally.add_failed("b")
    return tally.finish(
        run_id="r1",
        started_at=T0,
        finished_at=T0 + timedelta(seconds=3.25),
        stopped_because="drained",
        paused=False,
        dry_run=False,
        budget=100,
        backlog=RunBacklog(
            due_count=7,
            oldest_overdue_age_s=12.5,
            stuck_claims=1,
            stale_enqueued=4,
            oldest_enqueued_age_s=7300.25,
        ),
    )


def test_the_response_carries_exactly_the_documented_keys() -> None:
    body = response_body(finished_run())
    assert tuple(body) == SUMMARY_KEYS
    assert body == {
        "run_id": "r1",
        "paused": False,
        "dry_run": False,
        "claimed": 5,
        "published": 3,
        "publish_failed": 2,
        "reclaimed": 2,
        "due_count": 7,
        "oldest_overdue_age_s": 12.5,
        "stuck_claims": 1,
        "stale_enqueued": 4,
        "oldest_enqueued_age_s": 7300.25,
        "quarantined": 0,
        "shard_stranded": 0,
        "shard_layout_mismatch": False,
        "budget": 100,
        "duration_s": 3.25,
        "drain_rate_per_s": 0.923,  # 3 published in 3.25 s
        "stopped_because": "drained",
        "mode": "one-pass",
        "partition": 0,
        "rate_per_s": 0.0,
        "note": "",
    }


def test_the_log_line_has_the_same_numbers_and_the_scan_run_event() -> None:
    run = finished_run()
    fields = log_fields(run)
    assert fields[metrics.LOG_EVENT] == metrics.EVENT_SCAN_RUN == metrics.SCAN_RUNS.event
    assert {k: fields[k] for k in SUMMARY_KEYS} == response_body(run)
    assert fields["failed_ids"] == ["a", "b"]
    assert fields["claim_to_enqueue_latency_s"] == 2.0


def test_the_metrics_report_has_a_value_for_every_scan_gauge() -> None:
    values = scan_report(finished_run()).gauge_values()
    assert tuple(values) == metrics.SCAN_GAUGES
    assert values[metrics.RUN_PUBLISHED] == 3
    assert values[metrics.CLAIM_TO_ENQUEUE_LATENCY] == 2.0
    assert values[metrics.OLDEST_OVERDUE_AGE] == 12.5


def test_the_tally_keeps_a_bounded_sample_of_failed_ids() -> None:
    tally = RunTally()
    for i in range(MAX_FAILED_IDS + 50):
        tally.add_failed(f"j{i}")
    assert tally.publish_failed == MAX_FAILED_IDS + 50
    assert len(tally.failed_ids) == MAX_FAILED_IDS


def test_a_run_document_round_trips_and_expires_after_the_retention() -> None:
    run = finished_run()
    document = run.to_document(timedelta(days=30))
    assert document["expire_at"] == run.finished_at + timedelta(days=30)
    assert document["duration_s"] == 3.25
    assert ScanRun.from_document(document) == run


def test_stale_enqueued_and_drain_rate_reach_the_gauges_and_the_run_document() -> None:
    run = finished_run()
    gauges = scan_report(run).gauge_values()
    assert gauges[metrics.STALE_ENQUEUED] == 4
    assert gauges[metrics.OLDEST_ENQUEUED_AGE] == 7300.25
    document = run.to_document(timedelta(days=1))
    assert (document["stale_enqueued"], document["oldest_enqueued_age_s"]) == (4, 7300.25)
    assert document["drain_rate_per_s"] == 3 / 3.25
    back = ScanRun.from_document(document)
    assert (back.stale_enqueued, back.oldest_enqueued_age_s) == (4, 7300.25)


def test_a_run_that_took_no_time_has_a_zero_drain_rate() -> None:
    run = ScanRun("r0", T0, T0, "paused", published=0)
    assert run.drain_rate_per_s == 0.0
    assert response_body(run)["drain_rate_per_s"] == 0.0


def test_a_failed_runs_document_round_trips_its_failure_with_the_message_bounded() -> None:
    from services.store.runs import MAX_FAILURE_MESSAGE, RunFailure

    failure = RunFailure.of(503, "firestore_unavailable", "down " * MAX_FAILURE_MESSAGE)
    assert len(failure.message) == MAX_FAILURE_MESSAGE and failure.message.endswith("…")
    run = ScanRun("r1", T0, T0 + timedelta(seconds=1), "unavailable", failure=failure)
    document = run.to_document(timedelta(days=1))
    assert document["failure"] == {
        "status": 503,
        "kind": "firestore_unavailable",
        "message": failure.message,
    }
    assert document["expire_at"] == run.finished_at + timedelta(days=1)
    assert ScanRun.from_document(document) == run
    assert finished_run().to_document(timedelta(days=1))["failure"] is None
