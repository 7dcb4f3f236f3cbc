"""pause, resume and control set/show against the Firestore emulator."""

from __future__ import annotations

import pytest

from services.cli.errors import ExitCode
from services.store.job_store import FirestoreJobStore
from tests.integration.cli.conftest import Jobsctl


def test_pause_and_resume_flip_the_control_document_with_who_and_why(
    jobsctl: Jobsctl, store: FirestoreJobStore
) -> None:
    paused = jobsctl("pause", "--reason", "storage API outage")
    assert paused.code == ExitCode.OK and "paused" in paused.out
    control = store.get_control()
    assert control.paused and control.reason == "storage API outage"
    assert control.changed_by == "alice"
    assert jobsctl("stats", "--json").json()["paused"] is True

    resumed = jobsctl("resume", "--reason", "storage healthy again", "--json")
    assert resumed.code == ExitCode.OK
    assert resumed.json()["paused"] is False
    assert not store.get_control().paused


def test_pause_without_a_reason_is_a_usage_error(
    jobsctl: Jobsctl, store: FirestoreJobStore
) -> None:
    assert jobsctl("pause").code == ExitCode.USAGE
    assert jobsctl("pause", "--reason", " ").code == ExitCode.USAGE
    assert not store.get_control().paused


def test_control_set_changes_rate_budget_and_timeout(
    jobsctl: Jobsctl, store: FirestoreJobStore
) -> None:
    result = jobsctl(
        "control",
        "set",
        "--catch-up-rate",
        "50",
        "--max-per-run",
        "2000",
        "--claim-timeout",
        "15m",
        "--reason",
        "catch up after outage",
    )
    assert result.code == ExitCode.OK, result.err
    control = store.get_control()
    assert (control.catch_up_rate, control.claim_budget) == (50.0, 2000)
    assert control.claim_timeout.total_seconds() == 900
    shown = jobsctl("control", "show", "--json").json()
    assert shown["max_per_run"] == 2000
    assert shown["history"][-1]["reason"] == "catch up after outage"
    assert "catch up after outage" in jobsctl("control", "show").out


def test_control_set_refuses_invalid_or_empty_changes(
    jobsctl: Jobsctl, store: FirestoreJobStore
) -> None:
    zero = jobsctl("control", "set", "--catch-up-rate", "0", "--reason", "x")
    nothing = jobsctl("control", "set", "--reason", "x")
    huge = jobsctl("control", "set", "--max-per-run", "10000000", "--reason", "x")
    assert zero.code == nothing.code == huge.code == ExitCode.USAGE
    assert "nothing to change" in nothing.err
    # The flags' names, not the control document's field names.
    assert "--catch-up-rate must be" in zero.err and "catch_up_rate" not in zero.err
    assert "--max-per-run must be" in huge.err and "claim_budget" not in huge.err
    assert store.get_control().history == ()


def test_without_an_operator_budget_the_deployment_cap_alone_bounds_a_run(
    jobsctl: Jobsctl, store: FirestoreJobStore, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Issue 22: a stack's scanMaxPerRun (12,000 by default) was silently capped by the control
    # document's own default of 1,000, so setting only the catch-up rate drained at 16.7/s.
    monkeypatch.setenv("JOBS_SCAN_MAX_PER_RUN", "12000")
    monkeypatch.setenv("JOBS_SCAN_INTERVAL_S", "60")
    assert store.get_control().claim_budget is None
    rate = jobsctl("control", "set", "--catch-up-rate", "200", "--reason", "drain the backlog")
    assert "12,000 per run" in rate.out, rate.out
    assert "the deployment's cap (JOBS_SCAN_MAX_PER_RUN)" in rate.out
    jobsctl("control", "set", "--max-per-run", "500", "--reason", "protect storage")
    assert store.get_control().claim_budget == 500
    cleared = jobsctl("control", "set", "--max-per-run", "deployment", "--reason", "back to normal")
    assert cleared.code == ExitCode.OK, cleared.err
    assert store.get_control().claim_budget is None
    assert "12,000 per run" in cleared.out
    bad = jobsctl("control", "set", "--max-per-run", "lots", "--reason", "x")
    assert bad.code == ExitCode.USAGE and "'deployment'" in bad.err
