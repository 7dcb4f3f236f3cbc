"""`make run --http-target NAME=URL`: an `http.request` job scheduled with jobsctl (reading the
env file the stack wrote) runs in the local worker, which calls a local target with an ID token
from the local OIDC issuer naming the worker's own service account; the target verifies it
against the issuer's certs and the audience, and the job completes."""

from __future__ import annotations

import json
import threading
from collections.abc import Iterator
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import google.auth.transport.requests
import google.oauth2.id_token
import pytest

from services.cli.app import main as jobsctl
from tests.integration.local.running_stack import local_stack

WORKER_EMAIL = "deferred-jobs-worker-rt@deferred-jobs-local.iam.gserviceaccount.com"
pytestmark = pytest.mark.xdist_group("local_stack")


@dataclass
class Target:
    """A target that verifies each call's token with the certs of the stack's issuer."""

    url: str = ""
    certs_url: str = ""
    calls: list[dict[str, Any]] = field(default_factory=list)


@pytest.fixture
def target() -> Iterator[Target]:
    state = Target()

    class Handler(BaseHTTPRequestHandler):
        def do_POST(self) -> None:
            length = int(self.headers.get("Content-Length") or 0)
            body = self.rfile.read(length) if length else b""
            token = (self.headers.get("Authorization") or "").removeprefix("Bearer ")
            try:
                claims = google.oauth2.id_token.verify_token(
                    token,
                    google.auth.transport.requests.Request(),
                    audience=state.url,
                    certs_url=state.certs_url,
                )
                verified: Any = claims
            except Exception as exc:  # recorded; the test asserts the token verified
                verified = f"{type(exc).__name__}: {exc}"
            state.calls.append(
                {"path": self.path, "headers": dict(self.headers), "body": body, "claims": verified}
            )
            ok = isinstance(verified, dict)
            answer = b'{"expired": true}' if ok else b'{"error": "bad token"}'
            self.send_response(200 if ok else 401)
            self.send_header("Content-Length", str(len(answer)))
            self.end_headers()
            self.wfile.write(answer)

        def log_message(self, format: str, *args: Any) -> None:
            return None

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    state.url = f"http://127.0.0.1:{server.server_address[1]}"
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield state
    finally:
        server.shutdown()
        server.server_close()


def test_a_job_scheduled_with_jobsctl_calls_the_local_target_with_a_verified_token(
    target: Target,
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    with local_stack(tmp_path, "--http-target", f"trials={target.url}") as stack:
        banner = stack.banner
        assert f"http targets trials {target.url}" in banner and WORKER_EMAIL in banner, banner
        exports = stack.exports()
        assert json.loads(exports["JOBS_HTTP_TARGETS"])["trials"]["url"] == target.url
        target.certs_url = exports["JOBS_OIDC_CERTS_URL"]
        for key, value in exports.items():
            monkeypatch.setenv(key, value)

        capsys.readouterr()
        code = jobsctl(["schedule", "--action", "http.request", "--job-id", "call-1",
                        "--subject", "trial-42", "--param", "target=trials",
                        "--param", "path=/internal/trials/42:expire",
                        "--param", 'body={"notify": true}'])  # fmt: skip
        assert code == 0, capsys.readouterr().err
        job = stack.completed("call-1", capsys)

    [call] = target.calls
    assert isinstance(call["claims"], dict), call["claims"]
    assert call["claims"]["email"] == WORKER_EMAIL and call["claims"]["aud"] == target.url
    assert call["path"] == "/internal/trials/42:expire"
    assert json.loads(call["body"]) == {"notify": True}
    assert call["headers"]["X-Deferred-Job-Id"] == "call-1"
    assert call["headers"]["Idempotency-Key"] == job["idempotency_key"]
    assert job["result"]["details"]["status"] == 200
