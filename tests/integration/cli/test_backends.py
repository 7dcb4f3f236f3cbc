"""Unreachable backends end with exit code 3 and say which one; the console script works."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Callable
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest

from emulators.launcher import free_port
from services.cli.errors import ExitCode
from tests.integration.cli.conftest import Jobsctl

JOBSCTL = Path(sys.executable).with_name("jobsctl")


def test_an_unreachable_firestore_emulator_is_exit_code_3(
    jobsctl: Jobsctl, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("FIRESTORE_EMULATOR_HOST", f"127.0.0.1:{free_port('127.0.0.1')}")
    result = jobsctl("stats")
    assert result.code == ExitCode.UNAVAILABLE
    assert "Firestore emulator at 127.0.0.1:" in result.err and "not reachable" in result.err


def test_an_unreachable_pubsub_emulator_is_exit_code_3(
    jobsctl: Jobsctl, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("PUBSUB_EMULATOR_HOST", f"127.0.0.1:{free_port('127.0.0.1')}")
    result = jobsctl("dead-letters", "list")
    assert result.code == ExitCode.UNAVAILABLE
    assert "Pub/Sub emulator" in result.err


def test_no_project_is_a_usage_error(jobsctl: Jobsctl, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("JOBS_PROJECT")
    monkeypatch.delenv("GOOGLE_CLOUD_PROJECT", raising=False)
    result = jobsctl("stats")
    assert result.code == ExitCode.USAGE and "no project" in result.err


def _console(project: str, *argv: str) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "JOBS_PROJECT": project}
    return subprocess.run(
        [str(JOBSCTL), *argv], env=env, capture_output=True, text=True, timeout=60, check=False
    )


def test_the_console_script_schedules_and_shows_a_job(
    firestore_project: str, firestore_emulator: Any
) -> None:
    created = _console(
        firestore_project,
        "schedule",
        "--job-id",
        "j1",
        "--subject",
        "m1",
        "--due",
        "+1d",
        "--param",
        "object=m1/source.mp4",
    )
    shown = _console(firestore_project, "show", "j1", "--json")
    assert created.returncode == 0, created.stderr
    assert shown.returncode == 0
    assert json.loads(shown.stdout)["job"]["state"] == "deferred"


def test_the_console_script_exits_1_for_a_missing_job_and_2_for_bad_usage(
    firestore_project: str, firestore_emulator: Any, seed: Callable[..., str]
) -> None:
    seed("j0", due=timedelta(days=1))
    missing = _console(firestore_project, "cancel", "nope", "--reason", "x")
    usage = _console(firestore_project, "list", "--state", "bogus")
    assert missing.returncode == 1 and "not found" in missing.stderr
    assert usage.returncode == 2 and "invalid choice" in usage.stderr
