"""`python -m emulators.cloudrun -- COMMAND`: the command runs as Cloud Run runs a container."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from collections.abc import Iterator
from typing import Any

import pytest
import requests

from emulators.cloudrun.__main__ import READY_LINE
from emulators.launcher import free_port

# A container that answers every request with its environment and the headers it got.
CONTAINER = r"""
import json, os
from http.server import BaseHTTPRequestHandler, HTTPServer
class H(BaseHTTPRequestHandler):
    def do_POST(self):
        self.rfile.read(int(self.headers.get("Content-Length") or 0))
        body = json.dumps({"env": {k: v for k, v in os.environ.items() if k[:2] == "K_"
                                   or k == "PORT"}, "headers": dict(self.headers)}).encode()
        self.send_response(200); self.send_header("Content-Length", str(len(body)))
        self.end_headers(); self.wfile.write(body)
    def log_message(self, *a): pass
HTTPServer(("127.0.0.1", int(os.environ["PORT"])), H).serve_forever()
"""
INVOKER = "pusher@p.iam.gserviceaccount.com"


def run_front_end(oidc: Any, *args: str) -> subprocess.Popen[str]:
    return subprocess.Popen(
        [
            sys.executable,
            "-m",
            "emulators.cloudrun",
            "--service=media-worker",
            f"--port={free_port('127.0.0.1')}",
            f"--certs-url={oidc.certs_url}",
            f"--invoker={INVOKER}",
            *args,
        ],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env={k: v for k, v in os.environ.items() if not k.startswith("K_")},
    )


@pytest.fixture
def served(oidc_server: Any) -> Iterator[tuple[subprocess.Popen[str], str]]:
    proc = run_front_end(oidc_server, "--", sys.executable, "-c", CONTAINER)
    assert proc.stdout is not None
    line = proc.stdout.readline()
    try:
        assert line.startswith(READY_LINE), line
        url = line.split(" at ", 1)[1].split()[0]
        yield proc, url
    finally:
        proc.terminate()
        proc.communicate(timeout=30)


def test_the_container_gets_port_and_cloud_runs_k_variables(
    served: tuple[subprocess.Popen[str], str], oidc_server: Any
) -> None:
    _, url = served
    token = oidc_server.issuer.mint(url, INVOKER)
    response = requests.post(url, headers={"Authorization": f"Bearer {token}"}, timeout=30)
    assert response.status_code == 200
    env = response.json()["env"]
    assert env["K_SERVICE"] == env["K_CONFIGURATION"] == "media-worker"
    assert env["K_REVISION"].startswith("media-worker-00001-")
    assert env["PORT"] != url.rsplit(":", 1)[1]  # the container's own port, not the service URL's
    assert response.json()["headers"]["Authorization"].endswith(".SIGNATURE_REMOVED_BY_GOOGLE")


def test_sigterm_stops_the_front_end_and_its_container(
    served: tuple[subprocess.Popen[str], str], oidc_server: Any
) -> None:
    proc, url = served
    token = oidc_server.issuer.mint(url, INVOKER)
    port = requests.post(url, headers={"Authorization": f"Bearer {token}"}, timeout=30).json()[
        "env"
    ]["PORT"]
    proc.terminate()
    assert proc.wait(timeout=30) == 0
    with pytest.raises(requests.ConnectionError):
        requests.post(f"http://127.0.0.1:{port}", timeout=5)


def test_a_container_that_never_listens_fails_startup_naming_port(oidc_server: Any) -> None:
    proc = run_front_end(
        oidc_server,
        "--startup-timeout=1",
        "--",
        sys.executable,
        "-c",
        "import time; time.sleep(30)",
    )
    started = time.monotonic()
    out, err = proc.communicate(timeout=60)
    assert proc.returncode == 1
    assert "failed to start and listen on the port defined by the PORT" in err
    assert time.monotonic() - started < 30  # the sleeping container was stopped, not waited for
    assert READY_LINE not in out


def test_a_container_that_exits_takes_the_front_end_down_with_status_1(
    oidc_server: Any,
) -> None:
    # Two connections, then exit: the startup probe's, then the one request below.
    script = CONTAINER.replace(
        'HTTPServer(("127.0.0.1", int(os.environ["PORT"])), H).serve_forever()',
        'server = HTTPServer(("127.0.0.1", int(os.environ["PORT"])), H)\n'
        "for _ in range(2):\n    server.handle_request()",
    )
    assert script != CONTAINER
    proc = run_front_end(oidc_server, "--", sys.executable, "-c", script)
    try:
        assert proc.stdout is not None
        line = proc.stdout.readline()
        assert line.startswith(READY_LINE)
        url = line.split(" at ", 1)[1].split()[0]
        token = oidc_server.issuer.mint(url, INVOKER)
        response = requests.post(url, headers={"Authorization": f"Bearer {token}"}, timeout=30)
        assert response.status_code == 200
        _, err = proc.communicate(timeout=30)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.communicate()
    assert proc.returncode == 1
    assert "the container of media-worker exited with 0" in err


@pytest.mark.parametrize(
    ("args", "complaint"),
    [
        (["--upstream=http://127.0.0.1:1", "--", "true"], "not both"),
        ([], "not both"),
        (["--timeout=0", "--", "true"], "--timeout"),
        (["--concurrency=1001", "--", "true"], "--concurrency"),
    ],
)
def test_bad_usage_exits_2_naming_the_problem(
    oidc_server: Any, args: list[str], complaint: str
) -> None:
    proc = run_front_end(oidc_server, *args)
    _, err = proc.communicate(timeout=30)
    assert proc.returncode == 2
    assert complaint in err


def test_the_invoker_check_needs_an_issuer_and_invokers_unless_disabled() -> None:
    proc = subprocess.run(
        [sys.executable, "-m", "emulators.cloudrun", "--service=s", "--", "true"],
        capture_output=True,
        text=True,
        timeout=30,
    )
    assert proc.returncode == 2
    assert "--invoker-iam-disabled" in proc.stderr


def test_the_front_end_env_names_are_the_services_reading_them() -> None:
    # The container contract is read back by the worker (K_REVISION) and the settings.
    from emulators.cloudrun import contract
    from services.edge import auth

    assert contract.SIGNATURE_REMOVED == auth.SIGNATURE_REMOVED
    assert contract.SERVERLESS_AUTHORIZATION == auth.SERVERLESS_AUTHORIZATION
    assert contract.AUTHORIZATION == auth.AUTHORIZATION
    assert json.dumps(sorted(contract.GOOGLE_ISSUERS)) == json.dumps(sorted(auth.GOOGLE_ISSUERS))


# A container that exits with the code in its first argument when it gets SIGTERM.
EXITS_ON_TERM = r"""
import os, signal, socket, sys
server = socket.socket(); server.bind(("127.0.0.1", int(os.environ["PORT"]))); server.listen()
signal.signal(signal.SIGTERM, lambda *_: sys.exit(int(sys.argv[1])))
signal.pause()
"""


@pytest.mark.parametrize(("code", "warned"), [(0, False), (3, True)])
def test_the_stop_logs_a_container_that_does_not_exit_cleanly_after_sigterm(
    code: int, warned: bool, caplog: pytest.LogCaptureFixture
) -> None:
    from emulators.cloudrun.container import Container

    container = Container.run([sys.executable, "-c", EXITS_ON_TERM, str(code)], "svc")
    with caplog.at_level("WARNING", logger="emulators.cloudrun.container"):
        container.stop()
    assert container.process.returncode == code
    lines = [r.getMessage() for r in caplog.records if "after SIGTERM" in r.getMessage()]
    assert lines == (
        [f"container pid {container.process.pid} exited {code} after SIGTERM"] if warned else []
    )
