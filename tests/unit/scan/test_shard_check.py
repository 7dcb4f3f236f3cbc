"""The scan's shard check (services/scan/shard_check.py) over a fake store: the layout compared
every run, the census at housekeeping only, the exact census and adoption without a layout,
the figures kept in the housekeeping mark, and the layout carried through operator changes."""

from __future__ import annotations

import dataclasses
import logging
from datetime import UTC, datetime

import pytest

from services.jobs.control import Control
from services.jobs.layout import ShardLayout, mismatched
from services.scan.errors import StoreUnreachable
from services.scan.housekeeping import Housekeeping
from services.scan.shard_check import ShardCheck, ShardFigures
from services.scan.summary import RunBacklog
from services.telemetry import metrics
from tests.unit.scan.fakes import FakeStore

T0 = datetime(2026, 12, 2, 12, 0, tzinfo=UTC)
LAYOUT_4 = ShardLayout(4, T0, "alice", "backfill")


def _errors(caplog: pytest.LogCaptureFixture) -> list[logging.LogRecord]:
    return [
        r
        for r in caplog.records
        if r.levelno == logging.ERROR
        and getattr(r, "fields", {}).get(metrics.LOG_EVENT) == metrics.EVENT_SHARD_LAYOUT
    ]


def test_at_one_shard_the_first_housekeeping_records_layout_1_and_counts_nothing() -> None:
    store = FakeStore(shards=1, without_shard=5)  # found anyway: N = 1 names no shard
    figures = ShardCheck(store, 1).figures(store.control, T0, census=True, last=None)
    assert figures == ShardFigures()
    assert store.census_calls == []
    assert store.control.shard_layout == ShardLayout(1, T0, "scan", "adopted")


def test_with_a_matching_layout_housekeeping_counts_only_the_out_of_range_records(
    caplog: pytest.LogCaptureFixture,
) -> None:
    store = FakeStore(shards=4, control=Control(shard_layout=LAYOUT_4), out_of_range=3)
    figures = ShardCheck(store, 4).figures(store.control, T0, census=True, last=None)
    assert figures == ShardFigures(stranded=3, mismatch=False)
    assert store.census_calls == [False]  # the cheap count, never the exact one
    [error] = _errors(caplog)
    assert "3 non-terminal job(s) with shard >= JOBS_SHARDS=4" in error.getMessage()


def test_without_a_layout_a_clean_exact_census_adopts_n() -> None:
    store = FakeStore(shards=4)
    figures = ShardCheck(store, 4).figures(store.control, T0, census=True, last=None)
    assert figures == ShardFigures()
    assert store.census_calls == [True]
    assert store.control.shard_layout == ShardLayout(4, T0, "scan", "adopted")


def test_without_a_layout_records_out_of_reach_are_reported_and_nothing_is_adopted(
    caplog: pytest.LogCaptureFixture,
) -> None:
    store = FakeStore(shards=4, out_of_range=2, without_shard=7)
    check = ShardCheck(store, 4)
    figures = check.figures(store.control, T0, census=True, last=None)
    assert figures == ShardFigures(stranded=9, mismatch=True, unknown=True)
    assert store.control.shard_layout is None
    assert "no shard layout recorded and 9" in _errors(caplog)[0].getMessage()
    # The idle runs after it repeat the marked figures without a census.
    mark = Housekeeping.mark(T0, check.apply(RunBacklog(), figures), figures.unknown)
    again = check.figures(store.control, T0, census=False, last=mark)
    assert again == figures and store.census_calls == [True]


def test_a_layout_for_another_count_is_a_mismatch_on_every_run_even_idle(
    caplog: pytest.LogCaptureFixture,
) -> None:
    store = FakeStore(shards=2, control=Control(shard_layout=LAYOUT_4))
    check = ShardCheck(store, 2)
    idle = check.figures(store.control, T0, census=False, last=None)
    assert idle == ShardFigures(stranded=0, mismatch=True)
    assert store.census_calls == []  # no read: the control document was read already
    message = _errors(caplog)[0].getMessage()
    assert "laid out for 4 shard(s)" in message and "--shards 2 --apply" in message


def test_a_census_that_cannot_reach_firestore_is_an_unreachable_store() -> None:
    store = FakeStore(shards=4, unavailable={"shard_census"})
    with pytest.raises(StoreUnreachable):
        ShardCheck(store, 4).figures(store.control, T0, census=True, last=None)


def test_the_layout_survives_operator_changes_and_a_malformed_one_reads_as_absent(
    caplog: pytest.LogCaptureFixture,
) -> None:
    control = Control(shard_layout=LAYOUT_4)
    changed = control.changed(by="ops", reason="slower", at=T0, catch_up_rate=5)
    assert Control.from_document(changed.to_document()).shard_layout == LAYOUT_4
    document = changed.to_document()
    document["shard_layout"] = {"shards": 0, "at": T0, "source": "backfill"}
    assert Control.from_document(document).shard_layout is None
    assert any(getattr(r, "fields", {}).get("setting") == "shard_layout" for r in caplog.records)


@pytest.mark.parametrize(
    ("layout", "shards", "stranded", "expected"),
    [
        (None, 1, 10, False),  # N = 1 reaches every record
        (LAYOUT_4, 1, 0, False),
        (LAYOUT_4, 4, 0, False),
        (LAYOUT_4, 2, 0, True),
        (LAYOUT_4, 8, 0, True),  # raised without the backfill: reported too
        (None, 4, 0, False),
        (None, 4, 3, True),
    ],
)
def test_what_counts_as_a_mismatch(
    layout: ShardLayout | None, shards: int, stranded: int, expected: bool
) -> None:
    assert mismatched(layout, shards, stranded) is expected


def test_the_figures_reach_the_backlog_the_run_reports() -> None:
    backlog = ShardCheck.apply(RunBacklog(due_count=3), ShardFigures(211, True))
    assert backlog == dataclasses.replace(
        RunBacklog(due_count=3), shard_stranded=211, shard_layout_mismatch=True
    )
