"""docs/api.md's "Locally" snippet runs verbatim against `python -m services.local`: a token
from the local issuer for the api URL passes the api's Cloud Run front end, and the job is
scheduled."""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[3]

# One local stack at a time with the other stack tests.
pytestmark = pytest.mark.xdist_group("local_stack")


def _snippet() -> str:
    text = (ROOT / "docs" / "api.md").read_text()
    section = text.split("## Locally", 1)[1].split("\n## ", 1)[0]
    [block] = re.findall(r"```sh\n(.*?)```", section, re.DOTALL)
    return block


def test_the_local_snippet_schedules_a_job_through_the_front_end(tmp_path: Path) -> None:
    snippet = _snippet()
    assert snippet.startswith("source .local/env\n")
    environ = {k: v for k, v in os.environ.items() if not k.endswith("_EMULATOR_HOST")}
    log_dir = tmp_path / ".local"
    argv = [sys.executable, "-m", "services.local", "--free-ports", "--no-demo"]
    stack = subprocess.Popen(
        [*argv, "--log-dir", str(log_dir)],
        cwd=ROOT,
        env=environ,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        deadline = time.monotonic() + 90
        while not (log_dir / "env").exists():
            assert stack.poll() is None and time.monotonic() < deadline, stack.stderr
            time.sleep(0.2)
        done = subprocess.run(
            ["bash", "-e", "-c", snippet],
            cwd=tmp_path,
            env=environ,
            capture_output=True,
            text=True,
            timeout=60,
            check=False,
        )
    finally:
        stack.send_signal(signal.SIGINT)
        out, _ = stack.communicate(timeout=30)
    assert done.returncode == 0, done.stdout + done.stderr
    job = json.loads(done.stdout)
    assert (job["state"], job["subject"]) == ("deferred", "media-1"), job
    assert "cloud run ready: deferred-jobs-api" in (log_dir / "api.log").read_text()
    assert stack.returncode == 0, out
