"""`python -m services.edge.server --target=scan --source=services/scan/main.py`
(functions-framework's app and server) serves the scan: settings from JOBS_* variables, real
clients on the emulators, a real token from the local issuer."""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
import requests

from tests.integration.scan.conftest import AUDIENCE, INVOKER, TOPIC, Rig

ROOT = Path(__file__).resolve().parents[3]


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
    return port


class Served:
    """A functions-framework process serving the scan target."""

    def __init__(self, process: subprocess.Popen[str], url: str) -> None:
        self.process = process
        self.url = url
        self._output: str | None = None

    def stop(self) -> str:
        """Terminate the server (by its PID) and return everything it wrote."""
        if self._output is None:
            self.process.terminate()
            try:
                self._output, _ = self.process.communicate(timeout=10)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self._output, _ = self.process.communicate()
        return self._output

    def json_lines(self) -> list[dict[str, Any]]:
        lines = []
        for line in self.stop().splitlines():
            if line.startswith("{"):
                lines.append(json.loads(line))
        return lines


@pytest.fixture
def rig(scan_rig: Callable[..., Rig]) -> Rig:
    # Direct: the entry point alone (make run's test covers it behind the front end).
    return scan_rig(cloud_run=False)


@pytest.fixture
def served(rig: Rig) -> Iterator[Served]:
    port = free_port()
    env = {key: value for key, value in os.environ.items() if not key.startswith("JOBS_")}
    env.update(
        {
            "JOBS_PROJECT": rig.project,
            "JOBS_TOPIC": TOPIC,
            "JOBS_SCAN_AUDIENCE": AUDIENCE,
            "JOBS_SCAN_ALLOWED_INVOKERS": INVOKER,
            "JOBS_OIDC_CERTS_URL": rig.oidc.certs_url,
            "JOBS_SCAN_MAX_PER_RUN": "7",
            "JOBS_METRICS": "log",
        }
    )
    assert env["FIRESTORE_EMULATOR_HOST"] and env["PUBSUB_EMULATOR_HOST"]
    process = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "services.edge.server",
            "--target=scan",
            "--source=services/scan/main.py",
            "--host=127.0.0.1",
            f"--port={port}",
        ],
        cwd=ROOT,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )
    server = Served(process, f"http://127.0.0.1:{port}/")
    try:
        deadline = time.monotonic() + 30
        while True:
            try:
                requests.get(server.url, timeout=1)
                break
            except (requests.ConnectionError, requests.ReadTimeout):
                # Not listening yet, or building the app on this first request under load.
                if process.poll() is not None or time.monotonic() > deadline:
                    output = server.stop()
                    raise AssertionError(f"functions-framework did not start: {output}") from None
                time.sleep(0.1)
        yield server
    finally:
        server.stop()


def test_the_functions_framework_target_runs_a_scan_and_logs_json(served: Served, rig: Rig) -> None:
    ids = rig.seed(10)
    trace = "5" * 32
    token = rig.token()
    refused = requests.post(served.url, timeout=30)
    response = requests.post(
        served.url,
        headers={
            "Authorization": f"Bearer {token}",
            "X-Cloud-Trace-Context": f"{trace}/7;o=1",
        },
        timeout=60,
    )
    assert refused.status_code == 401
    assert response.status_code == 200, response.text
    summary = response.json()
    assert (summary["claimed"], summary["published"], summary["budget"]) == (7, 7, 7)
    assert sum(rig.pull().values()) == 7
    assert rig.states(ids) == {"enqueued": 7, "deferred": 3}

    lines = served.json_lines()
    runs = [line for line in lines if line.get("event") == "scan_run"]
    assert len(runs) == 1
    assert runs[0]["run_id"] == summary["run_id"]
    assert runs[0]["published"] == 7
    assert runs[0]["logging.googleapis.com/trace"] == f"projects/{rig.project}/traces/{trace}"
    gauges = [line for line in lines if line.get("event") == "scan_gauges"]
    assert len(gauges) == 1 and gauges[0]["run_published"] == 7
    assert all(token.rsplit(".", 1)[1] not in json.dumps(line) for line in lines)
