"""Issue 24, finding 4: changing `shards` without `jobsctl backfill-shards`, and records without a
`shard`, against the real emulators (Firestore strict with the deployed index set of each N,
Pub/Sub) through the scan's Cloud Run front end and jobsctl.

The issue's measured case: 400 jobs scheduled at N = 4, the stack redeployed at N = 2 without
the backfill; 211 of them (their shard >= 2) were never claimed and nothing said so (stats
due_count 0, the scan's due_count 0). Now every run reports them (summary, ERROR line, gauges),
`jobsctl stats` and `watch` show them, and the backfill clears it.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Callable
from datetime import timedelta
from typing import Any

import pytest
from google.cloud import firestore

from services.cli.app import main
from services.jobs import schema
from services.jobs.shard import shard_of
from services.telemetry import metrics
from tests.integration.scan.conftest import T0, Rig

DUE = T0 + timedelta(hours=1)


def _jobsctl(
    rig: Rig, shards: int, capsys: pytest.CaptureFixture[str], mp: pytest.MonkeyPatch, *argv: str
) -> tuple[int, str]:
    """jobsctl in this process against the rig's project, run as JOBS_SHARDS=`shards`."""
    mp.setenv("JOBS_PROJECT", rig.project)
    mp.setenv("JOBS_OPERATOR", "alice")
    mp.setenv("JOBS_SHARDS", str(shards))
    capsys.readouterr()
    code = main(list(argv))
    return code, capsys.readouterr().out


def _layout_errors(caplog: pytest.LogCaptureFixture) -> list[logging.LogRecord]:
    return [
        r
        for r in caplog.records
        if r.levelno == logging.ERROR
        and getattr(r, "fields", {}).get(metrics.LOG_EVENT) == "shard_layout"
    ]


def _stored_layout(client: firestore.Client) -> Any:
    control = client.collection(schema.CONTROL).document(schema.CONTROL_DOCUMENT).get()
    return (control.to_dict() or {}).get("shard_layout")


def test_lowering_shards_from_4_to_2_without_the_backfill_is_reported_until_it_runs(
    scan_rig: Callable[..., Rig],
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
    caplog: pytest.LogCaptureFixture,
) -> None:
    caplog.set_level(logging.INFO)
    at4 = scan_rig(shards=4, max_per_run=1000)
    # Written with shard_of(id, 4), as N = 4's producers do. Which jobs end up >= 2 depends on
    # the IDs' hashes; with this prefix they are 211 of the 400, the issue's figure.
    ids = at4.seed(400, due_at=DUE, prefix="stranded")
    first = at4.scan()  # nothing due yet; its housekeeping records the layout 4
    assert first["claimed"] == 0
    stranded = sorted(j for j in ids if shard_of(j, 4) >= 2)
    assert len(stranded) == 211

    # Redeployed with shards = 2 and no backfill: the N = 2 index set, the N = 2 queries.
    at2 = scan_rig(shards=2, max_per_run=1000, clock=at4.clock)
    at2.clock.advance(timedelta(hours=2))
    caplog.clear()
    run = at2.scan()
    assert run["claimed"] == 400 - len(stranded)
    assert run["due_count"] == 0  # what the issue saw: the stranded jobs are invisible to it
    # ... and what it did not: every run says so.
    assert run.get("shard_layout_mismatch") is True, run
    assert run.get("shard_stranded") == len(stranded), run
    assert first["shard_layout_mismatch"] is False and first["shard_stranded"] == 0
    assert _stored_layout(at4.client)["shards"] == 4  # adopted by N = 4's first housekeeping
    [error] = _layout_errors(caplog)
    assert error.fields["shard_stranded"] == len(stranded)  # type: ignore[attr-defined]
    assert "jobsctl backfill-shards --shards 2 --apply" in error.getMessage()
    gauges = at2.sink.reports[-1].gauge_values()
    assert gauges[metrics.SHARD_STRANDED] == len(stranded)
    assert gauges[metrics.SHARD_LAYOUT_MISMATCH] == 1

    caplog.clear()
    again = at2.scan()  # nothing it can reach; still reported
    assert again["claimed"] == 0 and again["shard_layout_mismatch"] is True
    assert again["shard_stranded"] == len(stranded) and len(_layout_errors(caplog)) == 1

    code, out = _jobsctl(at2, 2, capsys, monkeypatch, "stats", "--json")
    stats = json.loads(out)
    assert code == 0 and stats["due_count"] == 0
    assert (stats["shard_stranded"], stats["shard_out_of_range"], stats["shard_without"]) == (
        len(stranded),
        len(stranded),
        0,
    )
    assert stats["shard_layout_mismatch"] is True and stats["shard_layout"]["shards"] == 4
    code, text = _jobsctl(at2, 2, capsys, monkeypatch, "stats")
    assert "MISMATCH" in text and f"{len(stranded)} non-terminal job(s)" in text
    code, out = _jobsctl(at2, 2, capsys, monkeypatch, "watch", "--once", "--json")
    frame = json.loads(out)
    assert (frame["shard_layout_mismatch"], frame["shard_stranded"]) == (True, len(stranded))
    code, text = _jobsctl(at2, 2, capsys, monkeypatch, "watch", "--once")
    assert "MISMATCH" in text and "out of shard reach" in text

    code, out = _jobsctl(at2, 2, capsys, monkeypatch, "backfill-shards", "--apply", "--json")
    assert code == 0 and json.loads(out)["layout_recorded"] == 2
    caplog.clear()
    fixed = at2.scan()
    assert fixed["claimed"] == len(stranded)
    assert (fixed["shard_layout_mismatch"], fixed["shard_stranded"]) == (False, 0)
    assert _layout_errors(caplog) == []
    published = at2.pull()
    assert sorted(published) == sorted(ids) and set(published.values()) == {1}


def test_records_without_a_shard_are_counted_and_no_layout_is_adopted_until_the_backfill(
    scan_rig: Callable[..., Rig],
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
    caplog: pytest.LogCaptureFixture,
) -> None:
    rig = scan_rig(shards=4, max_per_run=1000)
    ids = rig.seed(40, due_at=T0)
    old = ids[:10]  # as a version before the field (or a hand-written record) left them
    for job_id in old:
        rig.client.collection(schema.JOBS).document(job_id).update(
            {schema.SHARD: firestore.DELETE_FIELD}
        )
    run = rig.scan()
    assert run["claimed"] == 30
    # No layout recorded yet: the exact census finds the 10, so N = 4 is not adopted.
    assert (run.get("shard_layout_mismatch"), run.get("shard_stranded")) == (True, 10), run
    assert _stored_layout(rig.client) is None
    assert _layout_errors(caplog)
    stats = json.loads(_jobsctl(rig, 4, capsys, monkeypatch, "stats", "--json")[1])
    assert (stats["shard_stranded"], stats["shard_without"], stats["shard_out_of_range"]) == (
        10,
        10,
        0,
    )

    code, _ = _jobsctl(rig, 4, capsys, monkeypatch, "backfill-shards", "--apply")
    assert code == 0 and _stored_layout(rig.client)["source"] == "backfill"
    fixed = rig.scan()
    assert fixed["claimed"] == 10
    assert (fixed["shard_layout_mismatch"], fixed["shard_stranded"]) == (False, 0)
    assert sorted(rig.pull()) == sorted(ids)


@pytest.mark.builtin_emulator("billing counters")
def test_an_idle_run_between_housekeepings_repeats_the_report_without_a_read(
    scan_rig: Callable[..., Rig], firestore_stats: Any
) -> None:
    at4 = scan_rig(shards=4, housekeeping_interval_s=900)
    ids = at4.seed(20, due_at=T0 + timedelta(days=30))
    at4.scan()  # records the layout 4 and the housekeeping mark
    at2 = scan_rig(shards=2, housekeeping_interval_s=900, clock=at4.clock)
    at4.clock.advance(timedelta(seconds=60))
    firestore_stats.reset()
    idle = at2.scan()  # within the interval: no census, the layout compared all the same
    counts = firestore_stats.get()
    assert counts["document_reads"] + counts["document_writes"] == 4
    assert idle["shard_layout_mismatch"] is True
    assert idle["shard_stranded"] == 0  # counted at the next housekeeping
    at4.clock.advance(timedelta(seconds=900))
    due = at2.scan()
    assert due["shard_stranded"] == sum(1 for j in ids if shard_of(j, 4) >= 2)


@pytest.mark.builtin_emulator("billing counters")
def test_with_the_layout_recorded_the_census_costs_a_housekeeping_run_one_read(
    scan_rig: Callable[..., Rig], firestore_stats: Any
) -> None:
    rig = scan_rig(shards=4)  # housekeeping every run
    rig.seed(300, due_at=T0 + timedelta(days=30))
    rig.scan()  # the first one takes the exact census and records the layout 4
    assert _stored_layout(rig.client)["source"] == "adopted"
    firestore_stats.reset()
    rig.clock.advance(timedelta(seconds=60))
    run = rig.scan()
    counts = firestore_stats.get()
    # 13 before the check (control, 3 reclaimer queries, 2 due_at type checks, the probe, 2
    # limit-1 and 3 count queries, the scan_runs document), and the out-of-range count.
    assert (counts["document_reads"], counts["document_writes"]) == (13, 1)
    assert (run["shard_stranded"], run["shard_layout_mismatch"]) == (0, False)
