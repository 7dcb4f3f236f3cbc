"""A port flag outside 0-65535 is a usage error (exit 2), never a traceback or another port."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from services.local.system import ROOT

FLAGS = [
    ("emulators", "--firestore-port"),
    ("emulators", "--oidc-port"),
    ("emulators.firestore", "--port"),
    ("emulators.firestore", "--admin-port"),
    ("emulators.pubsub", "--port"),
    ("emulators.pubsub", "--admin-port"),
    ("services.local", "--scan-port"),
]


@pytest.mark.parametrize(("module", "flag"), FLAGS)
def test_a_port_outside_the_tcp_range_is_a_usage_error(module: str, flag: str) -> None:
    for port in ("65536", "-1"):
        proc = subprocess.run(
            [sys.executable, "-m", module, f"{flag}={port}"],
            cwd=ROOT,
            capture_output=True,
            text=True,
            timeout=30,
            check=False,
        )
        assert proc.returncode == 2, (port, proc.stderr[-500:])
        assert "Traceback" not in proc.stderr
        assert f"{flag}: {port} is not a port (0-65535)" in proc.stderr


def test_firestore_on_the_last_port_needs_an_explicit_admin_port() -> None:
    proc = subprocess.run(
        [sys.executable, "-m", "emulators.firestore", "--port", "65535"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=30,
        check=False,
    )
    assert proc.returncode == 2, proc.stderr[-500:]
    assert "Traceback" not in proc.stderr
    assert "pass --admin-port" in proc.stderr


def test_an_env_file_that_cannot_be_written_is_an_error_naming_it(tmp_path: Path) -> None:
    target = tmp_path / "missing-dir" / "env"
    free = [f"--{name}-port=0" for name in ("firestore", "pubsub", "oidc", "storage")]
    # Every port free, the monitoring one too: a default port held by another test's process
    # would fail the start before the env file is tried.
    admin = ["--firestore-admin-port=0", "--pubsub-admin-port=0", "--monitoring-port=0"]
    proc = subprocess.run(
        [sys.executable, "-m", "emulators", *free, *admin, "--env-file", str(target)],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert proc.returncode == 2, proc.stderr[-500:]
    assert "Traceback" not in proc.stderr
    assert f"--env-file {target}" in proc.stderr
