"""The scan run's logic over hand-written fakes; the emulator tests cover the real store."""

from __future__ import annotations

import logging
import threading
from concurrent import futures
from datetime import timedelta

import pytest

from services.jobs import errors
from services.jobs.budget import ScanLimits
from services.jobs.clock import FakeClock
from services.jobs.control import Control
from services.scan.errors import QueueUnreachable, StoreUnreachable
from services.scan.scanner import EVENT_SCAN_FAILED, Scanner
from services.scan.summary import response_body
from services.telemetry import metrics
from services.telemetry.metrics import InMemorySink
from tests.unit.scan.fakes import T0, Crash, CrashingPublisher, FakePublisher, FakeStore

LIMITS = ScanLimits(
    time_budget_s=30, max_per_run=100, page_size=10, interval_s=60, claim_timeout_s=120
)


def ids(count: int, prefix: str = "job") -> list[str]:
    return [f"{prefix}-{i:04d}" for i in range(count)]


def make(
    store: FakeStore,
    publisher: FakePublisher | None = None,
    limits: ScanLimits = LIMITS,
    clock: FakeClock | None = None,
) -> tuple[Scanner, FakePublisher, InMemorySink]:
    publisher = publisher or FakePublisher()
    sink = InMemorySink()
    scanner = Scanner(store, publisher, clock or FakeClock(T0), limits, metrics=sink)
    return scanner, publisher, sink


def test_a_run_claims_publishes_and_marks_each_due_job_once() -> None:
    store = FakeStore(due=ids(25))
    scanner, publisher, sink = make(store)
    run = scanner.run()
    assert (run.claimed, run.published, run.publish_failed) == (25, 25, 0)
    assert run.stopped_because == "drained"
    assert sorted(j for j, _, _ in publisher.sent) == ids(25)
    assert sorted(store.enqueued) == ids(25)
    assert store.claim_calls == [10, 10, 10]
    assert [r.claimed for r in sink.reports] == [25]


def test_a_run_reports_only_after_every_page_is_marked() -> None:
    # Marks of one page overlap the next page's claim; slow marks must still all be done
    # (and counted) by the time the run reports.
    store = FakeStore(due=ids(40), mark_delay_s=0.01)
    scanner, _, sink = make(store)
    run = scanner.run()
    assert sorted(store.enqueued) == ids(40)
    assert (run.claimed, run.published, sink.reports[0].published) == (40, 40, 40)


def test_a_run_stops_at_the_per_run_cap_and_leaves_the_rest_due() -> None:
    store = FakeStore(due=ids(250))
    scanner, publisher, _ = make(store)
    run = scanner.run()
    assert (run.claimed, run.published, run.budget) == (100, 100, 100)
    assert run.stopped_because == "budget"
    assert run.due_count == 150
    assert len(publisher.sent) == 100


def test_the_catch_up_rate_lowers_the_budget_below_the_cap() -> None:
    store = FakeStore(due=ids(250), control=Control(catch_up_rate=0.5))
    run = make(store)[0].run()
    assert (run.budget, run.claimed) == (30, 30)
    assert store.claim_calls == [10, 10, 10]


def test_the_control_claim_budget_lowers_the_cap_but_never_raises_it() -> None:
    lowered = make(FakeStore(due=ids(250), control=Control(claim_budget=15)))[0].run()
    raised = make(FakeStore(due=ids(250), control=Control(claim_budget=5000)))[0].run()
    assert (lowered.budget, lowered.claimed) == (15, 15)
    assert (raised.budget, raised.claimed) == (100, 100)


def test_a_run_stops_claiming_when_its_time_budget_is_spent() -> None:
    clock = FakeClock(T0)
    store = FakeStore(due=ids(100), on_claim=lambda: clock.advance(timedelta(seconds=12)))
    run = make(store, clock=clock)[0].run()
    assert run.stopped_because == "time"
    assert run.claimed == 30  # pages at t=0, 12, 24; at t=36 the 30 s budget is spent
    assert run.duration_s == pytest.approx(36.0)


def test_paused_measures_and_reports_but_claims_nothing() -> None:
    store = FakeStore(due=ids(40), expired=["stuck"], control=Control(paused=True))
    scanner, publisher, sink = make(store)
    run = scanner.run()
    assert run.paused and run.stopped_because == "paused"
    assert (run.claimed, run.reclaimed, run.due_count, run.stuck_claims) == (0, 0, 40, 1)
    assert store.claim_calls == [] and publisher.sent == []
    assert [(r.due_count, r.claimed) for r in sink.reports] == [(40, 0)]


def test_dry_run_measures_and_claims_nothing() -> None:
    store = FakeStore(due=ids(40))
    scanner, publisher, sink = make(store)
    run = scanner.run(dry_run=True)
    assert run.dry_run and run.stopped_because == "dry_run"
    assert (run.claimed, run.due_count) == (0, 40)
    assert store.claim_calls == [] and publisher.sent == []
    assert len(sink.reports) == 1


def test_expired_claims_are_reclaimed_then_published_in_the_same_run() -> None:
    store = FakeStore(due=ids(3), expired=["stuck-1", "stuck-2"])
    run = make(store)[0].run()
    assert run.reclaimed == 2
    assert sorted(store.enqueued) == sorted([*ids(3), "stuck-1", "stuck-2"])


def test_failed_publishes_go_back_to_deferred_with_the_error() -> None:
    store = FakeStore(due=ids(20))
    publisher = FakePublisher(fail=lambda job_id: job_id.endswith("3"))
    run = make(store, publisher, ScanLimits(max_per_run=20, page_size=10))[0].run()
    failed = {"job-0003", "job-0013"}
    assert (run.claimed, run.published, run.publish_failed) == (20, 18, 2)
    assert run.stopped_because == "budget"
    assert set(store.failed) == failed
    assert all(
        e.code == "PublishFailure" and "cannot publish" in e.message for e in store.failed.values()
    )
    assert set(run.failed_ids) == failed
    assert set(store.due) == failed  # back in deferred for a later run


def test_a_run_whose_every_publish_fails_reports_the_queue_unreachable() -> None:
    store = FakeStore(due=ids(50))
    scanner, _, sink = make(store, FakePublisher(fail=lambda _id: True))
    with pytest.raises(QueueUnreachable) as raised:
        scanner.run()
    run = raised.value.run
    assert run is not None
    # The first page failed entirely, so the run stopped instead of cycling the backlog.
    assert (run.claimed, run.publish_failed, run.stopped_because) == (10, 10, "unavailable")
    assert len(store.failed) == 10
    assert [r.publish_failed for r in sink.reports] == [10]


@pytest.mark.parametrize("operation", ["get_control", "claim_due", "backlog"])
def test_an_unreachable_store_stops_the_run(operation: str) -> None:
    store = FakeStore(due=ids(5), unavailable={operation})
    with pytest.raises(StoreUnreachable, match="firestore down"):
        make(store)[0].run()


def test_a_failing_reclaim_step_never_stops_claiming(caplog: pytest.LogCaptureFixture) -> None:
    # Finding 7: one record's reclaim trouble failed the whole run (0 of 20 due jobs claimed).
    store = FakeStore(due=ids(5), unavailable={"reclaim_expired"})
    caplog.set_level(logging.WARNING)
    run = make(store)[0].run()
    assert (run.claimed, run.published) == (5, 5)
    assert any(getattr(r, "fields", {}).get("reason") == "reclaim_failed" for r in caplog.records)


def test_quarantined_records_are_counted_in_the_summary_and_the_gauges() -> None:
    store = FakeStore(due=ids(3), invalid=["bad-1", "bad-2"])
    scanner, _, sink = make(store)
    run = scanner.run()
    assert run.quarantined == 2
    assert response_body(run)["quarantined"] == 2
    assert sink.reports[-1].gauge_values()[metrics.RUN_QUARANTINED] == 2


def test_the_reclaimer_gets_the_enqueued_timeout() -> None:
    store = FakeStore(due=ids(1))
    make(store)[0].run()
    assert store.enqueued_timeouts == [timedelta(seconds=LIMITS.enqueued_timeout_s)]


def test_firestore_lost_mid_run_reports_what_was_done_without_gauges(
    caplog: pytest.LogCaptureFixture,
) -> None:
    store = FakeStore(due=ids(30))
    calls: list[int] = []

    def second_page_fails() -> None:
        calls.append(1)
        if len(calls) == 2:
            raise errors.StoreUnavailable("firestore down")

    store.on_claim = second_page_fails
    scanner, publisher, sink = make(store)
    with pytest.raises(StoreUnreachable) as raised:
        scanner.run()
    run = raised.value.run
    assert run is not None
    assert (run.claimed, run.published, run.stopped_because) == (10, 10, "unavailable")
    assert len(publisher.sent) == 10 and len(store.enqueued) == 10
    assert sink.reports == []  # an unknown backlog is not reported as zero
    (line,) = [r for r in caplog.records if getattr(r, "fields", {}).get("event")]
    assert line.fields["event"] == EVENT_SCAN_FAILED  # type: ignore[attr-defined]
    assert line.levelname == "ERROR"


def test_a_crash_after_claiming_leaves_the_claims_for_the_reclaimer() -> None:
    store = FakeStore(due=ids(5))
    scanner, _, sink = make(store, CrashingPublisher())
    with pytest.raises(Crash):
        scanner.run()
    assert set(store.claimed) == set(ids(5))
    assert store.enqueued == {} and store.failed == {}
    assert sink.reports == []


def test_a_published_job_whose_record_moved_on_is_counted_not_hidden() -> None:
    store = FakeStore(due=ids(4), lose_marks={"job-0001"})
    run = make(store)[0].run()
    assert run.published == 4
    assert sorted(store.enqueued) == ["job-0000", "job-0002", "job-0003"]


def test_claim_timeout_is_the_longer_of_setting_and_control() -> None:
    scanner = make(FakeStore())[0]
    assert scanner.claim_timeout_for(Control(claim_timeout=timedelta(seconds=30))) == timedelta(
        seconds=120
    )
    assert scanner.claim_timeout_for(Control(claim_timeout=timedelta(hours=1))) == timedelta(
        hours=1
    )


def test_run_ids_are_unique_and_sort_by_time() -> None:
    first = Scanner.new_run_id(T0)
    later = Scanner.new_run_id(T0 + timedelta(seconds=1))
    assert first != Scanner.new_run_id(T0)
    assert first < later


def test_a_lease_the_reclaimer_fails_is_logged_as_job_failed_once(
    caplog: pytest.LogCaptureFixture,
) -> None:
    from services.telemetry.metrics import EVENT_JOB_FAILED

    store = FakeStore(due=ids(2), expired=["stuck"], expired_last_attempt=["dead-1", "dead-2"])
    scanner, _, _ = make(store)
    with caplog.at_level("INFO"):
        run = scanner.run()
    assert run.reclaimed == 3
    failed = [
        r for r in caplog.records if getattr(r, "fields", {}).get("event") == EVENT_JOB_FAILED
    ]
    assert sorted(r.fields["job_id"] for r in failed) == ["dead-1", "dead-2"]  # type: ignore[attr-defined]
    assert all(r.levelname == "ERROR" for r in failed)
    assert all(r.fields["reason"] for r in failed)  # type: ignore[attr-defined]


def test_failures_the_reclaimer_committed_before_stopping_are_still_logged(
    caplog: pytest.LogCaptureFixture,
) -> None:
    # Finding 9: a later error dropped the committed pages, so no job_failed line was written.
    store = FakeStore(
        due=ids(2),
        expired_last_attempt=["dead-1"],
        reclaim_stopped=errors.StoreUnavailable("firestore down mid-reclaim"),
    )
    with caplog.at_level("INFO"):
        run = make(store)[0].run()
    fields = [getattr(r, "fields", {}) for r in caplog.records]
    assert [f["job_id"] for f in fields if f.get("event") == metrics.EVENT_JOB_FAILED] == ["dead-1"]
    assert any(f.get("reason") == "reclaim_stopped" for f in fields)
    assert run.claimed == 2


def test_a_contended_mark_chunk_and_a_stale_item_are_logged_apart(
    caplog: pytest.LogCaptureFixture,
) -> None:
    # Finding 9: whole-chunk contention and a per-item stale generation read the same.
    stale = FakeStore(due=ids(2), lose_marks={"job-0000"})
    contended = FakeStore(due=ids(2), contend_marks=True)
    reasons = {}
    for name, store in (("stale", stale), ("contended", contended)):
        caplog.clear()
        with caplog.at_level("WARNING"):
            make(store)[0].run()
        reasons[name] = {getattr(r, "fields", {}).get("reason") for r in caplog.records}
    assert "mark_stale_generation" in reasons["stale"]
    assert "mark_contention" not in reasons["stale"]
    assert "mark_contention" in reasons["contended"]
    assert "mark_stale_generation" not in reasons["contended"]


def test_reclaim_contention_is_recorded_and_the_run_still_claims(
    caplog: pytest.LogCaptureFixture,
) -> None:
    store = FakeStore(due=ids(5), reclaim_race=True)
    scanner, _, _ = make(store)
    with caplog.at_level("INFO"):
        run = scanner.run()
    assert (run.reclaimed, run.claimed, run.published) == (0, 5, 5)
    assert run.reclaim_contended
    (line,) = [r for r in caplog.records if getattr(r, "fields", {}).get("event") == "scan_run"]
    assert line.fields["reclaim_contended"] is True  # type: ignore[attr-defined]


def test_published_jobs_are_marked_enqueued_in_one_store_call_per_page() -> None:
    store = FakeStore(due=ids(25))
    scanner, _, _ = make(store)
    run = scanner.run()
    assert run.published == 25
    # page_size 10: one call (transaction) per page, not 25; pages' marks may overlap.
    assert sorted(store.mark_calls) == [5, 10, 10]
    assert sorted(store.enqueued) == ids(25)


def test_a_run_reports_stale_enqueued_jobs_measured_with_the_enqueued_timeout() -> None:
    store = FakeStore(due=ids(3), stale_enqueued=4, oldest_enqueued_age_s=7300.0)
    limits = ScanLimits(
        time_budget_s=30,
        max_per_run=100,
        page_size=10,
        claim_timeout_s=120,
        enqueued_timeout_s=5400,
    )
    scanner, _, sink = make(store, limits=limits)
    run = scanner.run()
    assert (run.stale_enqueued, run.oldest_enqueued_age_s) == (4, 7300.0)
    assert store.backlog_calls == [timedelta(seconds=5400)]
    (report,) = sink.reports
    assert (report.stale_enqueued, report.oldest_enqueued_age_s) == (4, 7300.0)


def test_a_housekeeping_run_marks_the_control_document_and_the_next_idle_run_skips_it() -> None:
    store = FakeStore(expired=["stuck"])
    clock = FakeClock(T0)
    scanner, _, sink = make(store, clock=clock)
    first = scanner.run()
    assert first.reclaimed == 1 and store.control.housekeeping is not None
    assert store.control.housekeeping.at == T0
    store.claimed.clear()
    store.due.clear()  # the reclaimed job was claimed again; nothing is due now
    clock.advance(timedelta(seconds=60))
    second = scanner.run()
    # Only the quick reclaim (claims and leases), no counts, no record.
    assert (second.reclaimed, len(store.backlog_calls)) == (0, 1)
    assert store.quick_reclaims == [False, True]
    assert len(sink.reports) == 2


def test_between_housekeepings_an_expired_claim_is_reclaimed_and_claimed_again() -> None:
    # Finding 5: the reclaimer ran only with housekeeping, so a crashed scan's claim waited
    # up to claim timeout + JOBS_SCAN_HOUSEKEEPING_INTERVAL_S.
    store = FakeStore()
    clock = FakeClock(T0)
    scanner, _, _ = make(store, clock=clock)
    scanner.run()  # the housekeeping run
    store.expired.append("stuck-later")
    clock.advance(timedelta(seconds=60))
    second = scanner.run()
    assert (second.reclaimed, second.claimed, second.published) == (1, 1, 1)
    assert store.expired == [] and store.quick_reclaims[-1] is True
    assert len(store.backlog_calls) == 2  # a run that reclaims measures and records itself


@pytest.mark.parametrize("control", [Control(paused=True), Control()])
def test_a_paused_or_dry_run_writes_no_mark(control: Control) -> None:
    store = FakeStore(control=control)
    scanner, _, _ = make(store)
    scanner.run(dry_run=not control.paused)
    assert store.control.housekeeping is None


def test_a_failing_mark_write_is_logged_and_the_run_still_succeeds(
    caplog: pytest.LogCaptureFixture,
) -> None:
    store = FakeStore(due=ids(3), unavailable={"record_housekeeping"})
    scanner, publisher, _ = make(store)
    with caplog.at_level(logging.WARNING):
        run = scanner.run()
    assert run.published == 3 and len(publisher.sent) == 3
    assert any(
        getattr(r, "fields", {}).get("reason") == "housekeeping_unrecorded" for r in caplog.records
    )


def test_the_next_page_is_claimed_while_this_page_is_still_being_published() -> None:
    # The first page's last publish is acknowledged only once the second claim has begun:
    # a stager that claims only after a page is fully published would wait out the timeout.
    second_claim = threading.Event()
    store = FakeStore(due=ids(20))
    store.on_claim = lambda: second_claim.set() if len(store.claim_calls) == 2 else None
    overlapped: list[bool] = []

    class HeldPublisher(FakePublisher):
        def publish(self, job_id: str, generation: int, run_id: str) -> futures.Future[str]:
            future = super().publish(job_id, generation, run_id)
            if job_id != "job-0009":
                return future
            held: futures.Future[str] = futures.Future()

            def release() -> None:
                overlapped.append(second_claim.wait(timeout=5))
                held.set_result(future.result())

            threading.Thread(target=release, daemon=True).start()
            return held

    run = make(store, HeldPublisher(), ScanLimits(max_per_run=20, page_size=10))[0].run()
    assert overlapped == [True]
    assert (run.claimed, run.published, run.stopped_because) == (20, 20, "budget")
    assert sorted(store.enqueued) == ids(20)
