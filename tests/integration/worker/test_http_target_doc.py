"""docs/actions.md's Python target (`trials_target.py`) runs as written: the worker's call, with
an ID token from the local OIDC issuer, is admitted and done; a repeated delivery (same
Idempotency-Key) gets the same answer without a second effect; a token of another account is
refused with 401, which fails the job permanently."""

from __future__ import annotations

import re
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import requests

from emulators.oidc.server import OidcServer
from services.jobs.actions import ActionRequest
from services.jobs.errors import PermanentError
from services.jobs.http_targets import target_flag
from services.worker.http_request import IssuerIdTokens, http_request_action

pytestmark = pytest.mark.integration

DOC = Path(__file__).resolve().parents[3] / "docs" / "actions.md"
WORKER = "deferred-jobs-worker-rt@demo.iam.gserviceaccount.com"


@pytest.fixture
def doc_target(oidc_server: OidcServer, monkeypatch: pytest.MonkeyPatch) -> Iterator[Any]:
    (source,) = [
        body
        for lang, body in re.findall(r"^```(\w+)\n(.*?)^```$", DOC.read_text(), re.S | re.M)
        if lang == "python" and body.startswith("# trials_target.py")
    ]
    from http.server import ThreadingHTTPServer

    namespace: dict[str, Any] = {"__name__": "trials_target"}
    server = ThreadingHTTPServer(("127.0.0.1", 0), lambda *a: namespace["Target"](*a))
    url = f"http://127.0.0.1:{server.server_address[1]}"
    monkeypatch.setenv("TARGET_AUDIENCE", url)
    monkeypatch.setenv("TARGET_WORKER_EMAIL", WORKER)
    monkeypatch.setenv("TARGET_CERTS_URL", oidc_server.certs_url)
    exec(compile(source, str(DOC), "exec"), namespace)
    namespace["url"] = url
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield namespace
    finally:
        server.shutdown()
        server.server_close()


def _request(key: str) -> ActionRequest:
    params = {"target": "trials", "path": "/internal/trials/42:expire", "body": {"notify": True}}
    return ActionRequest("trial-42-expire", "http.request", "trial-42", params, 1, key)


def _tokens(oidc_server: OidcServer, email: str) -> IssuerIdTokens:
    return IssuerIdTokens(oidc_server.token_url, email, requests.Session())


def test_the_docs_target_admits_the_worker_and_answers_a_repeat_the_same(
    doc_target: dict[str, Any], oidc_server: OidcServer
) -> None:
    targets = target_flag(f"trials={doc_target['url']}")
    action = http_request_action(targets, _tokens(oidc_server, WORKER), requests.Session())
    assert callable(action.run)
    first = action.run(_request("k-1"))
    assert first.outcome == "called" and first.details["status"] == 200
    assert '"notify": true' in first.details["body"]
    again = action.run(_request("k-1"))
    assert again.details == first.details
    assert list(doc_target["answered"]) == ["k-1"]


def test_the_docs_target_refuses_another_account_and_the_job_fails(
    doc_target: dict[str, Any], oidc_server: OidcServer
) -> None:
    targets = target_flag(f"trials={doc_target['url']}")
    stranger = _tokens(oidc_server, "someone@demo.iam.gserviceaccount.com")
    action = http_request_action(targets, stranger, requests.Session())
    assert callable(action.run)
    with pytest.raises(PermanentError, match="answered 401"):
        action.run(_request("k-2"))
    assert doc_target["answered"] == {}
