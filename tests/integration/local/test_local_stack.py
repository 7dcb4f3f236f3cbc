"""Smoke test of `python -m services.local`: the demo completes and stopping leaves nothing."""

from __future__ import annotations

import os
import re
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest

from services.cli.app import main as jobsctl
from services.local.demo import plan_demo
from services.local.system import ROOT

TIMEOUT_S = 90
# The first scan attempt is the forced run `make run` makes at start (like `gcloud scheduler
# jobs run`), carrying the next scheduled time.
FIRST_RUN_CLAIMS_THE_DEMO = r"^scan #1 \(forced \d\d:\d\d:00\): claimed 3 published 3"
# Each test runs a whole stack (three process groups): one at a time under pytest-xdist.
pytestmark = pytest.mark.xdist_group("local_stack")


def _start(log_dir: Path, *extra: str) -> subprocess.Popen[str]:
    env = {k: v for k, v in os.environ.items() if not k.endswith("_EMULATOR_HOST")}
    return subprocess.Popen(
        [
            sys.executable,
            "-m",
            "services.local",
            "--free-ports",
            "--log-dir",
            str(log_dir),
            "--timeout",
            "60",
            *extra,
        ],
        cwd=ROOT,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )


def _stopped_pids(output: str) -> dict[str, int]:
    match = re.search(r"^stopped: (.+)$", output, flags=re.MULTILINE)
    assert match, output
    return {name: int(pid) for name, pid in (p.split() for p in match.group(1).split(", "))}


def _group_alive(pgid: int) -> bool:
    try:
        os.killpg(pgid, 0)
    except ProcessLookupError:
        return False
    return True


def _assert_all_gone(pids: dict[str, int]) -> None:
    assert set(pids) == {"emulators", "scan", "worker", "api", "console"}
    deadline = time.monotonic() + 5
    while any(_group_alive(p) for p in pids.values()) and time.monotonic() < deadline:
        time.sleep(0.05)  # orphaned grandchildren are reaped by init asynchronously
    assert [name for name, pid in pids.items() if _group_alive(pid)] == []


def test_exit_when_done_completes_the_demo_and_stops_every_child(tmp_path: Path) -> None:
    proc = _start(tmp_path, "--exit-when-done")
    out, err = proc.communicate(timeout=TIMEOUT_S)
    assert proc.returncode == 0, err + out
    # The default cadence is the stack's (*/5): the forced run at start claims the demo's jobs.
    assert "scheduler: job deferred-jobs-scan POSTs" in out and "'* * * * *' (Etc/UTC)" in out
    assert re.search(FIRST_RUN_CLAIMS_THE_DEMO, out, flags=re.MULTILINE), out
    assert "demo done: 3/3 due jobs completed, 3/3 source files deleted" in out
    _assert_all_gone(_stopped_pids(out))


def test_a_second_run_in_the_same_log_directory_completes_the_demo_too(tmp_path: Path) -> None:
    # `make run` twice on one machine reuses .local/: the first run's logs must not make the
    # second believe its emulators are ready before they are.
    for _ in range(2):
        proc = _start(tmp_path, "--exit-when-done")
        out, err = proc.communicate(timeout=TIMEOUT_S)
        assert proc.returncode == 0, err + out
        assert "demo done: 3/3 due jobs completed" in out
        _assert_all_gone(_stopped_pids(out))


@pytest.mark.parametrize("signum", [signal.SIGINT, signal.SIGTERM], ids=["ctrl-c", "sigterm"])
def test_demo_leaves_the_later_and_cancelled_jobs_alone_and_a_signal_stops_it(
    signum: signal.Signals,
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    proc = _start(tmp_path)
    assert proc.stdout is not None
    lines: list[str] = []
    deadline = time.monotonic() + TIMEOUT_S
    try:
        while not any(line.startswith("demo done") for line in lines):
            assert time.monotonic() < deadline and proc.poll() is None, "".join(lines)
            lines.append(proc.stdout.readline())
        # While it runs, read the jobs back through jobsctl with the env file it wrote.
        for line in (tmp_path / "env").read_text().splitlines():
            key, _, value = line.removeprefix("export ").partition("=")
            monkeypatch.setenv(key, value)
        states = _job_states(capsys)
    finally:
        proc.send_signal(signum)
        rest, err = proc.communicate(timeout=30)
    assert proc.returncode == 0, err
    by_expectation = {job.job_id: job.expected.value for job in plan_demo().jobs}
    assert states == by_expectation
    _assert_all_gone(_stopped_pids("".join(lines) + rest))


def _job_states(capsys: pytest.CaptureFixture[str]) -> dict[str, str]:
    import json

    capsys.readouterr()
    assert jobsctl(["list", "--all", "--json"]) == 0
    jobs: list[dict[str, Any]] = json.loads(capsys.readouterr().out)["jobs"]
    return {job["job_id"]: job["state"] for job in jobs}


def test_a_port_in_use_is_a_clear_error_before_anything_starts(tmp_path: Path) -> None:
    with socket.socket() as holder:
        holder.bind(("127.0.0.1", 0))
        holder.listen()
        port = holder.getsockname()[1]
        proc = subprocess.run(
            [
                sys.executable,
                "-m",
                "services.local",
                "--firestore-port",
                str(port),
                "--log-dir",
                str(tmp_path),
            ],
            cwd=ROOT,
            capture_output=True,
            text=True,
            timeout=60,
            check=False,
        )
    assert proc.returncode == 2
    assert f"port {port} for firestore on 127.0.0.1 is already in use" in proc.stderr
    assert "--firestore-port" in proc.stderr
    assert not (tmp_path / "emulators.log").exists()


def test_official_without_gcloud_says_how_to_get_it(tmp_path: Path) -> None:
    env = {**os.environ, "PATH": str(Path(sys.executable).parent)}  # no gcloud on it
    proc = subprocess.run(
        [
            sys.executable,
            "-m",
            "services.local",
            "--official",
            "--free-ports",
            "--log-dir",
            str(tmp_path),
        ],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert proc.returncode == 2
    assert "--official needs the gcloud CLI" in proc.stderr


def test_a_test_cadence_below_one_second_still_completes_the_demo(tmp_path: Path) -> None:
    # TEST CADENCE (not Cloud Scheduler's): the scan refuses a budget interval below 1 s, so
    # under a 0.5 s cadence every run once answered 500 and the demo never finished.
    proc = _start(tmp_path, "--exit-when-done", "--test-cadence-s", "0.5")
    out, err = proc.communicate(timeout=TIMEOUT_S)
    assert proc.returncode == 0, err + out
    assert "every 0.5 s (TEST CADENCE, not Cloud Scheduler's)" in out
    assert "FAILED" not in out
    assert "demo done: 3/3 due jobs completed" in out
    _assert_all_gone(_stopped_pids(out))


def test_a_test_cadence_that_is_not_a_finite_positive_number_is_a_usage_error(
    tmp_path: Path,
) -> None:
    for every in ("nan", "inf", "0", "-1"):
        proc = subprocess.run(
            [
                *(sys.executable, "-m", "services.local", "--free-ports"),
                *("--test-cadence-s", every, "--log-dir", str(tmp_path)),
            ],
            cwd=ROOT,
            capture_output=True,
            text=True,
            timeout=60,
            check=False,
        )
        assert proc.returncode == 2, every
        assert "--test-cadence-s must be" in proc.stderr, every
        assert not (tmp_path / "emulators.log").exists(), every


def test_the_old_scan_every_option_is_gone(tmp_path: Path) -> None:
    proc = subprocess.run(
        [*(sys.executable, "-m", "services.local", "--scan-every", "5")],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert proc.returncode == 2
    assert "unrecognized arguments: --scan-every" in proc.stderr


def test_a_log_dir_that_cannot_be_a_directory_is_a_usage_error(tmp_path: Path) -> None:
    taken = tmp_path / "a-file"
    taken.write_text("not a directory")
    proc = subprocess.run(
        [sys.executable, "-m", "services.local", "--free-ports", "--log-dir", str(taken)],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert proc.returncode == 2, proc.stderr[-500:]
    assert "Traceback" not in proc.stderr
    assert f"--log-dir {taken}" in proc.stderr


def test_a_sharded_stack_completes_the_demo_with_that_index_set_everywhere(
    tmp_path: Path,
) -> None:
    proc = _start(tmp_path, "--exit-when-done", "--shards", "4")
    out, err = proc.communicate(timeout=TIMEOUT_S)
    assert proc.returncode == 0, err + out
    # The emulator refuses every unsharded query with this index set, as Firestore would:
    # the demo completing means the scan, worker and seeding all ran sharded.
    assert "emulators: firestore strict: indexes from services.jobs.schema?shards=4" in out
    assert "demo done: 3/3 due jobs completed, 3/3 source files deleted" in out
    assert "export JOBS_SHARDS=4" in (tmp_path / "env").read_text().splitlines()
    _assert_all_gone(_stopped_pids(out))
