"""Failed runs are listed by `jobsctl runs` (issue 15, point 7), on the emulators.

A run that answers 503 (Firestore or Pub/Sub unreachable) is recorded in `scan_runs` by the
scan's HTTP entry point with its status, error kind and message; `jobsctl runs` shows it as
failed with the reason, in its table and its `--json`. When Firestore's writes fail too, the
record cannot be written: the run's log lines are its only record.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Callable
from datetime import timedelta
from typing import Any

import pytest

from services.cli.app import main
from services.scan.app import EVENT_SCAN_RUN_UNRECORDED
from tests.integration.scan.conftest import Rig


def jobsctl(
    project: str, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str], *argv: str
) -> str:
    monkeypatch.setenv("JOBS_PROJECT", project)
    capsys.readouterr()
    assert main(list(argv)) == 0
    return capsys.readouterr().out


def listed(rig: Rig, monkeypatch: pytest.MonkeyPatch, capsys: Any) -> tuple[dict[str, Any], str]:
    """`jobsctl runs --json` as {run_id: run}, and the text of `jobsctl runs`."""
    data = json.loads(jobsctl(rig.project, monkeypatch, capsys, "runs", "--json"))
    text = jobsctl(rig.project, monkeypatch, capsys, "runs")
    return {run["run_id"]: run for run in data["runs"]}, text


@pytest.mark.builtin_emulator("fault injection")
def test_a_run_failed_by_firestore_is_listed_as_failed_with_its_reason(
    scan_rig: Callable[..., Rig],
    firestore_emulator: Any,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    rig = scan_rig(cloud_run=False, firestore_timeout_s=0.5)
    rig.seed(3)
    ok = rig.scan()["run_id"]
    rig.clock.advance(timedelta(minutes=1))
    # Reads fail (the control document first), writes still work: the failure is recorded.
    firestore_emulator.inject_fault("BatchGetDocuments", "UNAVAILABLE", count=1000)
    try:
        response = rig.post()
    finally:
        firestore_emulator.clear_faults()
    assert response.status_code == 503, response.get_data(as_text=True)
    failed = response.get_json()["run_id"]

    runs, text = listed(rig, monkeypatch, capsys)
    assert set(runs) == {ok, failed}
    assert (runs[ok]["outcome"], runs[ok]["failure"]) == ("ok", None)
    run = runs[failed]
    assert run["outcome"] == "failed"
    assert (run["failure"]["status"], run["failure"]["kind"]) == (503, "firestore_unavailable")
    assert "control document" in run["failure"]["message"]
    assert "failed 503" in text
    assert f"{failed}: failed with 503 (firestore_unavailable)" in text
    document = rig.client.collection("scan_runs").document(failed).get().to_dict()
    retention = timedelta(seconds=rig.settings.run_retention_s)
    assert document["expire_at"] == document["finished_at"] + retention  # the TTL still holds


@pytest.mark.builtin_emulator("fault injection")
def test_a_run_whose_every_publish_failed_is_listed_with_pubsub_as_the_reason(
    scan_rig: Callable[..., Rig],
    pubsub_emulator: Any,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    rig = scan_rig()  # through the local Cloud Run front end
    rig.seed(5)
    pubsub_emulator.inject_fault("Publish", "PERMISSION_DENIED", count=1000)
    response = rig.post()
    pubsub_emulator.clear_faults()
    assert response.status_code == 503
    failed = response.get_json()["run_id"]

    runs, text = listed(rig, monkeypatch, capsys)
    run = runs[failed]
    assert (run["outcome"], run["publish_failed"], run["published"]) == ("failed", 5, 0)
    assert (run["failure"]["status"], run["failure"]["kind"]) == (503, "pubsub_unavailable")
    assert f"{failed}: failed with 503 (pubsub_unavailable)" in text


@pytest.mark.builtin_emulator("fault injection")
def test_when_firestore_writes_fail_too_the_log_line_is_the_only_record(
    scan_rig: Callable[..., Rig],
    firestore_emulator: Any,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
    caplog: pytest.LogCaptureFixture,
) -> None:
    rig = scan_rig(cloud_run=False, firestore_timeout_s=0.5)
    caplog.set_level(logging.WARNING)
    for method in ("BatchGetDocuments", "Commit"):
        firestore_emulator.inject_fault(method, "UNAVAILABLE", count=1000)
    try:
        response = rig.post()
    finally:
        firestore_emulator.clear_faults()
    assert response.status_code == 503
    failed = response.get_json()["run_id"]
    unrecorded = [
        r
        for r in caplog.records
        if getattr(r, "fields", {}).get("event") == EVENT_SCAN_RUN_UNRECORDED
    ]
    assert len(unrecorded) == 1 and unrecorded[0].fields["run_id"] == failed  # type: ignore[attr-defined]
    runs, _ = listed(rig, monkeypatch, capsys)
    assert failed not in runs
