"""`make run` with a user's plug-in installed beside the project (here: a distribution on
PYTHONPATH, as pip would leave it in site-packages): the stack's banner lists its action, a job
scheduled with jobsctl (params checked at schedule time) runs in the local worker, and the
record holds the plug-in's own result."""

from __future__ import annotations

import json
import os
import shlex
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from services.cli.app import main as jobsctl
from services.local.system import ROOT
from tests.fixtures.plugin import trials_plugin  # noqa: F401  (the fixture)

TIMEOUT_S = 90
pytestmark = pytest.mark.xdist_group("local_stack")


def _exports(env_file: Path) -> dict[str, str]:
    exports = {}
    for line in env_file.read_text().splitlines():
        if line.startswith("export ") and not line.startswith("export PATH="):
            key, _, value = line.removeprefix("export ").partition("=")
            [exports[key]] = shlex.split(value)
    return exports


def test_a_plugin_action_runs_in_make_run(
    trials_plugin: Path,  # noqa: F811
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    env = {k: v for k, v in os.environ.items() if not k.endswith("_EMULATOR_HOST")}
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(trials_plugin), env.get("PYTHONPATH")]))
    logs = tmp_path / "logs"
    proc = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "services.local",
            "--free-ports",
            "--fresh",
            "--no-demo",
            "--log-dir",
            str(logs),
            "--test-cadence-s",
            "1",
        ],
        cwd=ROOT,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    assert proc.stdout is not None
    lines: list[str] = []
    deadline = time.monotonic() + TIMEOUT_S
    try:
        while not any(line.startswith("in another shell") for line in lines):
            assert time.monotonic() < deadline and proc.poll() is None, "".join(lines)
            lines.append(proc.stdout.readline())
        assert "trials.expire" in "".join(lines), "".join(lines)
        for key, value in _exports(logs / "env").items():
            monkeypatch.setenv(key, value)

        capsys.readouterr()
        bad = jobsctl(["schedule", "--action", "trials.expire", "--job-id", "trial-bad",
                       "--subject", "trial-1", "--param", "trial=t-1"])  # fmt: skip
        assert bad == 2 and "params.trial_id" in capsys.readouterr().err
        code = jobsctl(["schedule", "--action", "trials.expire", "--job-id", "trial-1",
                        "--subject", "trial-1", "--param", "trial_id=t-1"])  # fmt: skip
        assert code == 0, capsys.readouterr().err
        state = ""
        while state != "completed":
            assert time.monotonic() < deadline and proc.poll() is None, "".join(lines)
            time.sleep(0.5)
            capsys.readouterr()
            assert jobsctl(["show", "trial-1", "--json"]) == 0
            job = json.loads(capsys.readouterr().out)["job"]
            state = job["state"]
            assert state not in {"failed", "cancelled"}, job
    finally:
        proc.send_signal(signal.SIGINT)
        _, err = proc.communicate(timeout=30)
    assert proc.returncode == 0, err
    assert job["result"]["outcome"] == "expired"
    assert job["result"]["details"] == {"trial": "t-1"}
    assert job["attempt"] == 1
