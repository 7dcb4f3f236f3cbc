"""The local Cloud Run front end checks invokers, forwards stripped tokens, and enforces Cloud
Run's timeout, concurrency and size limits — against a real upstream over HTTP."""

from __future__ import annotations

import socket
import threading
import time
from collections.abc import Iterator
from typing import Any

import pytest
import requests

from emulators.cloudrun.contract import SIGNATURE_REMOVED, TIMEOUT_BODY, forbidden_page
from emulators.cloudrun.proxy import FrontEnd
from emulators.oidc.issuer import Issuer
from tests.fixtures.cloudrun import CloudRun
from tests.integration.cloudrun.upstream import Upstream

INVOKER = "scheduler@p.iam.gserviceaccount.com"


@pytest.fixture
def upstream() -> Iterator[Upstream]:
    with Upstream().start() as server:
        yield server


@pytest.fixture
def front(cloud_run: CloudRun, upstream: Upstream) -> FrontEnd:
    return cloud_run(upstream.url, invokers=[INVOKER], service="scan")


def bearer(oidc: Any, audience: str, email: str = INVOKER, **kwargs: Any) -> str:
    return "Bearer " + oidc.issuer.mint(audience, email, **kwargs)


def post(front: FrontEnd, path: str = "/", **kwargs: Any) -> requests.Response:
    return requests.post(front.url + path, timeout=30, **kwargs)


def test_an_invokers_token_is_forwarded_with_its_signature_removed(
    front: FrontEnd, upstream: Upstream, oidc_server: Any
) -> None:
    sent = bearer(oidc_server, front.url)
    response = post(front, "/run?x=1", headers={"Authorization": sent}, data=b"{}")
    assert response.status_code == 200
    assert response.json() == {"ok": True}
    [seen] = upstream.seen.requests
    assert seen["path"] == "/run?x=1"
    assert seen["body"] == b"{}"
    header, payload, _ = sent.removeprefix("Bearer ").split(".")
    assert seen["headers"]["Authorization"] == f"Bearer {header}.{payload}.{SIGNATURE_REMOVED}"


def test_a_trace_context_is_added_when_absent_and_kept_when_sent(
    front: FrontEnd, upstream: Upstream, oidc_server: Any
) -> None:
    token = bearer(oidc_server, front.url)
    post(front, headers={"Authorization": token})
    added = upstream.last_headers()["X-Cloud-Trace-Context"]
    trace, _, rest = added.partition("/")
    assert len(trace) == 32 and int(trace, 16) >= 0 and rest.endswith(";o=1")
    mine = "0123456789abcdef0123456789abcdef/1;o=1"
    post(front, headers={"Authorization": token, "X-Cloud-Trace-Context": mine})
    assert upstream.last_headers()["X-Cloud-Trace-Context"] == mine


def test_x_serverless_authorization_is_checked_and_authorization_passes_untouched(
    front: FrontEnd, upstream: Upstream, oidc_server: Any
) -> None:
    token = bearer(oidc_server, front.url)
    own = "Bearer the-apps-own-credential"
    response = post(front, headers={"X-Serverless-Authorization": token, "Authorization": own})
    assert response.status_code == 200
    seen = upstream.last_headers()
    assert seen["Authorization"] == own
    assert seen["X-Serverless-Authorization"].endswith("." + SIGNATURE_REMOVED)
    # Present, so it is what Cloud Run checks: a good Authorization does not rescue it.
    response = post(front, headers={"X-Serverless-Authorization": own, "Authorization": token})
    assert response.status_code == 401


def test_no_token_is_403_with_cloud_runs_page_and_reaches_nothing(
    front: FrontEnd, upstream: Upstream
) -> None:
    response = post(front, "/push")
    assert response.status_code == 403
    assert response.headers["Content-Type"].startswith("text/html")
    assert "Your client does not have permission to get URL <code>/push</code>" in response.text
    assert "<code>/&lt;x&gt;</code>" in forbidden_page("/<x>").decode()
    assert upstream.seen.requests == []
    assert front.counters.refused == {403: 1}


@pytest.mark.parametrize(
    "case",
    [
        "expired",
        "wrong audience",
        "other signing key",
        "tampered",
        "garbage",
        "not bearer",
        "replayed stripped token",
        "other issuer",
    ],
)
def test_an_invalid_token_is_401_and_reaches_nothing(
    front: FrontEnd, upstream: Upstream, oidc_server: Any, case: str
) -> None:
    good = bearer(oidc_server, front.url)
    header, payload, signature = good.removeprefix("Bearer ").split(".")
    value = {
        "expired": bearer(oidc_server, front.url, now=time.time() - 7200, lifetime_s=600),
        "wrong audience": bearer(oidc_server, front.url + "/other"),
        "other signing key": "Bearer "
        + Issuer(kid=oidc_server.issuer.kid).mint(front.url, INVOKER),
        "tampered": f"Bearer {header}.{payload}.{signature[:-4]}AAAA",
        "garbage": "Bearer not-a-jwt",
        "not bearer": f"Basic {good}",
        "replayed stripped token": f"Bearer {header}.{payload}.{SIGNATURE_REMOVED}",
        "other issuer": bearer(oidc_server, front.url, extra_claims={"iss": "https://evil"}),
    }[case]
    response = post(front, headers={"Authorization": value})
    assert response.status_code == 401, response.text
    assert "Your client does not have permission to the requested URL" in response.text
    assert upstream.seen.requests == []


def test_a_valid_token_of_a_caller_without_the_invoker_role_is_403(
    front: FrontEnd, upstream: Upstream, oidc_server: Any
) -> None:
    response = post(front, headers={"Authorization": bearer(oidc_server, front.url, "x@evil.com")})
    assert response.status_code == 403
    assert upstream.seen.requests == []


def test_the_url_with_a_slash_and_custom_audiences_are_accepted(
    cloud_run: CloudRun, upstream: Upstream, oidc_server: Any
) -> None:
    custom = "https://jobs.example.com/scan"
    front = cloud_run(upstream.url, invokers=[INVOKER], audiences=(custom,))
    for audience in (front.url, front.url + "/", custom):
        response = post(front, headers={"Authorization": bearer(oidc_server, audience)})
        assert response.status_code == 200, audience
    assert len(upstream.seen.requests) == 3


def test_with_invoker_iam_disabled_anything_is_forwarded_as_sent(
    cloud_run: CloudRun, upstream: Upstream, oidc_server: Any
) -> None:
    front = cloud_run(upstream.url, invokers=[], iam=False)
    token = bearer(oidc_server, front.url, "anyone@else.com")
    assert post(front, headers={"Authorization": token}).status_code == 200
    assert post(front).status_code == 200
    assert upstream.seen.requests[0]["headers"]["Authorization"] == token  # signature intact
    assert "Authorization" not in upstream.seen.requests[1]["headers"]


def test_a_slow_request_gets_504_while_the_service_thread_runs_to_completion(
    cloud_run: CloudRun, upstream: Upstream, oidc_server: Any
) -> None:
    front = cloud_run(upstream.url, invokers=[INVOKER], timeout_s=0.5)
    response = post(front, "/slow?s=1.5", headers={"Authorization": bearer(oidc_server, front.url)})
    assert response.status_code == 504
    assert response.content == TIMEOUT_BODY
    assert upstream.seen.completed == 0  # the caller has its answer; the work is not done yet
    deadline = time.monotonic() + 10
    while upstream.seen.completed == 0 and time.monotonic() < deadline:
        time.sleep(0.05)
    assert upstream.seen.completed == 1
    assert front.counters.timed_out == 1


def test_requests_above_the_concurrency_wait_for_a_free_slot(
    cloud_run: CloudRun, upstream: Upstream, oidc_server: Any
) -> None:
    front = cloud_run(upstream.url, invokers=[INVOKER], concurrency=2)
    token = bearer(oidc_server, front.url)
    statuses: list[int] = []

    def call() -> None:
        statuses.append(post(front, "/hold", headers={"Authorization": token}).status_code)

    threads = [threading.Thread(target=call) for _ in range(5)]
    for thread in threads:
        thread.start()
    deadline = time.monotonic() + 10
    while front.counters.waited < 3 and time.monotonic() < deadline:
        time.sleep(0.02)
    assert (upstream.seen.in_flight, front.counters.waited) == (2, 3)
    upstream.release()
    for thread in threads:
        thread.join(timeout=30)
    assert statuses == [200] * 5
    assert upstream.seen.max_in_flight == 2


def test_headers_over_cloud_runs_limit_are_refused_with_413(
    cloud_run: CloudRun, upstream: Upstream, oidc_server: Any
) -> None:
    front = cloud_run(upstream.url, invokers=[INVOKER], max_header_bytes=4096)
    token = bearer(oidc_server, front.url)
    fits = post(front, headers={"Authorization": token, "X-Pad": "a" * 1500})
    assert fits.status_code == 200
    over = post(front, headers={"Authorization": token, "X-Pad": "a" * 4096})
    assert over.status_code == 413
    assert "Your client issued a request that was too large." in over.text
    many = post(front, headers={"Authorization": token, **{f"X-{n}": "a" * 60 for n in range(60)}})
    assert many.status_code == 413
    assert len(upstream.seen.requests) == 1


def test_the_default_header_limit_is_64_kib(
    front: FrontEnd, upstream: Upstream, oidc_server: Any
) -> None:
    token = bearer(oidc_server, front.url)
    assert post(front, headers={"Authorization": token, "X-Pad": "a" * 60_000}).status_code == 200
    refused = post(front, headers={"Authorization": token, "X-Pad": "a" * 66_000})
    assert refused.status_code == 413
    assert len(upstream.seen.requests) == 1


def test_a_body_over_the_request_limit_is_refused_with_413(
    cloud_run: CloudRun, upstream: Upstream, oidc_server: Any
) -> None:
    front = cloud_run(upstream.url, invokers=[INVOKER], max_request_bytes=1000)
    token = bearer(oidc_server, front.url)
    assert post(front, headers={"Authorization": token}, data=b"x" * 1000).status_code == 200
    assert post(front, headers={"Authorization": token}, data=b"x" * 1001).status_code == 413
    chunked = post(front, headers={"Authorization": token}, data=iter([b"x" * 600] * 2))
    assert chunked.status_code == 413
    assert len(upstream.seen.requests) == 1


def test_a_chunked_body_is_forwarded_whole(
    front: FrontEnd, upstream: Upstream, oidc_server: Any
) -> None:
    token = bearer(oidc_server, front.url)
    response = post(front, headers={"Authorization": token}, data=iter([b"ab", b"cd"]))
    assert response.status_code == 200
    assert upstream.seen.requests[0]["body"] == b"abcd"


def test_a_dead_container_is_503(cloud_run: CloudRun, oidc_server: Any) -> None:
    front = cloud_run("http://127.0.0.1:9", invokers=[INVOKER])
    response = post(front, headers={"Authorization": bearer(oidc_server, front.url)})
    assert response.status_code == 503


def _raw(front: FrontEnd, request: bytes) -> bytes:
    host, port = front.url.removeprefix("http://").split(":")
    with socket.create_connection((host, int(port)), timeout=10) as sock:
        sock.sendall(request)
        chunks = []
        while chunk := sock.recv(65536):
            chunks.append(chunk)
    return b"".join(chunks)


@pytest.mark.parametrize(
    "framing",
    [b"Content-Length: lots\r\n", b"Transfer-Encoding: chunked\r\n"],
    ids=["bad content-length", "bad chunk size"],
)
def test_a_malformed_body_is_400_and_the_front_end_keeps_serving(
    front: FrontEnd, upstream: Upstream, oidc_server: Any, framing: bytes
) -> None:
    token = bearer(oidc_server, front.url).encode()
    answer = _raw(
        front,
        b"POST / HTTP/1.1\r\nHost: x\r\nAuthorization: "
        + token
        + b"\r\n"
        + framing
        + b"\r\nzz\r\n",
    )
    assert answer.startswith(b"HTTP/1.1 400")
    assert upstream.seen.requests == []
    assert post(front, headers={"Authorization": token.decode()}).status_code == 200


def test_a_bug_in_the_front_end_costs_one_request_a_500_and_nothing_else(
    front: FrontEnd, upstream: Upstream, oidc_server: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    check = front.config.invoker_check
    assert check is not None
    token = bearer(oidc_server, front.url)

    def broken(headers: Any) -> tuple[str, str]:
        raise RuntimeError("a bug")

    monkeypatch.setattr(check, "check", broken)
    assert post(front, headers={"Authorization": token}).status_code == 500
    monkeypatch.undo()
    assert post(front, headers={"Authorization": token}).status_code == 200
    assert len(upstream.seen.requests) == 1
