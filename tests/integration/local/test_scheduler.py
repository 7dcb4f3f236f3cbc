"""The local scheduler calls like Cloud Scheduler: POST, a verifiable OIDC token, no overlap."""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import google.auth.transport.requests
import pytest
from google.oauth2 import id_token

from services.local.scheduler import Attempt, LocalScheduler, token_from_issuer_url

INVOKER = "deferred-jobs-scheduler@p.iam.gserviceaccount.com"


class FakeScan:
    """An HTTP endpoint that records each request and how many were in flight at once."""

    def __init__(self, delay_s: float = 0.0, status: int = 200) -> None:
        self.delay_s = delay_s
        self.status = status
        self.requests: list[tuple[str, str]] = []  # (method, authorization)
        self.in_flight = 0
        self.most_in_flight = 0
        self.lock = threading.Lock()


@pytest.fixture
def scan_endpoint() -> Iterator[tuple[FakeScan, str]]:
    scan = FakeScan()

    class Handler(BaseHTTPRequestHandler):
        def do_POST(self) -> None:
            with scan.lock:
                scan.in_flight += 1
                scan.most_in_flight = max(scan.most_in_flight, scan.in_flight)
                scan.requests.append(("POST", self.headers.get("Authorization", "")))
            self.rfile.read(int(self.headers.get("Content-Length") or 0))
            time.sleep(scan.delay_s)
            body = b'{"claimed": 2, "published": 2}'
            self.send_response(scan.status)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)
            with scan.lock:
                scan.in_flight -= 1

        def log_message(self, format: str, *args: Any) -> None:
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield scan, f"http://127.0.0.1:{server.server_address[1]}"
    finally:
        server.shutdown()
        server.server_close()


def test_each_attempt_posts_a_token_for_the_scan_audience_and_invoker(
    oidc_server: Any, scan_endpoint: tuple[FakeScan, str]
) -> None:
    scan, url = scan_endpoint
    scheduler = LocalScheduler(
        url=url,
        audience=url,
        invoker_email=INVOKER,
        interval_s=60,
        tokens=token_from_issuer_url(oidc_server.token_url),
    )
    attempt = scheduler.call_once()
    assert attempt == Attempt(1, 200, {"claimed": 2, "published": 2})
    method, authorization = scan.requests[0]
    assert method == "POST" and authorization.startswith("Bearer ")
    claims = id_token.verify_token(
        authorization.removeprefix("Bearer "),
        google.auth.transport.requests.Request(),
        audience=url,
        certs_url=oidc_server.certs_url,
    )
    assert claims["email"] == INVOKER and claims["email_verified"] is True


def test_a_slow_scan_delays_the_next_attempt_instead_of_overlapping(
    oidc_server: Any, scan_endpoint: tuple[FakeScan, str]
) -> None:
    scan, url = scan_endpoint
    scan.delay_s = 0.2  # longer than the interval
    seen: list[Attempt] = []
    done = threading.Event()

    def record(attempt: Attempt) -> None:
        seen.append(attempt)
        if len(seen) == 4:
            done.set()

    scheduler = LocalScheduler(
        url=url,
        audience=url,
        invoker_email=INVOKER,
        interval_s=0.01,
        tokens=token_from_issuer_url(oidc_server.token_url),
        on_attempt=record,
    ).start()
    try:
        assert done.wait(timeout=30)
    finally:
        scheduler.stop()
    assert scan.most_in_flight == 1
    assert [a.number for a in seen[:4]] == [1, 2, 3, 4]


def test_a_refused_call_is_reported_not_raised(
    oidc_server: Any, scan_endpoint: tuple[FakeScan, str]
) -> None:
    scan, url = scan_endpoint
    scan.status = 403
    scheduler = LocalScheduler(url, url, INVOKER, 60, token_from_issuer_url(oidc_server.token_url))
    attempt = scheduler.call_once()
    assert attempt.status == 403 and not attempt.succeeded


def test_an_unreachable_issuer_is_a_failed_attempt(scan_endpoint: tuple[FakeScan, str]) -> None:
    scan, url = scan_endpoint
    scheduler = LocalScheduler(url, url, INVOKER, 60, token_from_issuer_url("http://127.0.0.1:9/t"))
    attempt = scheduler.call_once()
    assert attempt.status is None and "no token from" in attempt.error
    assert scan.requests == []
