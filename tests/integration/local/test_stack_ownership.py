"""One local stack per directory, logs that are appended, and the env file a shell sources:
the README's snippet and docs/local.md's `source .local/env; jobsctl stats` run verbatim."""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest

from services.local.lock import StackLock, StackLocked
from services.local.stack import Supervisor
from services.local.system import ROOT

# The subprocess stacks are heavy (three process groups each): never two at once.
pytestmark = pytest.mark.xdist_group("local_stack")

HOLDER = """
import sys, time
from pathlib import Path
from services.local.lock import StackLock
with StackLock(Path(sys.argv[1])):
    print("locked", flush=True)
    time.sleep(600)
"""


@contextmanager
def _lock_held(directory: Path) -> Iterator[subprocess.Popen[str]]:
    """Another process holding the directory's lock, as a running stack does."""
    with subprocess.Popen(
        [sys.executable, "-c", HOLDER, str(directory)],
        cwd=ROOT,
        stdout=subprocess.PIPE,
        text=True,
    ) as holder:
        assert holder.stdout is not None and holder.stdout.readline().strip() == "locked"
        try:
            yield holder
        finally:
            holder.kill()


def test_a_second_stack_in_the_same_directory_is_refused_naming_the_owner(
    tmp_path: Path,
) -> None:
    (tmp_path / "env").write_text("export FIRST=1\n")
    (tmp_path / "scan.log").write_text("the first stack's log\n")
    with _lock_held(tmp_path) as holder:
        proc = subprocess.run(
            [sys.executable, "-m", "services.local", "--free-ports", "--log-dir", str(tmp_path)],
            cwd=ROOT,
            capture_output=True,
            text=True,
            timeout=60,
            check=False,
        )
    assert proc.returncode == 2, proc.stderr
    assert f"a local stack (pid {holder.pid}) already runs with {tmp_path}" in proc.stderr
    assert "--log-dir" in proc.stderr and "Traceback" not in proc.stderr
    # The running stack's files are untouched.
    assert (tmp_path / "env").read_text() == "export FIRST=1\n"
    assert (tmp_path / "scan.log").read_text() == "the first stack's log\n"
    assert not (tmp_path / "emulators.log").exists()


def test_the_lock_is_free_again_once_its_owner_is_gone_however_it_died(tmp_path: Path) -> None:
    with _lock_held(tmp_path) as holder:
        with pytest.raises(StackLocked, match=f"pid {holder.pid}"):
            StackLock(tmp_path).acquire()
        holder.kill()  # SIGKILL: no cleanup runs; the kernel drops the flock
        holder.wait(10)
    with StackLock(tmp_path) as lock:
        assert lock.path.read_text().strip() == str(os.getpid())


def test_a_childs_log_is_appended_and_its_tail_is_this_runs_only(tmp_path: Path) -> None:
    supervisor = Supervisor(tmp_path)
    for word in ("first", "second"):
        child = supervisor.start("echo", [sys.executable, "-c", f"print('{word} run')"])
        child.process.wait(10)
        supervisor.stop_all()
    text = (tmp_path / "echo.log").read_bytes()
    assert text == b"first run\nsecond run\n"  # appended, and no NUL bytes
    assert child.log_tail() == "second run"


def test_a_timeout_that_is_not_a_positive_number_is_a_usage_error(tmp_path: Path) -> None:
    for value in ("0", "-5", "nan"):
        proc = subprocess.run(
            [*(sys.executable, "-m", "services.local", "--free-ports"), "--timeout", value],
            cwd=ROOT,
            capture_output=True,
            text=True,
            timeout=60,
            check=False,
        )
        assert proc.returncode == 2, value
        assert "--timeout must be a number of seconds above 0" in proc.stderr, value


def _readme_snippet() -> str:
    readme = (ROOT / "README.md").read_text()
    section = readme.split("## Schedule a job", 1)[1].split("\n## ", 1)[0]
    assert "```sh\nsource .local/env\n```" in section
    return re.findall(r"```python\n(.*?)```", section, flags=re.DOTALL)[0]


def _wait_for(proc: subprocess.Popen[str], prefix: str, timeout_s: float = 90) -> list[str]:
    assert proc.stdout is not None
    lines: list[str] = []
    deadline = time.monotonic() + timeout_s
    while not any(line.startswith(prefix) for line in lines):
        assert time.monotonic() < deadline and proc.poll() is None, "".join(lines)
        lines.append(proc.stdout.readline())
    return lines


def _in_sourced_shell(env_file: Path, command: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    # A clean shell: nothing from this test's environment but HOME; the env file does the rest.
    return subprocess.run(
        ["bash", "-c", f"source {env_file} && {command}"],
        cwd=cwd,
        env={"HOME": os.environ.get("HOME", "/tmp"), "PATH": "/usr/bin:/bin"},
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )


def test_the_readme_snippet_and_jobsctl_run_verbatim_in_a_shell_that_sourced_the_env(
    tmp_path: Path,
) -> None:
    snippet = tmp_path / "snippet.py"
    snippet.write_text(_readme_snippet())
    env = {k: v for k, v in os.environ.items() if not k.endswith("_EMULATOR_HOST")}
    # Started with SIGINT ignored, as a shell starts a background job (`make run &`).
    proc = subprocess.Popen(
        [
            *(sys.executable, "-m", "services.local", "--free-ports"),
            *("--log-dir", str(tmp_path / "stack")),
        ],
        cwd=ROOT,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_IGN),
    )
    try:
        _wait_for(proc, "demo done")
        env_file = tmp_path / "stack" / "env"
        # Run from elsewhere than the repository: the env file alone must be enough.
        runs = [_in_sourced_shell(env_file, f"python {snippet}", tmp_path) for _ in range(2)]
        stats = _in_sourced_shell(env_file, "jobsctl stats --json", tmp_path)
    finally:
        proc.send_signal(signal.SIGINT)
        try:
            _, err = proc.communicate(timeout=30)
        except subprocess.TimeoutExpired:
            proc.terminate()  # SIGTERM still stops every child; then fail
            proc.communicate(timeout=30)
            raise
    for run in runs:
        assert run.returncode == 0, run.stderr
        assert run.stdout.strip() == "deferred"  # the second run is a no-op, not a conflict
    assert stats.returncode == 0, stats.stderr
    assert '"deferred": 2' in stats.stdout  # the demo's 30-day job and the README's
    assert proc.returncode == 0, err
    assert "killing it" not in err  # every child stopped within its grace period
