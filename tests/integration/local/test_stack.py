"""The supervisor stops whole process groups: a child's own children never outlive the stack."""

from __future__ import annotations

import os
import socket
import sys
import time
from pathlib import Path

import pytest

from emulators.launcher import port_is_free
from services.local.stack import ChildDied, PortInUse, Supervisor
from services.local.system import Ports, check_ports

# A child that starts a grandchild (as gunicorn starts its workers), prints its PID, and waits.
SPAWNER = """
import subprocess, sys, time
grandchild = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(600)"])
print(grandchild.pid, flush=True)
time.sleep(600)
"""


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    return True


def _group_alive(pgid: int) -> bool:
    try:
        os.killpg(pgid, 0)
    except ProcessLookupError:
        return False
    return True


def _wait_for_line(path: Path) -> str:
    deadline = time.monotonic() + 20
    while time.monotonic() < deadline:
        text = path.read_text() if path.exists() else ""
        if text.strip():
            return text.strip().splitlines()[0]
        time.sleep(0.05)
    raise AssertionError(f"nothing in {path}")


def test_stop_all_ends_children_and_their_children(tmp_path: Path) -> None:
    supervisor = Supervisor(tmp_path)
    child = supervisor.start("spawner", [sys.executable, "-c", SPAWNER])
    grandchild = int(_wait_for_line(child.log_path))
    assert _alive(grandchild) and _group_alive(child.pid)

    supervisor.stop_all(grace_s=5)

    assert child.process.returncode is not None
    deadline = time.monotonic() + 5
    while _group_alive(child.pid) and time.monotonic() < deadline:
        time.sleep(0.05)  # the orphaned grandchild is reaped by init asynchronously
    assert not _group_alive(child.pid)
    assert supervisor.children == []


def test_a_child_that_ignores_sigterm_is_killed_after_the_grace_period(tmp_path: Path) -> None:
    stubborn = (
        "import signal, time; signal.signal(signal.SIGTERM, signal.SIG_IGN); "
        "print('ready', flush=True); time.sleep(600)"
    )
    supervisor = Supervisor(tmp_path)
    child = supervisor.start("stubborn", [sys.executable, "-c", stubborn])
    _wait_for_line(child.log_path)
    supervisor.stop_all(grace_s=0.5)
    assert child.process.returncode == -9


def test_a_dead_child_is_reported_with_its_log_tail(tmp_path: Path) -> None:
    supervisor = Supervisor(tmp_path)
    child = supervisor.start(
        "crasher", [sys.executable, "-c", "import sys; print('boom: bad config'); sys.exit(3)"]
    )
    child.process.wait()
    with pytest.raises(ChildDied, match=r"crasher \(pid \d+\) exited with code 3") as info:
        supervisor.check_alive()
    assert "boom: bad config" in str(info.value)
    supervisor.stop_all()


def test_a_port_in_use_is_named_with_its_flag() -> None:
    with socket.socket() as holder:
        holder.bind(("127.0.0.1", 0))
        holder.listen()
        port = holder.getsockname()[1]
        assert not port_is_free("127.0.0.1", port)
        with pytest.raises(PortInUse, match=f"port {port} for scan .* --scan-port"):
            check_ports(Ports(**{**Ports.all_free().__dict__, "scan": port}))
