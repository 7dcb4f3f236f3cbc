"""`http.request` against a real local target: the target verifies the worker's ID token (signed
by the local OIDC issuer, checked with the services' own verifier), sees the idempotency and job
headers, and its answer decides the job as the response contract says."""

from __future__ import annotations

import contextlib
import json
import socket
import threading
from collections.abc import Iterator
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import pytest
import requests

from emulators.oidc.server import OidcServer
from services.edge.auth import AuthPolicy, TokenVerifier
from services.jobs.actions import ActionRequest
from services.jobs.errors import PermanentError, RetryAfter, TransientError
from services.jobs.http_targets import HttpTarget
from services.worker.http_request import IssuerIdTokens, http_request_action

pytestmark = pytest.mark.integration

WORKER_EMAIL = "deferred-jobs-worker@demo.iam.gserviceaccount.com"


@dataclass
class Target:
    """A target that records every call; `answers` maps a path to (status, headers, body)."""

    url: str
    calls: list[dict[str, Any]] = field(default_factory=list)
    answers: dict[str, tuple[int, dict[str, str], bytes]] = field(default_factory=dict)


@pytest.fixture
def target() -> Iterator[Target]:
    state = Target(url="")

    class Handler(BaseHTTPRequestHandler):
        def _answer(self) -> None:
            length = int(self.headers.get("Content-Length") or 0)
            body = self.rfile.read(length) if length else b""
            state.calls.append(
                {
                    "method": self.command,
                    "path": self.path,
                    "headers": dict(self.headers),
                    "body": body,
                }
            )
            status, headers, answer = state.answers.get(self.path, (200, {}, b'{"ok": true}'))
            self.send_response(status)
            for name, value in headers.items():
                self.send_header(name, value)
            self.send_header("Content-Length", str(len(answer)))
            self.end_headers()
            self.wfile.write(answer)

        do_POST = do_GET = do_PUT = do_DELETE = _answer

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


def _action(target: Target, oidc_server: OidcServer, **settings: Any) -> Any:
    targets = {"svc": HttpTarget("svc", target.url, "https://svc.example", **settings)}
    session = requests.Session()
    tokens = IssuerIdTokens(oidc_server.token_url, WORKER_EMAIL, session)
    return http_request_action(targets, tokens, session)


def _request(**params: Any) -> ActionRequest:
    return ActionRequest(
        job_id="job-1",
        action="http.request",
        subject="trial-7",
        params={"target": "svc", **params},
        attempt=2,
        idempotency_key="key-1",
    )


def test_a_2xx_completes_with_the_token_and_headers_the_target_can_check(
    target: Target, oidc_server: OidcServer
) -> None:
    result = _action(target, oidc_server).run(
        _request(path="/internal/trials/7:expire", body={"reason": "trial over"})
    )
    assert result.outcome == "called"
    assert result.details == {"status": 200, "body": '{"ok": true}'}
    (call,) = target.calls
    assert (call["method"], call["path"]) == ("POST", "/internal/trials/7:expire")
    assert json.loads(call["body"]) == {"reason": "trial over"}
    headers = call["headers"]
    assert headers["Idempotency-Key"] == "key-1"
    assert (headers["X-Deferred-Job-Id"], headers["X-Deferred-Job-Attempt"]) == ("job-1", "2")
    assert headers["X-Deferred-Job-Deadline"].endswith("Z")
    verifier = TokenVerifier(
        AuthPolicy(
            audience="https://svc.example",
            allowed_emails=frozenset({WORKER_EMAIL}),
            certs_url=oidc_server.certs_url,
        )
    )
    assert verifier.verify_header(headers["Authorization"]).email == WORKER_EMAIL


@pytest.mark.parametrize(
    ("status", "headers", "error"),
    [
        (429, {"Retry-After": "30"}, RetryAfter),
        (503, {"Retry-After": "5"}, RetryAfter),
        (503, {}, TransientError),
        (500, {}, TransientError),
        (404, {}, PermanentError),
        (302, {"Location": "http://169.254.169.254/"}, PermanentError),
    ],
)
def test_the_answer_decides_the_job(
    target: Target, oidc_server: OidcServer, status: int, headers: dict[str, str], error: type
) -> None:
    target.answers["/x"] = (status, headers, b"no")
    with pytest.raises(error) as caught:
        _action(target, oidc_server).run(_request(path="/x"))
    if error is RetryAfter:
        assert caught.value.delay_s == float(headers["Retry-After"])
    assert not isinstance(caught.value, PermanentError) or error is PermanentError
    # A redirect is never followed: the target saw one call, nothing else was asked.
    assert len(target.calls) == 1


def test_a_target_that_does_not_answer_is_transient(oidc_server: OidcServer) -> None:
    with socket_closed_port() as port:
        dead = Target(url=f"http://127.0.0.1:{port}")
        with pytest.raises(TransientError):
            _action(dead, oidc_server, timeout_s=2).run(_request(path="/x"))


def test_a_target_missing_from_the_configuration_fails_the_call_permanently(
    target: Target, oidc_server: OidcServer
) -> None:
    request = _request(path="/x")
    request = ActionRequest(**{**request.__dict__, "params": {"target": "gone", "path": "/x"}})
    with pytest.raises(PermanentError, match=r"params\.target"):
        _action(target, oidc_server).run(request)
    assert target.calls == []


@contextlib.contextmanager
def socket_closed_port() -> Iterator[int]:
    """A 127.0.0.1 port bound but not listening (connections refused), for the block."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        yield int(sock.getsockname()[1])
