"""jobsctl and paced runs: `plan` by mode with the deployed cap, `resume --ramp`, and `watch`
and `runs` showing the ramp and each run's partition."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

from services.cli.errors import ExitCode
from services.jobs.ramp import DEFAULT_START_RATE
from services.store.job_store import FirestoreJobStore
from services.store.runs import ScanRun, ScanRunLog


def test_plan_with_due_uses_the_deployed_cap(jobsctl: Any, monkeypatch: Any) -> None:
    # The runbook's example: a deployment capped at 1,000 per 5-minute run drains 3.3/s,
    # whatever rate is asked for.
    monkeypatch.setenv("JOBS_SCAN_INTERVAL_S", "300")
    monkeypatch.setenv("JOBS_SCAN_MAX_PER_RUN", "1000")
    result = jobsctl("plan", "--due", "180000", "--rate", "50", "--reserve", "0", "--json")
    assert result.code == ExitCode.OK, result.err
    data = result.json()
    assert (data["max_per_run"], data["limited_by"]) == (1000, "budget")
    assert data["seconds"] == 54000  # 180,000 / (1,000 / 300 s): 15 h


def test_plan_names_the_stack_setting_when_the_deployment_cap_binds(
    jobsctl: Any, monkeypatch: Any
) -> None:
    monkeypatch.setenv("JOBS_SCAN_INTERVAL_S", "60")
    monkeypatch.setenv("JOBS_SCAN_MAX_PER_RUN", "12000")
    above = jobsctl("plan", "--due", "180000", "--rate", "500").out
    assert "raise the stack's scanMaxPerRun" in above and "pulumi up" in above
    assert "control set --max-per-run" not in above  # the control cannot lift the cap
    below = jobsctl("plan", "--due", "180000", "--rate", "100", "--max-per-run", "1000").out
    assert "jobsctl control set --max-per-run 6000" in below


def test_plan_compares_the_modes_with_their_arithmetic(jobsctl: Any, monkeypatch: Any) -> None:
    monkeypatch.setenv("JOBS_SCAN_INTERVAL_S", "60")
    monkeypatch.setenv("JOBS_SCAN_MAX_PER_RUN", "12000")
    monkeypatch.setenv("JOBS_SCAN_TIME_BUDGET_S", "50")
    monkeypatch.setenv("JOBS_SCAN_POLL_S", "5")
    result = jobsctl("plan", "--due", "180000", "--rate", "200", "--reserve", "0")
    assert result.code == ExitCode.OK, result.err
    assert "https://cloud.google.com/run/pricing" in result.out
    assert "https://cloud.google.com/firestore/pricing" in result.out
    modes = jobsctl("plan", "--due", "180000", "--rate", "200", "--reserve", "0", "--json").json()[
        "modes"
    ]
    by_mode = {m["mode"]: m for m in modes}
    assert set(by_mode) == {"one-pass", "paced (end when idle)", "paced (polling)"}
    # Same budget per interval: the same drain (900 s) in every mode.
    assert {m["drain_s"] for m in modes} == {900}
    # Paced spreads 12,000 over 50 s; polling answers within a poll, at an instance's cost.
    assert by_mode["paced (polling)"]["claim_rate_per_s"] == 240
    assert by_mode["paced (polling)"]["latency_p99_s"] < by_mode["one-pass"]["latency_p99_s"]
    assert by_mode["one-pass"]["latency_p50_s"] == 30
    polling, cheap = by_mode["paced (polling)"], by_mode["paced (end when idle)"]
    assert polling["cost_usd_per_month"] > 10 * cheap["cost_usd_per_month"]


def test_resume_with_a_ramp_stores_it_and_watch_shows_it(
    jobsctl: Any, store: FirestoreJobStore
) -> None:
    jobsctl("control", "set", "--catch-up-rate", "200", "--reason", "drill")
    jobsctl("pause", "--reason", "drill")
    result = jobsctl("resume", "--ramp", "--reason", "drill")
    assert result.code == ExitCode.OK, result.err
    assert f"ramp: {DEFAULT_START_RATE:g}/s now" in result.out
    control = store.get_control()
    assert control.ramp is not None and control.ramp.start_rate == DEFAULT_START_RATE
    assert control.rate_at(control.ramp.started_at) == DEFAULT_START_RATE
    assert control.rate_at(control.ramp.started_at + timedelta(hours=1)) == 200
    frame = jobsctl("watch", "--once", "--json").json()
    assert frame["ramp"]["rate_now_per_s"] == DEFAULT_START_RATE
    assert frame["ramp"]["next_rate_per_s"] == DEFAULT_START_RATE * 1.5
    text = jobsctl("watch", "--once").out
    assert "ramp" in text and "500/50/5" in text
    # A resume without --ramp (after a pause) ends the ramp.
    jobsctl("pause", "--reason", "again")
    jobsctl("resume", "--reason", "again")
    assert store.get_control().ramp is None


def test_a_ramp_start_above_nothing_is_refused(jobsctl: Any) -> None:
    jobsctl("pause", "--reason", "t")
    result = jobsctl("resume", "--ramp", "--ramp-start", "0", "--reason", "t")
    assert result.code == ExitCode.USAGE
    assert "ramp start rate" in result.err


def test_runs_and_watch_show_each_partition(jobsctl: Any, firestore_client: Any) -> None:
    log = ScanRunLog(firestore_client, retention=timedelta(days=1))
    at = datetime.now(UTC)
    for partition in (0, 1):
        log.record(
            ScanRun(
                f"run-p{partition}",
                at + timedelta(seconds=partition),
                at + timedelta(seconds=10 + partition),
                "time",
                mode="paced",
                partition=partition,
                claimed=5,
                published=5,
            )
        )
    log.record(
        ScanRun(
            "run-dup",
            at + timedelta(seconds=5),
            at + timedelta(seconds=5),
            "duplicate",
            partition=1,
            note="scheduled execution x already ran",
        )
    )
    runs = jobsctl("runs", "--json").json()["runs"]
    assert {(r["run_id"], r["partition"]) for r in runs} >= {("run-p0", 0), ("run-p1", 1)}
    text = jobsctl("runs").out
    assert "run-dup: duplicate: scheduled execution x already ran" in text
    frame = jobsctl("watch", "--once", "--json").json()
    assert {(r["run_id"], r["partition"], r["mode"]) for r in frame["runs"]} >= {
        ("run-p0", 0, "paced"),
        ("run-p1", 1, "paced"),
    }
