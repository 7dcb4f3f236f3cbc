"""One HTTP attempt of a job: sent from a thread of its own, cancellable at the deadline.

Cloud Scheduler: "If the request handler does not respond by this deadline then the request is
cancelled and the attempt is marked as a DEADLINE_EXCEEDED failure" (Job.attemptDeadline,
https://cloud.google.com/scheduler/docs/reference/rest/v1/projects.locations.jobs). Cancelling
closes the connection; the handler on the other side may well keep running (Cloud Run does not
stop it), which is why a retry can overlap the first attempt. An attempt "is acknowledged by
means of an HTTP response code in the range [200 - 299]"; anything else, or no answer, fails.
Each attempt mints a fresh OIDC token for the job's audience and service account, as the
HTTP target's `oidcToken` does.
"""

from __future__ import annotations

import http.client
import json
import socket
import threading
from collections.abc import Callable, Mapping
from contextlib import suppress
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any
from urllib.parse import urlsplit

import requests

# The most of an answer kept (the scan's answer is a small JSON object).
MAX_ANSWER_BYTES = 1024 * 1024

# Mints an ID token: (audience, email) -> JWT.
TokenSource = Callable[[str, str], str]


class TokenError(Exception):
    """No OIDC token could be obtained for an attempt."""


def token_from_issuer_url(token_url: str, *, timeout_s: float = 5.0) -> TokenSource:
    """A TokenSource asking the local OIDC emulator's `POST /token` endpoint."""

    def mint(audience: str, email: str) -> str:
        try:
            response = requests.post(
                token_url, json={"audience": audience, "email": email}, timeout=timeout_s
            )
            response.raise_for_status()
            return str(response.json()["token"])
        except (requests.RequestException, KeyError, ValueError) as exc:
            raise TokenError(f"no token from {token_url}: {exc}") from exc

    return mint


@dataclass(frozen=True)
class Answer:
    """How the HTTP exchange ended: a status (None: none came), the body, an error text."""

    status: int | None
    body: bytes
    error: str
    finished_at: datetime

    @property
    def succeeded(self) -> bool:
        return self.status is not None and 200 <= self.status < 300

    def json_body(self) -> dict[str, Any]:
        try:
            parsed = json.loads(self.body) if self.body.strip() else {}
        except ValueError:
            return {}
        return parsed if isinstance(parsed, dict) else {"body": parsed}


@dataclass
class HttpCall:
    """One request, sent by `start()` from its own thread; `on_done` runs when it has an Answer
    (not after `cancel()`, which closes its connection)."""

    url: str
    method: str
    headers: Mapping[str, str]
    body: bytes
    token: Callable[[], str] | None
    now: Callable[[], datetime]
    on_done: Callable[[], None]
    socket_timeout_s: float
    _lock: threading.Lock = field(default_factory=threading.Lock, init=False)
    _connection: http.client.HTTPConnection | None = field(default=None, init=False)
    _cancelled: bool = field(default=False, init=False)
    _answer: Answer | None = field(default=None, init=False)

    def start(self) -> HttpCall:
        threading.Thread(target=self._send, name="scheduler-attempt", daemon=True).start()
        return self

    @property
    def answer(self) -> Answer | None:
        with self._lock:
            return self._answer

    def cancel(self) -> None:
        """Close the connection: the attempt is over for the scheduler, not for the target."""
        with self._lock:
            self._cancelled = True
            connection = self._connection
        if connection is not None and connection.sock is not None:
            with suppress(OSError):
                connection.sock.shutdown(socket.SHUT_RDWR)

    def _send(self) -> None:
        parts = urlsplit(self.url)
        path = (parts.path or "/") + (f"?{parts.query}" if parts.query else "")
        kind = (
            http.client.HTTPSConnection if parts.scheme == "https" else http.client.HTTPConnection
        )
        connection = kind(parts.hostname or "", parts.port, timeout=self.socket_timeout_s)
        try:
            headers = dict(self.headers)
            if self.token is not None:
                headers["Authorization"] = f"Bearer {self.token()}"
            with self._lock:
                if self._cancelled:
                    return
                self._connection = connection
            connection.request(self.method, path, body=self.body, headers=headers)
            response = connection.getresponse()
            data = response.read(MAX_ANSWER_BYTES)
            ok = 200 <= response.status < 300
            error = "" if ok else data[:500].decode("utf-8", "replace")
            answer = Answer(response.status, data, error, self.now())
        except (TokenError, OSError, ValueError, http.client.HTTPException) as exc:
            answer = Answer(None, b"", f"{type(exc).__name__}: {exc}", self.now())
        finally:
            connection.close()
        with self._lock:
            if self._cancelled:
                return
            self._answer = answer
        self.on_done()
