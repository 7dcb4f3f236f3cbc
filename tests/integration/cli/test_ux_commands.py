"""The operator's experience: idempotent schedule by decision, params checked at schedule
time, bulk scheduling from JSON lines, one rule for repeated commands, budgets with their
arithmetic, and the live view — each against the Firestore emulator with the real client."""

from __future__ import annotations

import io
import json
from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest

from services.cli.errors import ExitCode
from services.store.job_store import FirestoreJobStore
from services.store.runs import ScanRun, ScanRunLog
from tests.integration.cli.conftest import Jobsctl

OBJECT = "object=media-1/source.mp4"


def test_scheduling_the_same_decision_again_with_a_relative_due_is_a_no_op(
    jobsctl: Jobsctl, store: FirestoreJobStore
) -> None:
    argv = ("schedule", "--decision", "d-1", "--subject", "media-1", "--param", OBJECT)
    first = jobsctl(*argv, "--due", "+30d", "--json")
    retry = jobsctl(*argv, "--due", "+30d")  # a retry after a timeout: a later instant
    moved = jobsctl(*argv, "--due", "+40d")
    assert first.code == retry.code == moved.code == ExitCode.OK, moved.err
    assert "already scheduled (unchanged)" in retry.out
    assert "keeps its due time" in moved.out and "reschedule" in moved.out
    job = store.get(first.json()["job"]["job_id"])
    assert job is not None and len(job.history) == 1
    assert timedelta(days=29) < job.due_at - datetime.now(UTC) <= timedelta(days=30)


def test_a_different_param_under_the_same_decision_is_refused_naming_it(
    jobsctl: Jobsctl,
) -> None:
    argv = ("schedule", "--decision", "d-1", "--subject", "media-1")
    assert jobsctl(*argv, "--param", OBJECT).code == ExitCode.OK
    other = jobsctl(*argv, "--param", "object=media-1/other.mp4")
    assert other.code == ExitCode.REFUSED
    assert "different params.object" in other.err


@pytest.mark.parametrize(
    ("param", "named"),
    [
        ("objects=[1,2", "--param objects: '[1,2' is not valid JSON"),
        ("objects=[1,2]", "params.objects[0] must be a non-empty string"),
        ("objects=a.mp4", "params.objects must be a list of strings"),
        ("bukcet=x", "params.bukcet is not a field of media.delete_source"),
    ],
)
def test_params_that_do_not_fit_are_a_usage_error_naming_the_field(
    jobsctl: Jobsctl, store: FirestoreJobStore, param: str, named: str
) -> None:
    result = jobsctl("schedule", "--job-id", "j", "--subject", "m", "--param", param)
    assert result.code == ExitCode.USAGE
    assert named in result.err
    assert store.get("j") is None


def _job_lines(count: int, prefix: str = "d") -> list[str]:
    return [
        json.dumps(
            {
                "decision": f"{prefix}-{n}",
                "subject": f"media-{n}",
                "params": {"object": f"media-{n}/source.mp4"},
                "due": "+30d",
            }
        )
        for n in range(count)
    ]


def test_schedule_from_a_file_reports_created_present_and_refused_with_line_numbers(
    jobsctl: Jobsctl, store: FirestoreJobStore, tmp_path: Path
) -> None:
    good = _job_lines(600)  # more than one batch
    bad = [
        "",  # blank lines are skipped but still counted for line numbers
        '{"decision": "x", "subject": "m", "params": {"objects": "[1,2"}}',
        "not json",
        '{"job_id": "k", "subject": "m", "params": {"object": "a"}, "colour": 1}',
        '{"subject": "m", "params": {"object": "a"}}',
    ]
    path = tmp_path / "jobs.jsonl"
    path.write_text("\n".join(good[:300] + bad + good[300:]) + "\n")
    first = jobsctl("schedule", "--from", str(path), "--json")
    assert first.code == ExitCode.REFUSED, first.err
    data = first.json()
    assert (data["created"], data["already_present"]) == (600, 0)
    refused = {r["line"]: r["reason"] for r in data["refused"]}
    assert sorted(refused) == [302, 303, 304, 305]
    assert "params.objects must be a list of strings" in refused[302]
    assert refused[303].startswith("not JSON")
    assert "unknown key 'colour'" in refused[304]
    assert "exactly one of job_id or decision" in refused[305]
    assert "scheduling: [" in first.err  # the progress bar, on stderr
    again = jobsctl("schedule", "--from", str(path))
    assert again.code == ExitCode.REFUSED
    assert "0 created, 600 already present, 4 refused" in again.out
    assert "302" in again.out


def test_schedule_from_stdin_is_idempotent_on_re_run(
    jobsctl: Jobsctl, monkeypatch: pytest.MonkeyPatch
) -> None:
    text = "\n".join(_job_lines(5, "s")) + "\n"
    runs = []
    for _ in range(2):
        monkeypatch.setattr("sys.stdin", io.StringIO(text))
        runs.append(jobsctl("schedule", "--from", "-", "--json"))
    assert [r.code for r in runs] == [ExitCode.OK, ExitCode.OK]
    assert [(r.json()["created"], r.json()["already_present"]) for r in runs] == [(5, 0), (0, 5)]


def test_schedule_from_a_missing_file_or_with_single_job_flags_is_usage(
    jobsctl: Jobsctl, tmp_path: Path
) -> None:
    missing = jobsctl("schedule", "--from", str(tmp_path / "nope.jsonl"))
    mixed = jobsctl("schedule", "--from", "-", "--subject", "m")
    assert missing.code == mixed.code == ExitCode.USAGE
    assert "--from" in missing.err and "cannot be combined with --from" in mixed.err


def test_repeating_a_command_whose_outcome_holds_exits_0_everywhere(
    jobsctl: Jobsctl, store: FirestoreJobStore, seed: Callable[..., str]
) -> None:
    seed("j1", due=timedelta(days=1))
    pairs = [
        ("cancel", "j1", "--reason", "withdrawn"),
        ("pause", "--reason", "outage"),
        ("resume", "--reason", "healthy"),
    ]
    for argv in pairs:
        first, again = jobsctl(*argv), jobsctl(*argv, "--json")
        assert (first.code, again.code) == (ExitCode.OK, ExitCode.OK), argv
        assert again.json()["changed"] is False, argv
    # Resuming twice wrote one change, not two.
    assert [c.changes for c in store.get_control().history] == [{"paused": True}, {"paused": False}]
    assert jobsctl("cancel", "nope", "--reason", "x").code == ExitCode.REFUSED


def test_resume_and_plan_print_the_effective_budget_with_its_arithmetic(
    jobsctl: Jobsctl, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("JOBS_SCAN_INTERVAL_S", "5")
    jobsctl("control", "set", "--catch-up-rate", "10", "--reason", "drill")
    jobsctl("pause", "--reason", "drill")
    resumed = jobsctl("resume", "--reason", "drill")
    arithmetic = "50 per run = min(max per run 1,000, 10/s x 5 s = 50)"
    assert arithmetic in resumed.out
    assert "up to 1,000" not in resumed.out
    assert arithmetic in jobsctl("plan").out


def _record_runs(firestore_client: Any, published: list[int], every_s: float = 5) -> None:
    log = ScanRunLog(firestore_client, retention=timedelta(days=1))
    start = datetime.now(UTC) - timedelta(seconds=every_s * len(published))
    for n, count in enumerate(published):
        at = start + timedelta(seconds=every_s * n)
        reason = "budget" if count else "drained"
        log.record(
            ScanRun(f"run-{n}", at, at + timedelta(seconds=1), reason, budget=50, published=count)
        )


def test_watch_once_prints_states_backlog_rates_eta_and_the_last_runs(
    jobsctl: Jobsctl, seed: Callable[..., str], firestore_client: Any, monkeypatch: Any
) -> None:
    monkeypatch.setenv("JOBS_SCAN_INTERVAL_S", "5")
    for n in range(4):
        seed(f"due-{n}", due=timedelta(hours=-1))
    seed("later", due=timedelta(days=1))
    _record_runs(firestore_client, [50, 50, 50, 0])
    jobsctl("control", "set", "--catch-up-rate", "10", "--reason", "drill")
    frame = jobsctl("watch", "--once")
    assert frame.code == ExitCode.OK, frame.err
    for text in (
        "deferred",
        "due now",
        "oldest overdue",
        "stuck claims",
        "stale enqueued",
        "50 per run = min(max per run 1,000, 10/s x 5 s = 50)",
        "set rate  10.0/s",
        "measured",
        "ETA",
        "last scan runs",
        "budget",
        "drained",
    ):
        assert text in frame.out, text
    snapshot = jobsctl("watch", "--once", "--json").json()
    assert snapshot["states"]["deferred"] == 5 and snapshot["due_now"] == 4
    # 150 published by the runs before the newest, over the 15 s from the first start to
    # the last: the 10/s the settings allow.
    assert snapshot["measured_rate_per_s"] == pytest.approx(10.0)
    assert snapshot["eta_s"] == pytest.approx(4 / 10.0)
    assert [r["stopped_because"] for r in snapshot["runs"]][:2] == ["drained", "budget"]
    assert snapshot["read_time"] is not None


def test_watch_refuses_a_refresh_interval_below_its_floor(jobsctl: Jobsctl) -> None:
    result = jobsctl("watch", "--every", "0")
    assert result.code == ExitCode.USAGE and "--every" in result.err


def test_runs_label_burst_and_effective_rates_apart(
    jobsctl: Jobsctl, firestore_client: Any
) -> None:
    _record_runs(firestore_client, [50, 50])
    newest, oldest = jobsctl("runs", "--json").json()["runs"]
    assert newest["burst_rate_per_s"] == 50.0  # 50 in its 1 s
    assert newest["effective_rate_per_s"] == 10.0  # 50 in the 5 s since the previous began
    assert oldest["effective_rate_per_s"] is None
    assert "effective/s" in jobsctl("runs").out


def test_runs_list_runs_whose_publishes_failed_as_failed(
    jobsctl: Jobsctl, firestore_client: Any
) -> None:
    log = ScanRunLog(firestore_client, retention=timedelta(days=1))
    at = datetime.now(UTC) - timedelta(minutes=1)
    log.record(ScanRun("down", at, at + timedelta(seconds=1), "budget", publish_failed=50))
    log.record(
        ScanRun(
            "half",
            at + timedelta(seconds=5),
            at + timedelta(seconds=6),
            "budget",
            published=25,
            publish_failed=25,
        )
    )
    outcomes = {r["run_id"]: r["outcome"] for r in jobsctl("runs", "--json").json()["runs"]}
    assert outcomes == {"down": "failed", "half": "partial"}
    assert "failed" in jobsctl("runs").out


def _interrupt_on_call(calls: int) -> Callable[[float], None]:
    """A time.sleep that lets `calls - 1` refreshes happen, then is Ctrl-C."""
    seen = []

    def sleep(_: float) -> None:
        seen.append(1)
        if len(seen) >= calls:
            raise KeyboardInterrupt

    return sleep


def test_watch_json_prints_one_snapshot_per_interval_until_ctrl_c(
    jobsctl: Jobsctl, seed: Callable[..., str], monkeypatch: pytest.MonkeyPatch
) -> None:
    seed("due", due=timedelta(minutes=-5))
    monkeypatch.setattr("services.cli.commands.watch.time.sleep", _interrupt_on_call(2))
    result = jobsctl("watch", "--json", "--every", "1")
    assert result.code == ExitCode.OK, result.err
    lines = result.out.splitlines()
    assert len(lines) == 2
    assert [json.loads(line)["due_now"] for line in lines] == [1, 1]


def test_watch_redraws_until_ctrl_c(jobsctl: Jobsctl, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr("services.cli.commands.watch.time.sleep", _interrupt_on_call(3))
    result = jobsctl("watch", "--every", "1")
    assert result.code == ExitCode.OK, result.err
    assert "Deferred Jobs at" in result.out and "last scan runs" in result.out


def test_control_show_prints_the_effective_budget(
    jobsctl: Jobsctl, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("JOBS_SCAN_INTERVAL_S", "60")
    monkeypatch.setenv("JOBS_SCAN_MAX_PER_RUN", "500")
    shown = jobsctl("control", "show")
    assert "per run: 500 per run = min(max per run 500, 20/s x 1 m 00 s = 1,200)" in shown.out
