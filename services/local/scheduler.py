"""The local stand-in for Cloud Scheduler: POSTs to the scan every N seconds with an OIDC token.

Like Cloud Scheduler's HTTP target with `oidc_token{service_account_email, audience}`, each
attempt carries a fresh token for `audience` (the scan URL) and `email` (the invoker service
account), signed by the local issuer, so the scan's own verification code runs unchanged.
Like Cloud Scheduler, one job never has two attempts outstanding: the loop waits for an attempt
to finish (or hit the attempt deadline) before the next tick, and a slow run delays the next.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import requests

logger = logging.getLogger(__name__)

# Mints an ID token: (audience, email) -> JWT.
TokenSource = Callable[[str, str], str]


class SchedulerError(Exception):
    """The local scheduler could not obtain a token or reach the scan."""


@dataclass(frozen=True)
class Attempt:
    """One scheduled call: its number, HTTP status (None if it never got one), JSON body."""

    number: int
    status: int | None
    body: dict[str, Any]
    error: str = ""

    @property
    def succeeded(self) -> bool:
        return self.status is not None and 200 <= self.status < 300


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
            raise SchedulerError(f"no token from {token_url}: {exc}") from exc

    return mint


@dataclass
class LocalScheduler:
    """Calls `url` with a Bearer token for (`audience`, `invoker_email`) every `interval_s`."""

    url: str
    audience: str
    invoker_email: str
    interval_s: float
    tokens: TokenSource
    attempt_deadline_s: float = 180.0
    on_attempt: Callable[[Attempt], None] | None = None

    def __post_init__(self) -> None:
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._attempts = 0

    def call_once(self) -> Attempt:
        """One attempt, as Cloud Scheduler makes it: POST, OIDC Bearer token, empty JSON body."""
        self._attempts += 1
        number = self._attempts
        try:
            token = self.tokens(self.audience, self.invoker_email)
            response = requests.post(
                self.url,
                headers={
                    "Authorization": f"Bearer {token}",
                    "User-Agent": "Google-Cloud-Scheduler",
                },
                json={},
                timeout=self.attempt_deadline_s,
            )
        except (SchedulerError, requests.RequestException) as exc:
            return Attempt(number, None, {}, str(exc))
        try:
            body = response.json()
        except ValueError:
            body = {}
        if not isinstance(body, dict):
            body = {"body": body}
        error = "" if response.ok else response.text[:500]
        return Attempt(number, response.status_code, body, error)

    def start(self) -> LocalScheduler:
        self._thread = threading.Thread(target=self._run, name="local-scheduler", daemon=True)
        self._thread.start()
        return self

    def stop(self, timeout_s: float = 5.0) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=timeout_s)

    def _run(self) -> None:
        while not self._stop.is_set():
            started = time.monotonic()
            attempt = self.call_once()
            if not attempt.succeeded:
                logger.warning(
                    "scan attempt %d failed: %s %s", attempt.number, attempt.status, attempt.error
                )
            if self.on_attempt is not None:
                self.on_attempt(attempt)
            # Fixed-rate ticks, but never two attempts at once: a slow run delays the next.
            self._stop.wait(max(0.0, self.interval_s - (time.monotonic() - started)))
