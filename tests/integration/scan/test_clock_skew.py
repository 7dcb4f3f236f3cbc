"""A scan run whose clock is far from Firestore's claims and reclaims nothing (issue 33,
finding 8): every `now` of a run fences (what is due, which lease lapsed), so the run's first
read (the control document) compares its clock with that read's read_time, and a run further
off than JOBS_MAX_CLOCK_SKEW_S stops there, logged with event `clock_skew`."""

from __future__ import annotations

import logging
from collections.abc import Callable
from datetime import UTC, datetime, timedelta

import pytest

from services.jobs.clock import FakeClock
from services.telemetry.metrics import EVENT_CLOCK_SKEW, LOG_EVENT
from tests.integration.scan.conftest import Rig

TOLERANCE = timedelta(seconds=10)


def _skew_lines(caplog: pytest.LogCaptureFixture) -> list[dict[str, object]]:
    return [
        record.fields  # type: ignore[attr-defined]
        for record in caplog.records
        if getattr(record, "fields", {}).get(LOG_EVENT) == EVENT_CLOCK_SKEW
    ]


def test_a_scan_ten_minutes_ahead_claims_nothing_early(
    scan_rig: Callable[..., Rig], caplog: pytest.LogCaptureFixture
) -> None:
    now = datetime.now(UTC)
    clock = FakeClock(now + timedelta(minutes=10))
    rig = scan_rig(clock=clock, max_clock_skew=TOLERANCE)
    ids = rig.seed(5, due_at=now + timedelta(minutes=5))  # due in 5 minutes, Firestore's time

    with caplog.at_level(logging.ERROR):
        summary = rig.scan()

    assert (summary["stopped_because"], summary["claimed"], summary["reclaimed"]) == (
        "clock_skew",
        0,
        0,
    )
    assert "ahead of Firestore's" in summary["note"]
    assert rig.states(ids) == {"deferred": 5}
    assert rig.pull() == {}
    (line,) = _skew_lines(caplog)
    assert 590 < float(line["offset_s"]) <= 600  # type: ignore[arg-type]
    assert line["tolerance_s"] == TOLERANCE.total_seconds()


def test_a_scan_on_firestores_time_claims_what_is_due_and_nothing_early(
    scan_rig: Callable[..., Rig], caplog: pytest.LogCaptureFixture
) -> None:
    now = datetime.now(UTC)
    rig = scan_rig(clock=FakeClock(now), max_clock_skew=TOLERANCE)
    due = rig.seed(3, due_at=now - timedelta(minutes=1), prefix="due")
    early = rig.seed(5, due_at=now + timedelta(minutes=5), prefix="early")

    summary = rig.scan()

    assert summary["claimed"] == 3
    assert rig.states(due) == {"enqueued": 3}
    assert rig.states(early) == {"deferred": 5}
    assert _skew_lines(caplog) == []


def test_a_scan_far_behind_is_refused_too(scan_rig: Callable[..., Rig]) -> None:
    # Behind, its claims would be late (harmless) but its reclaims would see live leases as
    # live for longer and the partition lease it takes would end early in Firestore's time.
    now = datetime.now(UTC)
    rig = scan_rig(clock=FakeClock(now - timedelta(minutes=2)), max_clock_skew=TOLERANCE)
    ids = rig.seed(2, due_at=now - timedelta(minutes=5))

    summary = rig.scan()

    assert summary["stopped_because"] == "clock_skew"
    assert "behind Firestore's" in summary["note"]
    assert rig.states(ids) == {"deferred": 2}
