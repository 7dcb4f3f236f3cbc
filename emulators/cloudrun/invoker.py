"""Cloud Run's IAM invoker check: a Google ID token for this service, from an allowed invoker.

A request passes when the header Cloud Run reads (`X-Serverless-Authorization` if present, else
`Authorization`) is `Bearer <ID token>` signed by the issuer's key, with a Google `iss`, an `aud`
equal to the service URL (with or without a trailing slash) or one of its custom audiences
(https://cloud.google.com/run/docs/configuring/custom-audiences), unexpired, for an email the
service's invoker binding names. No token at all is 403, an invalid one 401, a valid token of a
caller without the role 403 (https://cloud.google.com/run/docs/troubleshooting).
"""

from __future__ import annotations

import json
import logging
import threading
import time
import urllib.request
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from http import HTTPStatus

from google.auth import jwt

from emulators.cloudrun.contract import (
    AUTHORIZATION,
    GOOGLE_ISSUERS,
    NOT_AUTHENTICATED,
    NOT_AUTHORIZED,
    SERVERLESS_AUTHORIZATION,
    SIGNATURE_REMOVED,
)

logger = logging.getLogger(__name__)

Certs = Mapping[str, str]

_MAX_TOKEN_CHARS = 16 * 1024
_REFRESH_FLOOR_S = 5.0


class Refused(Exception):
    """The invoker check failed: `status` (401 or 403) and why, for the log line."""

    def __init__(self, status: HTTPStatus, reason: str) -> None:
        super().__init__(reason)
        self.status = status
        self.reason = reason


class UrlCerts:
    """The issuer's `{kid: PEM}` certs from its URL, fetched once and again for an unknown kid
    (at most once per few seconds, so garbage tokens cannot hammer the issuer)."""

    def __init__(self, url: str, *, timeout_s: float = 10.0) -> None:
        self.url = url
        self._timeout_s = timeout_s
        self._lock = threading.Lock()
        self._certs: dict[str, str] = {}
        self._fetched_at = -_REFRESH_FLOOR_S

    def __call__(self, kid: str | None) -> Certs:
        with self._lock:
            stale = not self._certs or (kid is not None and kid not in self._certs)
            if stale and time.monotonic() - self._fetched_at >= _REFRESH_FLOOR_S:
                self._fetch()
            return dict(self._certs)

    def _fetch(self) -> None:
        self._fetched_at = time.monotonic()
        try:
            with urllib.request.urlopen(self.url, timeout=self._timeout_s) as response:
                certs = json.loads(response.read())
        except (OSError, ValueError) as exc:
            logger.warning("cannot fetch the issuer's certs from %s: %s", self.url, exc)
            return
        if isinstance(certs, dict) and all(isinstance(v, str) for v in certs.values()):
            self._certs = certs


def fixed_certs(certs: Certs) -> Callable[[str | None], Certs]:
    """A certs source for an issuer in this process."""
    return lambda kid: certs


@dataclass(frozen=True)
class InvokerPolicy:
    """Who may invoke one service: its URL, custom audiences and invoker emails."""

    service_url: str
    invokers: frozenset[str]
    custom_audiences: tuple[str, ...] = ()

    @property
    def audiences(self) -> list[str]:
        base = self.service_url.rstrip("/")
        return [base, base + "/", *self.custom_audiences]


class InvokerCheck:
    """Checks a request's headers against one `InvokerPolicy`."""

    def __init__(self, policy: InvokerPolicy, certs: Callable[[str | None], Certs]) -> None:
        self.policy = policy
        self._certs = certs

    def check(self, headers: Mapping[str, str]) -> tuple[str, str]:
        """(the header name that carried the token, the caller's email); raises Refused."""
        name = SERVERLESS_AUTHORIZATION if SERVERLESS_AUTHORIZATION in headers else AUTHORIZATION
        value = headers.get(name)
        if not value:
            raise Refused(HTTPStatus.FORBIDDEN, f"{NOT_AUTHENTICATED} (no {name} header)")
        parts = value.split()
        if len(parts) != 2 or parts[0].lower() != "bearer":
            raise Refused(
                HTTPStatus.UNAUTHORIZED, f"{NOT_AUTHORIZED} ({name} is not a bearer token)"
            )
        email = self._caller(parts[1])
        if email not in self.policy.invokers:
            raise Refused(
                HTTPStatus.FORBIDDEN,
                f"{NOT_AUTHORIZED} ({email!r} has no invoker role on {self.policy.service_url})",
            )
        return name, email

    def _caller(self, token: str) -> str:
        if len(token) > _MAX_TOKEN_CHARS or token.endswith("." + SIGNATURE_REMOVED):
            # A forwarded token is no credential: its signature is gone.
            raise Refused(HTTPStatus.UNAUTHORIZED, f"{NOT_AUTHORIZED} (not a signed ID token)")
        try:
            header = jwt.decode_header(token)
            kid = header.get("kid") if isinstance(header, dict) else None
            claims = jwt.decode(
                token,
                certs=self._certs(kid if isinstance(kid, str) else None),
                audience=self.policy.audiences,
                clock_skew_in_seconds=0,
            )
        except Exception as exc:  # google-auth raises ValueError and friends for any bad token
            raise Refused(
                HTTPStatus.UNAUTHORIZED,
                f"{NOT_AUTHORIZED} (invalid ID token: {type(exc).__name__})",
            ) from exc
        if claims.get("iss") not in GOOGLE_ISSUERS:
            raise Refused(HTTPStatus.UNAUTHORIZED, f"{NOT_AUTHORIZED} (token not issued by Google)")
        email = claims.get("email")
        if not isinstance(email, str):
            raise Refused(HTTPStatus.FORBIDDEN, f"{NOT_AUTHORIZED} (token names no email)")
        return email


def strip_signature(value: str) -> str:
    """`Bearer h.p.s` → `Bearer h.p.SIGNATURE_REMOVED_BY_GOOGLE`, the scheme kept as sent."""
    scheme, _, token = value.strip().partition(" ")
    head, _, _signature = token.strip().rpartition(".")
    return f"{scheme} {head}.{SIGNATURE_REMOVED}"


def invoker_set(emails: Iterable[str]) -> frozenset[str]:
    return frozenset(e.strip() for e in emails if e.strip())
