"""Scan runs end to end on the emulators: budgets, publishing, records, signals."""

from __future__ import annotations

from collections.abc import Callable
from datetime import timedelta

import pytest

from services.scan.summary import SUMMARY_KEYS
from services.telemetry.metrics import EVENT_SCAN_RUN
from tests.integration.scan.conftest import T0, Rig


def test_one_run_publishes_no_more_than_the_cap_and_the_rest_wait(
    scan_rig: Callable[..., Rig],
) -> None:
    rig = scan_rig(max_per_run=300, page_size=100)
    ids = rig.seed(1000)
    summary = rig.scan()
    assert tuple(summary) == SUMMARY_KEYS
    assert (summary["claimed"], summary["published"], summary["publish_failed"]) == (300, 300, 0)
    assert (summary["budget"], summary["stopped_because"]) == (300, "budget")
    assert summary["due_count"] == 700
    assert summary["oldest_overdue_age_s"] == 60.0
    pulled = rig.pull()
    assert sum(pulled.values()) == 300 and set(pulled.values()) == {1}
    assert set(pulled) <= set(ids)
    states = rig.states(ids)
    assert states == {"enqueued": 300, "deferred": 700}


def test_each_run_is_recorded_with_ttl_and_reported_once(scan_rig: Callable[..., Rig]) -> None:
    rig = scan_rig(max_per_run=20, page_size=10)
    rig.seed(25)
    summary = rig.scan()
    run = rig.runs.get(summary["run_id"])
    assert run is not None
    assert (run.claimed, run.published, run.stopped_because) == (20, 20, "budget")
    document = rig.client.collection("scan_runs").document(summary["run_id"]).get().to_dict()
    retention = timedelta(seconds=rig.settings.run_retention_s)
    assert document["expire_at"] == run.finished_at + retention
    (report,) = rig.sink.reports
    assert (report.run_id, report.published, report.due_count) == (summary["run_id"], 20, 5)
    assert EVENT_SCAN_RUN == "scan_run"


def test_every_published_job_is_enqueued_with_its_message_id(
    scan_rig: Callable[..., Rig],
) -> None:
    rig = scan_rig(max_per_run=50, page_size=20)
    ids = rig.seed(30)
    summary = rig.scan()
    assert (summary["published"], summary["stopped_because"]) == (30, "drained")
    rig.pull()
    jobs = [rig.store.get(i) for i in ids]
    assert all(j is not None and j.state.value == "enqueued" and j.message_id for j in jobs)
    assert {j.generation for j in jobs if j} == {1}
    assert set(rig.generations) == set(ids)


def test_jobs_not_yet_due_are_left_alone(scan_rig: Callable[..., Rig]) -> None:
    rig = scan_rig()
    rig.seed(5, due_at=T0 + timedelta(hours=1), prefix="later")
    summary = rig.scan()
    assert (summary["claimed"], summary["due_count"], summary["stopped_because"]) == (
        0,
        0,
        "drained",
    )
    assert rig.pull() == {}


@pytest.mark.parametrize(
    "body",
    [b"{", b"[]", b'{"dry_run": "yes"}', b'{"dry_run": true, "limit": 5}', b"x" * 2048],
)
def test_bad_bodies_are_refused_with_400_and_nothing_is_claimed(
    scan_rig: Callable[..., Rig], body: bytes
) -> None:
    rig = scan_rig()
    ids = rig.seed(3)
    response = rig.post(body, content_type="application/json")
    assert response.status_code == 400
    assert response.get_json()["error"] == "bad request"
    assert response.get_json()["detail"]
    assert rig.states(ids) == {"deferred": 3}
    assert rig.sink.reports == []
