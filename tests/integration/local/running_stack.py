"""`make run` (`python -m services.local`) as a test drives it: started on free ports with a log
directory of the test's own, its `export` lines read back, a job followed with jobsctl until it
completes, and stopped with SIGINT (which must end it with exit code 0)."""

from __future__ import annotations

import contextlib
import json
import os
import shlex
import signal
import subprocess
import sys
import time
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

from services.cli.app import main as jobsctl
from services.local.system import ROOT

TIMEOUT_S = 90


@dataclass
class RunningStack:
    """A started stack: its process, the lines it printed up to its banner, its env file."""

    proc: subprocess.Popen[str]
    log_dir: Path
    deadline: float
    lines: list[str] = field(default_factory=list)

    @property
    def banner(self) -> str:
        return "".join(self.lines)

    def exports(self) -> dict[str, str]:
        """The `export` lines of the env file it wrote (PATH left out)."""
        exports = {}
        for line in (self.log_dir / "env").read_text().splitlines():
            if line.startswith("export ") and not line.startswith("export PATH="):
                key, _, value = line.removeprefix("export ").partition("=")
                [exports[key]] = shlex.split(value)
        return exports

    def alive(self) -> None:
        assert time.monotonic() < self.deadline and self.proc.poll() is None, self.banner

    def completed(self, job_id: str, capsys: pytest.CaptureFixture[str]) -> dict[str, Any]:
        """The job's record once `jobsctl show` sees it completed (never failed or cancelled)."""
        while True:
            self.alive()
            capsys.readouterr()
            assert jobsctl(["show", job_id, "--json"]) == 0
            job: dict[str, Any] = json.loads(capsys.readouterr().out)["job"]
            assert job["state"] not in {"failed", "cancelled"}, job
            if job["state"] == "completed":
                return job
            time.sleep(0.5)


@contextlib.contextmanager
def local_stack(
    log_dir: Path, *options: str, env: Mapping[str, str] | None = None
) -> Iterator[RunningStack]:
    """A fresh stack without the demo, at a one-second test cadence (not production's), up to
    its banner; stopped with SIGINT after the block, which must exit 0."""
    environment = dict(os.environ if env is None else env)
    environment = {k: v for k, v in environment.items() if not k.endswith("_EMULATOR_HOST")}
    proc = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "services.local",
            "--free-ports",
            "--fresh",
            "--no-demo",
            "--log-dir",
            str(log_dir),
            "--test-cadence-s",
            "1",
            *options,
        ],
        cwd=ROOT,
        env=environment,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    assert proc.stdout is not None
    stack = RunningStack(proc, log_dir, time.monotonic() + TIMEOUT_S)
    try:
        while not any(line.startswith("in another shell") for line in stack.lines):
            stack.alive()
            stack.lines.append(proc.stdout.readline())
        yield stack
    finally:
        proc.send_signal(signal.SIGINT)
        _, err = proc.communicate(timeout=30)
    assert proc.returncode == 0, err
