"""When a run must do its housekeeping, from the mark kept in the control document."""

from __future__ import annotations

import logging
from datetime import UTC, datetime, timedelta, timezone

import pytest

from services.jobs.control import Control, HousekeepingMark
from services.scan.housekeeping import Housekeeping
from services.scan.summary import RunBacklog

T0 = datetime(2026, 12, 1, 12, 0, tzinfo=UTC)


def test_without_an_interval_every_run_does_it_and_no_mark_is_worth_writing() -> None:
    housekeeping = Housekeeping(0)
    assert not housekeeping.spaced
    assert housekeeping.due(T0, HousekeepingMark(at=T0))


def test_with_an_interval_it_is_due_when_unmarked_elapsed_or_the_clock_went_back() -> None:
    housekeeping = Housekeeping(900)
    mark = HousekeepingMark(at=T0)
    assert housekeeping.spaced
    assert housekeeping.due(T0, None)
    assert not housekeeping.due(T0 + timedelta(seconds=899), mark)
    assert housekeeping.due(T0 + timedelta(seconds=900), mark)
    assert housekeeping.due(T0 - timedelta(seconds=1), mark)


def test_an_idle_run_reports_the_marked_backlog_with_nothing_due() -> None:
    measured = RunBacklog(
        due_count=7,
        oldest_overdue_age_s=30.0,
        stuck_claims=2,
        stale_enqueued=3,
        oldest_enqueued_age_s=12.5,
    )
    mark = Housekeeping.mark(T0, measured)
    assert Housekeeping.idle_backlog(mark) == RunBacklog(
        stuck_claims=2, stale_enqueued=3, oldest_enqueued_age_s=12.5
    )
    assert Housekeeping.idle_backlog(None) == RunBacklog()


def test_the_mark_round_trips_through_the_control_document_and_operator_changes() -> None:
    mark = Housekeeping.mark(T0, RunBacklog(stuck_claims=1, oldest_enqueued_age_s=4.0))
    control = Control(housekeeping=mark)
    changed = control.changed(by="ops", reason="slow down", at=T0, catch_up_rate=5)
    read_back = Control.from_document(changed.to_document())
    assert read_back.housekeeping == mark
    assert read_back.catch_up_rate == 5


@pytest.mark.parametrize(
    "stored",
    [
        "yesterday",
        {"at": "2026-12-01T12:00:00Z"},
        {"at": datetime(2026, 12, 1, 12, 0)},  # naive: no zone
        {"backlog": {"stuck_claims": 1}},
    ],
)
def test_a_malformed_mark_reads_as_none_so_the_next_run_does_its_housekeeping(
    stored: object, caplog: pytest.LogCaptureFixture
) -> None:
    with caplog.at_level(logging.ERROR):
        control = Control.from_document({"paused": False, "housekeeping": stored})
    assert control.housekeeping is None
    assert any(getattr(r, "fields", {}).get("event") == "control_invalid" for r in caplog.records)


def test_malformed_backlog_figures_are_dropped_not_trusted() -> None:
    at = datetime(2026, 12, 1, 13, 0, tzinfo=timezone(timedelta(hours=1)))
    mark = HousekeepingMark.from_document(
        {
            "at": at,
            "backlog": {
                "stuck_claims": "many",
                "stale_enqueued": True,
                "oldest_enqueued_age_s": float("inf"),
                "unknown": 3,
            },
        }
    )
    assert mark is not None
    assert mark.at == T0 and mark.at.tzinfo == UTC
    assert mark.backlog == {}
