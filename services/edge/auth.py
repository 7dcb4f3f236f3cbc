"""OIDC verification of the Google-signed tokens on Cloud Scheduler → scan and Pub/Sub → worker.

Cloud Run IAM already checks the invoker; the services check again here (issuer, audience,
email allowlist, verified email, expiry) so a misconfigured IAM binding is not the only wall.
The signature and expiry checks are google-auth's `verify_token`; its certs are cached in
memory so a busy worker does not fetch Google's certs document on every push. Pub/Sub and
Cloud Scheduler send the same token for many requests, so a token google-auth verified is
remembered by its exact text, with the certs document that verified it (`_VerifiedTokens`):
a request carrying it again skips the signature and audience checks, which that text, that
document and the verifier's audiences decide, and runs the others again (the times against
the clock of this request, the issuer, the allowlisted and verified email). A refreshed certs
document (a rotated or withdrawn key) makes every remembered token be verified afresh.

Behind Cloud Run's IAM invoker check the container never sees a signature: Cloud Run verifies
the token itself, then forwards it with the JWT's third segment replaced by the literal
`SIGNATURE_REMOVED_BY_GOOGLE`, so the token cannot be replayed
(https://cloud.google.com/run/docs/troubleshooting#signature-removed). A verifier whose policy
says `behind_cloud_run_iam` accepts such a token after every other check (alg RS256 with a
`kid`, issuer, audience, iat/exp within the skew, allowlisted and verified email); anywhere
else a stripped token is refused, because nothing has verified it.

Cloud Run checks `X-Serverless-Authorization` instead of `Authorization` when a request carries
it, and passes `Authorization` through untouched
(https://cloud.google.com/run/docs/authenticating/service-to-service); `verify_request` reads a
request's headers the same way.

The audience is matched as Cloud Run's invoker check matches it, in this one place for the
three services: the service URL with or without a trailing slash, or one of the service's
custom audiences (https://cloud.google.com/run/docs/configuring/custom-audiences;
https://cloud.google.com/run/docs/authenticating/service-to-service, whose samples use the URL
with a slash). A token that passed Cloud Run's check then passes the service's too.

No HTTP here: failures are domain errors. The HTTP layer maps `Unauthenticated` to 401,
`Forbidden` to 403 and `CertsUnavailable` to 503 (so Pub/Sub and Scheduler retry later).
Tokens never appear in an error message or a log line.
"""

from __future__ import annotations

import base64
import binascii
import json
import logging
import math
import threading
import time
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from typing import Any, Protocol

import google.auth.exceptions
import google.auth.transport
import google.auth.transport.requests
from google.oauth2 import id_token

from services.edge.auth_errors import CertsUnavailable, Forbidden, Unauthenticated
from services.edge.certs import CachedCertsRequest, CertsCache
from services.edge.settings import DEFAULT_CLOCK_SKEW_S, GOOGLE_CERTS_URL

logger = logging.getLogger(__name__)

# What Cloud Run puts in place of a token's signature after its own invoker check
# (https://cloud.google.com/run/docs/troubleshooting#signature-removed).
SIGNATURE_REMOVED = "SIGNATURE_REMOVED_BY_GOOGLE"
AUTHORIZATION = "Authorization"
# Checked by Cloud Run in preference to Authorization when present
# (https://cloud.google.com/run/docs/authenticating/service-to-service).
SERVERLESS_AUTHORIZATION = "X-Serverless-Authorization"
GOOGLE_ISSUERS = frozenset({"accounts.google.com", "https://accounts.google.com"})

# Google's ID tokens are about 1 KiB; anything far larger is not one and is not worth parsing.
_MAX_TOKEN_CHARS = 16 * 1024


@dataclass(frozen=True)
class Caller:
    """Who a verified token says the caller is."""

    email: str
    subject: str
    issued_at: int
    expires_at: int


def accepted_audiences(service_url: str, custom_audiences: Iterable[str] = ()) -> tuple[str, ...]:
    """The `aud` values Cloud Run accepts for a service: its URL without and with a trailing
    slash, then its custom audiences (as declared, exactly)."""
    base = service_url.rstrip("/")
    extra = tuple(a for a in custom_audiences if a and a not in (base, base + "/"))
    return (base, base + "/", *dict.fromkeys(extra))


@dataclass(frozen=True)
class AuthPolicy:
    """What a service accepts: its audience (the service URL; `accepted_audiences` says which
    `aud` values match it), any custom audiences, a fixed set of caller emails.

    `behind_cloud_run_iam`: the service runs behind Cloud Run's IAM invoker check, so tokens
    arrive with their signature removed by Google; only then is such a token accepted.
    """

    audience: str
    allowed_emails: frozenset[str]
    certs_url: str = GOOGLE_CERTS_URL
    clock_skew_s: int = DEFAULT_CLOCK_SKEW_S
    behind_cloud_run_iam: bool = False
    custom_audiences: tuple[str, ...] = ()

    @property
    def audiences(self) -> tuple[str, ...]:
        return accepted_audiences(self.audience, self.custom_audiences)


def bearer_token(authorization: str | None) -> str:
    """The token from an `Authorization: Bearer <token>` header value."""
    if not authorization or not authorization.strip():
        raise Unauthenticated("missing Authorization header")
    parts = authorization.split()
    if len(parts) != 2 or parts[0].lower() != "bearer":
        raise Unauthenticated("Authorization header is not 'Bearer <token>'")
    return parts[1]


class RequestHeaders(Protocol):
    """What is read from a request's headers: a dict, or Flask's `request.headers`."""

    def get(self, key: str, /) -> str | None: ...


def invoker_authorization(headers: RequestHeaders) -> str | None:
    """The header value Cloud Run's invoker check reads: `X-Serverless-Authorization` when the
    request carries it (even empty), else `Authorization`."""
    serverless = headers.get(SERVERLESS_AUTHORIZATION)
    return serverless if serverless is not None else headers.get(AUTHORIZATION)


@dataclass(frozen=True)
class _Verified:
    claims: Mapping[str, Any]
    certs: bytes  # the certs document object that verified the signature


class _VerifiedTokens:
    """Tokens google-auth verified (signature, audience, times), by their exact text; at
    most `limit`, the oldest dropped first; thread-safe."""

    def __init__(self, limit: int = 256) -> None:
        self._limit = limit
        self._lock = threading.Lock()
        self._entries: dict[str, _Verified] = {}

    def get(self, token: str) -> _Verified | None:
        with self._lock:
            return self._entries.get(token)

    def add(self, token: str, claims: Mapping[str, Any], certs: bytes) -> None:
        with self._lock:
            self._entries.pop(token, None)
            while len(self._entries) >= self._limit:
                del self._entries[next(iter(self._entries))]
            self._entries[token] = _Verified(claims, certs)

    def discard(self, token: str) -> None:
        with self._lock:
            self._entries.pop(token, None)

    def __len__(self) -> int:
        with self._lock:
            return len(self._entries)


class TokenVerifier:
    """Checks tokens against one `AuthPolicy`; share one per process (it holds the certs and
    the tokens already verified)."""

    def __init__(
        self,
        policy: AuthPolicy,
        certs: CertsCache | None = None,
        *,
        wall_clock: Callable[[], float] = time.time,
    ) -> None:
        if not policy.audience:
            raise ValueError("an audience is required")
        self.policy = policy
        self._certs = certs or CertsCache(policy.certs_url)
        self._verified = _VerifiedTokens()
        self._wall_clock = wall_clock

    def verify_request(self, headers: RequestHeaders) -> Caller:
        """The caller behind a request's headers, read as Cloud Run reads them."""
        return self.verify_header(invoker_authorization(headers))

    def verify_header(self, authorization: str | None) -> Caller:
        """The caller behind an `Authorization` (or `X-Serverless-Authorization`) value."""
        return self.verify(bearer_token(authorization))

    def verify(self, token: str | None) -> Caller:
        """The caller behind `token`; raises Unauthenticated, Forbidden or CertsUnavailable."""
        if not token:
            raise Unauthenticated("missing token")
        header, payload = _unverified_parts(token)
        if token.rsplit(".", 1)[1] == SIGNATURE_REMOVED:
            return self._verify_forwarded(header, payload)
        kid = header.get("kid")
        needed_kid = kid if isinstance(kid, str) else None
        remembered = self._remembered(token, needed_kid)
        if remembered is not None:
            return remembered
        request = CachedCertsRequest(self._certs, needed_kid)
        try:
            claims = id_token.verify_token(
                token,
                request,
                audience=list(self.policy.audiences),
                certs_url=self._certs.certs_url,
                clock_skew_in_seconds=self.policy.clock_skew_s,
            )
        except google.auth.exceptions.TransportError as exc:
            raise CertsUnavailable() from exc
        except ValueError as exc:
            raise Unauthenticated(_reason(str(exc))) from exc
        except (TypeError, KeyError, OverflowError) as exc:
            # A correctly signed token with claims of the wrong type (an `iat` of null, an
            # `aud` list) trips google-auth's arithmetic; it is still just a bad token.
            raise Unauthenticated("token claims have the wrong types") from exc
        caller = self._authorize(claims)
        if request.served is not None:
            self._verified.add(token, claims, request.served)
        return caller

    def _remembered(self, token: str, needed_kid: str | None) -> Caller | None:
        """The caller of a token verified before with the current certs document: its
        signature and audience stand (same text, same keys, same policy); the times, issuer
        and email are checked again now."""
        remembered = self._verified.get(token)
        if remembered is None:
            return None  # never asks for the certs: verify_token does, once
        try:
            certs = self._certs.document(needed_kid)
        except CertsUnavailable:
            return None  # verify_token asks again and reports it
        if remembered.certs is not certs:
            return None  # refreshed since: verified afresh (and remembered anew)
        claims = remembered.claims
        try:
            # google-auth's rule: whole seconds of now inside [iat - skew, exp + skew].
            _check_times(claims, self.policy.clock_skew_s, now=math.floor(self._wall_clock()))
        except Unauthenticated:
            self._verified.discard(token)
            raise
        return self._authorize(claims)

    def _verify_forwarded(self, header: Mapping[str, Any], claims: Mapping[str, Any]) -> Caller:
        """A token Cloud Run verified and forwarded without its signature: every check but the
        signature, and only when the service is configured as behind Cloud Run IAM."""
        if not self.policy.behind_cloud_run_iam:
            raise Unauthenticated(
                "token signature removed by Google, but this service is not configured as "
                "behind Cloud Run IAM (JOBS_AUTH_BEHIND_CLOUD_RUN_IAM), so nothing verified it"
            )
        kid = header.get("kid")
        if not isinstance(kid, str) or not kid:
            raise Unauthenticated("token header has no key id")
        audience = claims.get("aud")
        if not isinstance(audience, str) or audience not in self.policy.audiences:
            raise Unauthenticated("wrong audience")
        _check_times(claims, self.policy.clock_skew_s)
        return self._authorize(claims)

    def _authorize(self, claims: Mapping[str, Any]) -> Caller:
        issuer = claims.get("iss")
        if not isinstance(issuer, str) or issuer not in GOOGLE_ISSUERS:
            raise Unauthenticated("token issuer is not Google")
        email = claims.get("email")
        if not isinstance(email, str) or email not in self.policy.allowed_emails:
            raise Forbidden(f"caller {email!r} is not allowed")
        if claims.get("email_verified") is not True:
            raise Forbidden(f"caller {email!r} has no verified email")
        return Caller(
            email=email,
            subject=str(claims.get("sub", "")),
            issued_at=int(claims["iat"]),
            expires_at=int(claims["exp"]),
        )


def allowed_emails(emails: Iterable[str]) -> frozenset[str]:
    """A normalized allowlist: blanks dropped; an empty result lets nobody in."""
    return frozenset(e.strip() for e in emails if e.strip())


def _check_times(claims: Mapping[str, Any], skew_s: int, now: float | None = None) -> None:
    """`iat` and `exp` as google-auth checks them: present, numeric (and finite: Python's JSON
    reads NaN and 1e400), and `now` inside [iat - skew, exp + skew]."""
    issued_at, expires_at = claims.get("iat"), claims.get("exp")
    for value in (issued_at, expires_at):
        if value is None:
            raise Unauthenticated("token lacks a required claim")
        if isinstance(value, bool) or not isinstance(value, int | float):
            raise Unauthenticated("token claims have the wrong types")
        if not math.isfinite(value):
            raise Unauthenticated("token claims have the wrong types")
    assert isinstance(issued_at, int | float) and isinstance(expires_at, int | float)
    now = time.time() if now is None else now
    if now < issued_at - skew_s:
        raise Unauthenticated("token used before its issue time")
    if now > expires_at + skew_s:
        raise Unauthenticated("token expired")


def _unverified_parts(token: str) -> tuple[dict[str, Any], dict[str, Any]]:
    """The JOSE header and the claims, checked for shape before google-auth sees the token.

    google-auth quotes a malformed token in its error messages; checking the shape here keeps
    the token out of every message and traceback we raise.
    """
    if len(token) > _MAX_TOKEN_CHARS:
        raise Unauthenticated("malformed token: too long")
    segments = token.split(".")
    if len(segments) != 3 or not all(segments):
        raise Unauthenticated("malformed token: not three segments")
    try:
        header = json.loads(_b64url(segments[0]))
        payload = json.loads(_b64url(segments[1]))
        if segments[2] != SIGNATURE_REMOVED:
            _b64url(segments[2])
    except (ValueError, binascii.Error, RecursionError) as exc:
        # RecursionError: JSON nested deeper than the interpreter's limit (a 16 KiB token of
        # "[" is enough); it is a malformed token like any other, never a crash.
        raise Unauthenticated("malformed token: segments are not base64url JSON") from exc
    if not isinstance(header, dict) or not isinstance(payload, dict):
        raise Unauthenticated("malformed token: header or payload is not a JSON object")
    if header.get("alg") != "RS256":
        raise Unauthenticated("malformed token: alg is not RS256")
    return header, payload


def _b64url(segment: str) -> bytes:
    return base64.urlsafe_b64decode(segment + "=" * (-len(segment) % 4))


# google-auth's messages, mapped to fixed reasons we can log and return.
_REASONS = (
    ("expired", "token expired"),
    ("too early", "token used before its issue time"),
    ("audience", "wrong audience"),
    ("key id", "token signed by an unknown key"),
    ("signature", "invalid signature"),
    ("required claim", "token lacks a required claim"),
)


def _reason(message: str) -> str:
    lowered = message.lower()
    for needle, reason in _REASONS:
        if needle in lowered:
            return reason
    return "invalid token"
