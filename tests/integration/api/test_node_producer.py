"""The Node.js producer (examples/node) against the API on the emulators, as part of the
default suite wherever `node` is on PATH.

Its dependencies come from the committed package-lock.json: `npm ci` runs once into
examples/node/node_modules (git-ignored) when that is missing, so later runs need no network.
"""

from __future__ import annotations

import fcntl
import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import requests

from tests.integration.api.conftest import AUDIENCE, CALLER, ApiRig

ROOT = Path(__file__).resolve().parents[3]
EXAMPLE = ROOT / "examples" / "node"
NODE = shutil.which("node")

pytestmark = pytest.mark.skipif(
    NODE is None, reason="node is not on PATH: the Node.js producer example cannot run here"
)


@pytest.fixture(scope="module")
def node_modules() -> Path:
    installed = EXAMPLE / "node_modules" / "google-auth-library"
    # One installer at a time: parallel test workers share examples/node.
    lock_path = Path(tempfile.gettempdir()) / "deferred-jobs-examples-node.lock"
    with lock_path.open("w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if not installed.is_dir():
            npm = shutil.which("npm")
            assert npm is not None, "node is on PATH but npm is not; install npm to run this"
            done = subprocess.run(
                [npm, "ci", "--no-audit", "--no-fund"],
                cwd=EXAMPLE,
                capture_output=True,
                text=True,
                timeout=300,
                check=False,
            )
            assert done.returncode == 0, f"npm ci failed:\n{done.stdout}\n{done.stderr}"
    return installed


def run_node(args: list[str], env: dict[str, str], timeout_s: float = 120) -> Any:
    assert NODE is not None
    return subprocess.run(
        [NODE, *args],
        cwd=EXAMPLE,
        env={"PATH": os.environ.get("PATH", ""), **env},
        capture_output=True,
        text=True,
        timeout=timeout_s,
        check=False,
    )


@pytest.fixture
def producer_env(api_rig: ApiRig) -> Iterator[dict[str, str]]:
    yield {
        "DEFERRED_JOBS_API_URL": api_rig.url,
        "DEFERRED_JOBS_API_AUDIENCE": AUDIENCE,
        "DEFERRED_JOBS_TOKEN_URL": api_rig.oidc.token_url,
        "DEFERRED_JOBS_CALLER": CALLER,
        "DEFERRED_JOBS_TIMEOUT_MS": "10000",
    }


@pytest.fixture
def fronted_producer_env(fronted_api_rig: ApiRig) -> Iterator[dict[str, str]]:
    """The producer's environment for the api behind the Cloud Run front end: no audience
    given, so its tokens are addressed to the api URL, as Cloud Run's invoker check wants."""
    yield {
        "DEFERRED_JOBS_API_URL": fronted_api_rig.url,
        "DEFERRED_JOBS_TOKEN_URL": fronted_api_rig.oidc.token_url,
        "DEFERRED_JOBS_CALLER": CALLER,
        "DEFERRED_JOBS_TIMEOUT_MS": "10000",
    }


def log_lines(stderr: str) -> list[dict[str, Any]]:
    return [json.loads(line) for line in stderr.splitlines() if line.strip()]


def test_the_clients_retry_timeout_and_checking_rules_pass(node_modules: Path) -> None:
    done = run_node(["--test", "test/"], {})
    assert done.returncode == 0, done.stdout + done.stderr
    assert "# fail 0" in done.stdout


def test_the_producer_schedules_reads_and_cancels_a_job_through_the_front_end(
    node_modules: Path, fronted_producer_env: dict[str, str], fronted_api_rig: ApiRig
) -> None:
    api_rig, producer_env = fronted_api_rig, fronted_producer_env
    done = run_node(["producer.js", "media-42", "decision-7"], producer_env)
    assert done.returncode == 0, done.stdout + done.stderr
    summary = json.loads(done.stdout)
    assert summary["created"] is True
    assert (summary["read_state"], summary["final_state"]) == ("deferred", "cancelled")
    assert summary["due_at"] == "2026-07-01T12:00:00Z"  # the rig's clock + 30 days
    stored = api_rig.document(summary["job_id"])
    assert stored is not None and stored["state"] == "cancelled"
    assert stored["subject"] == "media-42"
    # One log line per request, each with the request ID the API echoed.
    logged = [line["request_id"] for line in log_lines(done.stderr)]
    assert logged == summary["request_ids"]
    # Running the same decision again is idempotent: the job exists (200), and cancelling a
    # cancelled job answers it again.
    again = run_node(["producer.js", "media-42", "decision-7"], producer_env)
    assert again.returncode == 0, again.stdout + again.stderr
    assert json.loads(again.stdout)["created"] is False


def test_a_caller_the_api_does_not_allow_is_refused_and_exits_1(
    node_modules: Path, producer_env: dict[str, str], api_rig: ApiRig
) -> None:
    env = {**producer_env, "DEFERRED_JOBS_CALLER": "stranger@test-project.iam.gserviceaccount.com"}
    done = run_node(["producer.js", "media-1", "decision-1"], env)
    assert done.returncode == 1, done.stdout + done.stderr
    last = log_lines(done.stderr)[-1]
    assert last["severity"] == "ERROR" and last["status"] == "PERMISSION_DENIED"
    assert list(api_rig.client.collection("jobs").stream()) == []


@pytest.mark.xdist_group("local_stack")  # a whole local stack: one at a time
def test_the_producer_works_against_the_local_stack(node_modules: Path, tmp_path: Path) -> None:
    """`make run` (python -m services.local) serves the api behind the local Cloud Run front
    end; its env file is all the producer needs (api URL, local issuer, allowed caller)."""
    environ = {k: v for k, v in os.environ.items() if not k.endswith("_EMULATOR_HOST")}
    argv = [sys.executable, "-m", "services.local", "--free-ports", "--no-demo"]
    stack = subprocess.Popen(
        [*argv, "--log-dir", str(tmp_path)],
        cwd=ROOT,
        env=environ,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        env_file = tmp_path / "env"
        deadline = time.monotonic() + 90
        while not env_file.exists():
            assert stack.poll() is None and time.monotonic() < deadline, stack.stderr
            time.sleep(0.2)
        exports = dict(
            line.removeprefix("export ").split("=", 1)
            for line in env_file.read_text().splitlines()
            if line.startswith("export ")
        )
        done = run_node(["producer.js", "media-local", "decision-local"], exports)
        assert done.returncode == 0, done.stdout + done.stderr
        summary = json.loads(done.stdout)
        assert (summary["read_state"], summary["final_state"]) == ("deferred", "cancelled")
        # The front end answered this one (Cloud Run's 403 page), not the api's JSON 401.
        unauthenticated = requests.get(exports["DEFERRED_JOBS_API_URL"] + "/v1/jobs/x", timeout=30)
    finally:
        stack.send_signal(signal.SIGINT)
        out, _ = stack.communicate(timeout=30)
    assert stack.returncode == 0
    assert (unauthenticated.status_code, "<title>" in unauthenticated.text) == (403, True)
    [api_line] = [line for line in out.splitlines() if line.startswith("api ")]
    assert "behind the local Cloud Run front end" in api_line
