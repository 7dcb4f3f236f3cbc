"""stats, reclaim, plan, runs and rejected against the Firestore emulator."""

from __future__ import annotations

from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from typing import Any

from services.cli.errors import ExitCode
from services.jobs import schema
from services.jobs.record import SCHEMA_VERSION
from services.store.job_store import FirestoreJobStore
from services.store.rejections import RejectionStore, rejection_of
from services.store.runs import ScanRun, ScanRunLog
from tests.integration.cli.conftest import Jobsctl


def test_stats_counts_states_due_jobs_and_the_oldest_overdue(
    jobsctl: Jobsctl, seed: Callable[..., str]
) -> None:
    seed("a", due=timedelta(hours=-2))
    seed("b", due=timedelta(minutes=-5))
    seed("c", due=timedelta(days=30))
    jobsctl("cancel", "c", "--reason", "x")
    result = jobsctl("stats", "--json")
    text = jobsctl("stats")
    assert result.code == text.code == ExitCode.OK
    data = result.json()
    assert data["due_count"] == 2
    assert 2 * 3600 <= data["oldest_overdue_age_s"] < 2 * 3600 + 60
    assert data["per_state"]["deferred"] == 2 and data["per_state"]["cancelled"] == 1
    assert data["stuck_claims"] == 0 and data["paused"] is False
    assert "oldest overdue:  2 h 00 m" in text.out or "oldest overdue:  2 h 01 m" in text.out


def test_stats_counts_the_records_a_newer_version_wrote(
    jobsctl: Jobsctl, seed: Callable[..., str], firestore_client: Any
) -> None:
    # Issue 24: records this version leaves untouched (schema_version above its own, or a
    # state it does not know) were invisible in stats; only the log metric counted them.
    for job_id in ("ok", "bump", "bump_and_state", "state"):
        seed(job_id, due=timedelta(hours=-1))
    jobs = firestore_client.collection(schema.JOBS)
    jobs.document("bump").update({"schema_version": SCHEMA_VERSION + 1})
    jobs.document("bump_and_state").update(
        {"schema_version": SCHEMA_VERSION + 1, "state": "paused_by_policy"}
    )
    jobs.document("state").update({"state": "paused_by_policy"})

    result = jobsctl("stats", "--json")
    text = jobsctl("stats")

    assert result.code == text.code == ExitCode.OK, result.err
    assert result.json()["newer_records"] == {"newer_schema": 2, "unknown_state": 2}
    assert sum(result.json()["per_state"].values()) == 2
    assert (
        "from a newer version: 2 with a newer schema_version, 2 in a state this version "
        "does not know" in text.out
    )


def test_reclaim_is_a_dry_run_until_apply(
    jobsctl: Jobsctl,
    seed: Callable[..., str],
    past_store: FirestoreJobStore,
    store: FirestoreJobStore,
) -> None:
    for n in range(3):
        seed(f"j{n}", due=timedelta(hours=-2))
    # Claimed an hour ago by a scan run that never came back.
    claimed = past_store.claim_due(past_store.clock.now(), "run-lost", 10)
    assert len(claimed) == 3

    dry = jobsctl("reclaim", "--json")
    assert dry.code == ExitCode.OK
    assert sorted(c["job_id"] for c in dry.json()["candidates"]) == ["j0", "j1", "j2"]
    assert {j.state for j in store.list_jobs().jobs} == {"claimed"}

    applied = jobsctl("reclaim", "--apply")
    assert applied.code == ExitCode.OK, applied.err
    assert "reclaimed 3 as reclaimer:jobsctl-" in applied.out
    assert "reclaiming: [" in applied.err
    jobs = store.list_jobs().jobs
    assert {j.state for j in jobs} == {"deferred"}
    assert all(j.history[-1].by.startswith("reclaimer:jobsctl-") for j in jobs)
    assert jobsctl("reclaim", "--json").json()["candidates"] == []


def test_reclaim_leaves_fresh_claims_alone(
    jobsctl: Jobsctl, seed: Callable[..., str], store: FirestoreJobStore
) -> None:
    seed("j1", due=timedelta(minutes=-1))
    store.claim_due(datetime.now(UTC), "run-live", 10)
    result = jobsctl("reclaim", "--apply", "--json")
    assert result.code == ExitCode.OK
    assert result.json()["reclaimed"] == []
    job = store.get("j1")
    assert job is not None and job.state == "claimed"


def test_plan_reads_the_backlog_and_the_control_settings(
    jobsctl: Jobsctl, seed: Callable[..., str]
) -> None:
    for n in range(9):
        seed(f"j{n}", due=timedelta(minutes=-n - 1))
    jobsctl("control", "set", "--catch-up-rate", "1", "--max-per-run", "600", "--reason", "t")
    result = jobsctl("plan", "--interval", "5m", "--json")
    assert result.code == ExitCode.OK, result.err
    data = result.json()
    # 9 due at 1/s with 10 % reserved: 10 s; 600 per 300 s (2/s) does not limit it.
    assert (data["backlog"], data["seconds"], data["limited_by"]) == (9, 10, "rate")
    assert data["human"] == "9 due; at 1/s with 10 % reserved: 10 s"


def test_plan_of_a_hypothetical_backlog_needs_no_firestore(
    jobsctl: Jobsctl, monkeypatch: Any
) -> None:
    monkeypatch.setenv("FIRESTORE_EMULATOR_HOST", "127.0.0.1:1")  # nothing listens there
    result = jobsctl("plan", "--due", "180000", "--rate", "50", "--reserve", "10")
    assert result.code == ExitCode.OK, result.err
    assert result.out.splitlines()[0] == "180,000 due; at 50/s with 10 % reserved: 1 h 07 m"


def test_plan_names_the_budget_when_it_is_the_bottleneck(jobsctl: Jobsctl) -> None:
    result = jobsctl(
        "plan", "--due", "180000", "--rate", "50", "--max-per-run", "1000", "--interval", "5m"
    )
    assert "the per-run budget limits the scan to 3.33/s" in result.out
    assert "jobsctl control set --max-per-run 15000" in result.out


def test_plan_respects_the_deployment_ceiling_on_the_per_run_budget(
    jobsctl: Jobsctl, monkeypatch: Any
) -> None:
    monkeypatch.setenv("JOBS_SCAN_MAX_PER_RUN", "500")
    result = jobsctl(
        "plan",
        "--due",
        "1000",
        "--rate",
        "10",
        "--max-per-run",
        "2000",
        "--interval",
        "100",
        "--reserve",
        "0",
        "--json",
    )
    assert result.code == ExitCode.OK
    # 500 per 100 s = 5/s, below the 10/s asked for: 200 s, limited by the budget.
    assert (result.json()["max_per_run"], result.json()["seconds"]) == (500, 200)
    assert "scanMaxPerRun" in result.err


def test_plan_refuses_impossible_inputs(jobsctl: Jobsctl) -> None:
    assert jobsctl("plan", "--due", "10", "--rate", "0").code == ExitCode.USAGE
    assert jobsctl("plan", "--due", "10", "--reserve", "100").code == ExitCode.USAGE
    assert jobsctl("plan", "--due", "10", "--interval", "soon").code == ExitCode.USAGE


def test_plan_refuses_a_rate_too_large_to_compute_with(jobsctl: Jobsctl) -> None:
    for rate in ("inf", "1e308"):
        result = jobsctl("plan", "--due", "10", "--rate", rate, "--max-per-run", "1")
        assert result.code == ExitCode.USAGE, rate
        assert "rate" in result.err, rate


def test_runs_lists_recent_scan_runs_newest_first(jobsctl: Jobsctl, firestore_client: Any) -> None:
    log = ScanRunLog(firestore_client, retention=timedelta(days=7))
    start = datetime.now(UTC) - timedelta(minutes=10)
    for n in range(3):
        at = start + timedelta(minutes=n)
        log.record(ScanRun(f"run-{n}", at, at + timedelta(seconds=2), "drained", claimed=n))
    result = jobsctl("runs", "--json")
    assert result.code == ExitCode.OK
    runs = result.json()["runs"]
    assert [r["run_id"] for r in runs] == ["run-2", "run-1", "run-0"]
    assert "run-2" in jobsctl("runs").out


def test_runs_show_each_runs_drain_rate_and_stale_enqueued(
    jobsctl: Jobsctl, firestore_client: Any
) -> None:
    log = ScanRunLog(firestore_client, retention=timedelta(days=7))
    at = datetime.now(UTC) - timedelta(minutes=1)
    log.record(
        ScanRun("run-x", at, at + timedelta(seconds=4), "budget", published=500, stale_enqueued=3)
    )
    (run,) = jobsctl("runs", "--json").json()["runs"]
    assert (run["drain_rate_per_s"], run["stale_enqueued"]) == (125.0, 3)
    text = jobsctl("runs").out
    assert "burst/s" in text and "125.0" in text


def test_rejected_lists_push_messages_the_worker_could_not_use(
    jobsctl: Jobsctl, firestore_client: Any
) -> None:
    RejectionStore(firestore_client).record(
        rejection_of("bad_base64", "data is not base64", b"{}", {}, received_at=datetime.now(UTC))
    )
    result = jobsctl("rejected", "--json")
    assert result.code == ExitCode.OK
    assert [r["reason"] for r in result.json()["rejected"]] == ["bad_base64"]


def test_reclaim_and_stats_honour_the_deployment_claim_timeout_floor(
    jobsctl: Jobsctl,
    seed: Callable[..., str],
    past_store: FirestoreJobStore,
    store: FirestoreJobStore,
    monkeypatch: Any,
) -> None:
    seed("j1", due=timedelta(hours=-2))
    # Claimed an hour ago: older than the control's timeout, younger than the deployment's.
    assert len(past_store.claim_due(past_store.clock.now(), "run-slow", 10)) == 1
    monkeypatch.setenv("JOBS_CLAIM_TIMEOUT_S", "2h")

    for argv in (
        ("reclaim", "--apply", "--json"),
        ("reclaim", "--apply", "--claim-timeout", "1m", "--json"),
    ):
        result = jobsctl(*argv)
        assert result.code == ExitCode.OK, result.err
        assert result.json()["reclaimed"] == []
        assert "deployment's claim timeout" in result.err
    job = store.get("j1")
    assert job is not None and job.state == "claimed"

    stats = jobsctl("stats", "--json").json()
    assert (stats["claim_timeout_s"], stats["stuck_claims"]) == (7200.0, 0)

    monkeypatch.setenv("JOBS_CLAIM_TIMEOUT_S", "30m")
    assert jobsctl("stats", "--json").json()["stuck_claims"] == 1
    applied = jobsctl("reclaim", "--apply", "--json")
    assert [r["job_id"] for r in applied.json()["reclaimed"]] == ["j1"]


def test_an_invalid_deployment_claim_timeout_is_a_usage_error(
    jobsctl: Jobsctl, monkeypatch: Any
) -> None:
    monkeypatch.setenv("JOBS_CLAIM_TIMEOUT_S", "soon")
    result = jobsctl("reclaim", "--apply")
    assert result.code == ExitCode.USAGE
    assert "JOBS_CLAIM_TIMEOUT_S" in result.err


def test_plan_defaults_to_the_scans_own_interval(jobsctl: Jobsctl, monkeypatch: Any) -> None:
    from services.edge.scan_deployment import DEFAULT_INTERVAL_S, SCAN_INTERVAL_S

    monkeypatch.delenv(SCAN_INTERVAL_S, raising=False)
    result = jobsctl("plan", "--due", "100", "--rate", "1", "--max-per-run", "10", "--json")
    assert result.code == ExitCode.OK, result.err
    assert result.json()["interval_s"] == DEFAULT_INTERVAL_S
    monkeypatch.setenv(SCAN_INTERVAL_S, "2m")
    assert jobsctl("plan", "--due", "100", "--rate", "1", "--json").json()["interval_s"] == 120


def test_a_limit_below_one_is_a_usage_error_naming_the_limit(jobsctl: Jobsctl) -> None:
    for argv in (
        ("list", "--limit", "0"),
        ("runs", "--limit", "-1"),
        ("rejected", "--limit", "-1"),
        ("reclaim", "--limit", "-1"),
        ("reclaim", "--apply", "--limit", "0"),
    ):
        result = jobsctl(*argv)
        assert result.code == ExitCode.USAGE, argv
        assert "limit" in result.err and result.err.count("\n") == 1, argv


def test_an_invalid_scan_interval_in_the_environment_is_a_usage_error_naming_it(
    jobsctl: Jobsctl, monkeypatch: Any
) -> None:
    monkeypatch.setenv("JOBS_SCAN_INTERVAL_S", "soon")
    result = jobsctl("plan", "--due", "10", "--rate", "1")
    assert result.code == ExitCode.USAGE
    assert "JOBS_SCAN_INTERVAL_S" in result.err
    # The flag wins over the environment, so the variable is not read at all.
    assert jobsctl("plan", "--due", "10", "--rate", "1", "--interval", "5m").code == ExitCode.OK


def test_a_claim_timeout_flag_beyond_the_control_maximum_is_a_usage_error(
    jobsctl: Jobsctl,
) -> None:
    for argv in (("reclaim",), ("reclaim", "--apply")):
        result = jobsctl(*argv, "--claim-timeout", "99999999d")
        assert result.code == ExitCode.USAGE, (argv, result.err)
        assert "claim timeout must be at most 30 d" in result.err, argv


def test_stats_of_a_project_with_no_control_document_and_no_job_warns_and_exits_4(
    jobsctl: Jobsctl,
) -> None:
    # Before (issue 33, finding 9): `jobsctl --project wrong-project stats` showed an empty
    # system and exited 0, as a healthy idle one does.
    result = jobsctl("--project", "wrong-project", "stats", "--json")
    text = jobsctl("--project", "wrong-project", "stats")
    assert result.code == text.code == ExitCode.UNINITIALISED == 4
    for run in (result, text):
        assert "project 'wrong-project' looks uninitialised" in run.err
        assert f"no control document ({schema.CONTROL}/{schema.CONTROL_DOCUMENT}" in run.err
        assert f"no job records in {schema.JOBS!r}" in run.err
    data = result.json()  # the figures are still there, with the warning
    assert data["due_count"] == 0 and "looks uninitialised" in data["warning"]
    assert "per_state" in data


def test_stats_does_not_warn_once_the_project_has_a_control_document_or_a_job(
    jobsctl: Jobsctl, seed: Callable[..., str], firestore_project: str
) -> None:
    seed("a")  # a job, and no control document yet
    assert jobsctl("stats").code == ExitCode.OK
    paused = f"{firestore_project}-paused"  # a control document, and no job
    assert jobsctl("--project", paused, "pause", "--reason", "drill").code == ExitCode.OK
    calm = jobsctl("--project", paused, "stats")
    assert (calm.code, calm.err) == (ExitCode.OK, "")
    empty = jobsctl("--project", f"{firestore_project}-empty", "stats")
    assert empty.code == ExitCode.UNINITIALISED
