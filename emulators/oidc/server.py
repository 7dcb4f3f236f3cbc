"""The local OIDC issuer over HTTP: Google's certs endpoint, plus a token endpoint for tools.

`GET /oauth2/v1/certs` answers like https://www.googleapis.com/oauth2/v1/certs; services point
their verifier's `certs_url` at it. `POST /token` with `{"audience", "email", "lifetime_s"?}`
returns `{"token": ...}` so a shell, the CLI or the Pub/Sub emulator can obtain a signed token.
"""

from __future__ import annotations

import json
import logging
import threading
from http import HTTPStatus
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

from emulators.http_server import BackgroundHTTPServer, send_json
from emulators.oidc.issuer import Issuer

logger = logging.getLogger(__name__)

CERTS_PATH = "/oauth2/v1/certs"
TOKEN_PATH = "/token"

# A token request is a few hundred bytes; refuse anything absurd rather than read it.
_MAX_BODY = 64 * 1024
_MAX_LIFETIME_S = 24 * 3600


class TokenRequestError(ValueError):
    """The token request is not a JSON object with string audience and email."""


class OidcServer(BackgroundHTTPServer):
    """A running issuer: `url`, `certs_url`, `port`, and the `issuer` that signs its tokens."""

    def __init__(self, httpd: ThreadingHTTPServer, issuer: Issuer) -> None:
        super().__init__(httpd, "oidc-emulator")
        self.issuer = issuer
        self._lock = threading.Lock()
        self._certs_requests = 0

    @property
    def certs_url(self) -> str:
        return self.url + CERTS_PATH

    @property
    def token_url(self) -> str:
        return self.url + TOKEN_PATH

    @property
    def certs_requests(self) -> int:
        """How many times the certs document was served (tests prove verifiers cache it)."""
        with self._lock:
            return self._certs_requests

    def count_certs_request(self) -> None:
        with self._lock:
            self._certs_requests += 1


def start(host: str = "127.0.0.1", port: int = 0, issuer: Issuer | None = None) -> OidcServer:
    """Serve `issuer` (a new one if None) on host:port (0 picks a free port); returns when bound."""
    issuer = issuer or Issuer()
    holder: list[OidcServer] = []

    class Handler(_Handler):
        def server_state(self) -> OidcServer:
            return holder[0]

    httpd = ThreadingHTTPServer((host, port), Handler)
    httpd.daemon_threads = True
    server = OidcServer(httpd, issuer)
    holder.append(server)
    return server.start()


def parse_token_request(body: bytes) -> tuple[str, str, int]:
    """`(audience, email, lifetime_s)` from a JSON token request; raises TokenRequestError."""
    try:
        payload: Any = json.loads(body or b"null")
    except (UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise TokenRequestError(f"body is not JSON: {exc}") from exc
    if not isinstance(payload, dict):
        raise TokenRequestError("body must be a JSON object with 'audience' and 'email'")
    problems = [
        f"'{key}' must be a non-empty string"
        for key in ("audience", "email")
        if not isinstance(payload.get(key), str) or not payload[key]
    ]
    lifetime = payload.get("lifetime_s", 3600)
    valid_lifetime = isinstance(lifetime, int) and not isinstance(lifetime, bool)
    if not valid_lifetime or not 1 <= lifetime <= _MAX_LIFETIME_S:
        problems.append(f"'lifetime_s' must be an integer from 1 to {_MAX_LIFETIME_S}")
    if problems:
        raise TokenRequestError("; ".join(problems))
    return payload["audience"], payload["email"], lifetime


class _Handler(BaseHTTPRequestHandler):
    server_version = "deferred-jobs-oidc/1"

    def server_state(self) -> OidcServer:
        raise NotImplementedError

    def do_GET(self) -> None:
        if self.path.split("?", 1)[0] != CERTS_PATH:
            self._reply(HTTPStatus.NOT_FOUND, {"error": f"no such path: {self.path}"})
            return
        state = self.server_state()
        state.count_certs_request()
        # Google sends a max-age too; a caching verifier may honour it.
        self._reply(HTTPStatus.OK, state.issuer.certs(), {"Cache-Control": "public, max-age=3600"})

    def do_POST(self) -> None:
        if self.path.split("?", 1)[0] != TOKEN_PATH:
            self._reply(HTTPStatus.NOT_FOUND, {"error": f"no such path: {self.path}"})
            return
        try:
            length = int(self.headers.get("Content-Length") or 0)
        except ValueError:
            length = -1
        if not 0 <= length <= _MAX_BODY:
            self._reply(HTTPStatus.BAD_REQUEST, {"error": "missing or oversized Content-Length"})
            return
        try:
            audience, email, lifetime_s = parse_token_request(self.rfile.read(length))
        except TokenRequestError as exc:
            self._reply(HTTPStatus.BAD_REQUEST, {"error": str(exc)})
            return
        token = self.server_state().issuer.mint(audience, email, lifetime_s=lifetime_s)
        self._reply(HTTPStatus.OK, {"token": token})

    def _reply(
        self, status: HTTPStatus, body: object, headers: dict[str, str] | None = None
    ) -> None:
        send_json(
            self, status, body, content_type="application/json; charset=utf-8", headers=headers
        )

    def log_message(self, format: str, *args: Any) -> None:
        # Route access lines through logging (quiet by default) instead of stderr.
        logger.debug("%s %s", self.address_string(), format % args)
