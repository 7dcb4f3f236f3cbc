"""Every answer of the api, scan and worker, as the image serves them (`services.edge.server`)
behind a local Cloud Run front end, is either a success, Google's error body
(https://cloud.google.com/apis/design/errors), or a refusal of the front end itself (Google's
HTML page, as Cloud Run answers before the container): also the answers functions-framework,
werkzeug and gunicorn gave before the service's code ran (`/robots.txt`, `/favicon.ico`, a
`%0A` in the path, a header field over gunicorn's 8,190-byte default, `GET *`).

The same requests straight to the container (as only Cloud Run can reach it) show the
container's own answers: Google's error body, gunicorn's refusals included.
"""

from __future__ import annotations

import json
import socket
import urllib.parse
import uuid
from collections.abc import Callable, Iterator
from typing import Any

import pytest

from tests.integration.cloudrun.deployed import INVOKER, TARGETS, Deployed, deploy

# 431: more than 100 header fields, a documented difference of the local front end
# (docs/emulators.md, "Known differences").
FRONT_END_STATUSES = {400, 401, 403, 408, 413, 429, 431, 501, 503, 504}


@pytest.fixture(scope="module")
def deployed(
    firestore_emulator: Any, pubsub_emulator: Any, storage_emulator: Any, oidc_server: Any
) -> Iterator[dict[str, Deployed]]:
    project = f"edge-{uuid.uuid4().hex[:12]}"
    started: dict[str, Deployed] = {}
    try:
        for target in TARGETS:
            started[target] = deploy(target, project, oidc_server.certs_url)
        yield started
    finally:
        for service in started.values():
            service.stop()


def send(url: str, request: bytes) -> tuple[int, dict[str, str], bytes]:
    parts = urllib.parse.urlsplit(url)
    assert parts.hostname and parts.port
    with socket.create_connection((parts.hostname, parts.port), timeout=60) as sock:
        sock.sendall(request)
        sock.shutdown(socket.SHUT_WR)
        data = b""
        while chunk := sock.recv(65536):
            data += chunk
    head, _, body = data.partition(b"\r\n\r\n")
    lines = head.decode("latin-1").split("\r\n")
    headers = {}
    for line in lines[1:]:
        name, _, value = line.partition(":")
        headers[name.strip().lower()] = value.strip()
    return int(lines[0].split()[1]), headers, body


def is_google_error(status: int, headers: dict[str, str], body: bytes) -> bool:
    if not headers.get("content-type", "").startswith("application/json"):
        return False
    try:
        error = json.loads(body)["error"]
    except (ValueError, KeyError, TypeError):
        return False
    return (
        isinstance(error, dict)
        and error.get("code") == status
        and isinstance(error.get("message"), str)
        and isinstance(error.get("status"), str)
        and error["status"].isupper()
    )


def is_front_end_page(status: int, headers: dict[str, str], body: bytes) -> bool:
    html = headers.get("content-type", "").startswith("text/html") and b"<title>" in body
    plain = body in (b"Rate exceeded.", b"upstream request timeout")
    return status in FRONT_END_STATUSES and (html or plain)


Build = Callable[[str], bytes]


def _get(target: bytes, extra: bytes = b"") -> Build:
    def build(token: str) -> bytes:
        auth = f"Authorization: Bearer {token}\r\n".encode() if token else b""
        return b"GET " + target + b" HTTP/1.1\r\nHost: x\r\n" + auth + extra + b"\r\n"

    return build


HOSTILE: dict[str, Build] = {
    "robots.txt": _get(b"/robots.txt"),
    "favicon.ico": _get(b"/favicon.ico"),
    "newline in the path": _get(b"/v1/jobs/a%0Ab"),
    "invalid UTF-8 path": _get(b"/v1/jobs/%FF%FE"),
    "invalid UTF-8 query": _get(b"/v1/jobs/x?q=%FF"),
    "asterisk": _get(b"*"),
    "a 10 KB header field": _get(b"/", b"X-Pad: " + b"a" * 10_000 + b"\r\n"),
    "a 40 KB header field": _get(b"/", b"X-Pad: " + b"a" * 40_000 + b"\r\n"),
    "150 header fields": _get(b"/", b"".join(b"X-%d: y\r\n" % n for n in range(150))),
    "a bad header name": _get(b"/", b"Bad Name: y\r\n"),
    "double slash first": _get(b"//v1/jobs"),
    "double slash inside": _get(b"/v1//jobs"),
    "a 20 KB token": lambda token: _get(b"/v1/jobs/x")("a" * 20_000),
    "no token": lambda token: _get(b"/robots.txt")(""),
}


@pytest.mark.parametrize("target", TARGETS)
@pytest.mark.parametrize("case", sorted(HOSTILE))
def test_every_answer_is_googles_error_model_or_the_front_ends_refusal(
    deployed: dict[str, Deployed], oidc_server: Any, target: str, case: str
) -> None:
    service = deployed[target]
    token = oidc_server.issuer.mint(service.url, INVOKER)
    status, headers, body = send(service.url, HOSTILE[case](token))
    assert status < 500, (status, body[:300])
    assert (
        200 <= status < 300
        or is_google_error(status, headers, body)
        or is_front_end_page(status, headers, body)
    ), (status, headers, body[:300])
    # Straight to the container: no front end to refuse, so the container's own answer.
    status, headers, body = send(service.container_url, HOSTILE[case](token))
    assert status < 500, (status, body[:300])
    assert 200 <= status < 300 or is_google_error(status, headers, body), (status, body[:300])


def test_paths_functions_framework_kept_reach_the_apis_authentication(
    deployed: dict[str, Deployed], oidc_server: Any
) -> None:
    api = deployed["api"]
    token = oidc_server.issuer.mint(api.url, INVOKER)
    expected = {
        b"/robots.txt": (404, "NOT_FOUND"),
        b"/favicon.ico": (404, "NOT_FOUND"),
        # A job ID with a newline: the API's own validation of the ID.
        b"/v1/jobs/a%0Ab": (400, "INVALID_ARGUMENT"),
    }
    for path, answer in expected.items():
        # No token, straight to the container: the API's own 401 (before: f-f's 404).
        status, _, body = send(api.container_url, _get(path)(""))
        assert (status, json.loads(body)["error"]["status"]) == (401, "UNAUTHENTICATED")
        status, _, body = send(api.url, _get(path)(token))
        assert (status, json.loads(body)["error"]["status"]) == answer, path


def test_the_apis_own_token_limit_answers_where_gunicorn_did(
    deployed: dict[str, Deployed],
) -> None:
    # A 20 KB bearer value: gunicorn's 8,190-byte default refused it with a 431 page; now the
    # API's 16 KiB token limit (services/edge/auth.py) answers, in Google's error model.
    api = deployed["api"]
    status, _, body = send(api.container_url, _get(b"/v1/jobs/x")("a" * 20_000))
    error = json.loads(body)["error"]
    assert (status, error["status"]) == (401, "UNAUTHENTICATED")
    assert "too long" in error["message"]


def test_the_front_end_refuses_an_asterisk_target_and_the_container_answers_json(
    deployed: dict[str, Deployed], oidc_server: Any
) -> None:
    api = deployed["api"]
    status, headers, body = send(api.url, _get(b"*")(""))
    assert (status, headers["content-type"].split(";")[0]) == (400, "text/html")
    status, headers, body = send(api.container_url, _get(b"*")(""))
    assert (status, json.loads(body)["error"]["status"]) == (400, "INVALID_ARGUMENT")


def test_scan_and_worker_refusals_keep_their_fields_in_an_error_info(
    deployed: dict[str, Deployed], oidc_server: Any
) -> None:
    for target in ("scan", "worker"):
        service = deployed[target]
        token = oidc_server.issuer.mint(service.url, INVOKER)
        status, _, body = send(service.url, _get(b"/")(token))  # GET: POST only
        error = json.loads(body)["error"]
        assert status == 405 and error["code"] == 405, (target, body)
        assert error["details"][0]["@type"] == "type.googleapis.com/google.rpc.ErrorInfo"
