"""`python -m emulators.firestore`: serves the client, stops on signals, refuses busy ports."""

from __future__ import annotations

import re
import signal
import socket
import subprocess
import sys
from typing import Any

import pytest
from google.cloud import firestore


def _launch(*args: str) -> subprocess.Popen[str]:
    return subprocess.Popen(
        [sys.executable, "-m", "emulators.firestore", "--host", "127.0.0.1", *args],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )


@pytest.mark.parametrize("stop_signal", [signal.SIGINT, signal.SIGTERM])
def test_cli_serves_the_client_and_stops_cleanly_on_signal(
    monkeypatch: pytest.MonkeyPatch, stop_signal: signal.Signals
) -> None:
    process = _launch("--port", "0")
    try:
        assert process.stdout is not None
        line = process.stdout.readline()
        match = re.search(r"listening on (127\.0\.0\.1:\d+); admin on (http://\S+)", line)
        assert match, line
        monkeypatch.setenv("FIRESTORE_EMULATOR_HOST", match.group(1))
        client: Any = firestore.Client(project="cli")
        ref = client.collection("jobs").document("a")
        ref.set({"x": 1})
        assert ref.get().get("x") == 1
        client.close()
    finally:
        process.send_signal(stop_signal)
        out, err = process.communicate(timeout=30)
    assert process.returncode == 0, err
    assert "stopped" in out


def test_cli_exits_with_code_2_when_the_port_is_in_use() -> None:
    with socket.socket() as busy:
        busy.bind(("127.0.0.1", 0))
        busy.listen()
        port = busy.getsockname()[1]
        process = _launch("--port", str(port), "--admin-port", "0")
        _, err = process.communicate(timeout=30)
    assert process.returncode == 2
    assert "in use" in err


def _free_port_pair() -> int:
    """A port P such that P and P + 1 are both free right now."""
    for _ in range(50):
        with socket.socket() as first, socket.socket() as second:
            first.bind(("127.0.0.1", 0))
            port = first.getsockname()[1]
            try:
                second.bind(("127.0.0.1", port + 1))
            except OSError:
                continue
            return port
    raise RuntimeError("no free pair of ports")


def test_cli_admin_port_defaults_to_port_plus_one() -> None:
    import json
    import urllib.request

    port = _free_port_pair()
    process = _launch("--port", str(port))
    try:
        assert process.stdout is not None
        line = process.stdout.readline()
        assert f"admin on http://127.0.0.1:{port + 1}" in line, line
        url = f"http://127.0.0.1:{port + 1}/stats"
        with urllib.request.urlopen(url, timeout=10) as response:
            assert json.loads(response.read())["document_reads"] == 0
    finally:
        process.send_signal(signal.SIGTERM)
        process.communicate(timeout=30)
    assert process.returncode == 0
