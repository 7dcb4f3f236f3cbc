"""Who is asking, and may they act: IAP's signed header verified, the role looked up.

Identity-Aware Proxy enabled on the console's Cloud Run service signs the user it let in into
`X-Goog-IAP-JWT-Assertion`: an ES256 JWT from issuer `https://cloud.google.com/iap`, audience
`/projects/PROJECT_NUMBER/locations/REGION/services/SERVICE_NAME`, the user's `email`. The
console checks it (signature against IAP's published keys, algorithm, issuer, audience,
expiry), never only trusts it: the header is what stops a request that reached the service
some other way (https://cloud.google.com/iap/docs/signed-headers-howto). The keys come through
the same `CertsCache` the services' OIDC check uses (services/edge/certs.py: fetched at most
once per max-age, refreshed for an unknown key ID), and the signature and times are
google-auth's `verify_token`, as in Google's own sample.

Roles are by that email: an operator may view and act, a viewer may only view (a POST from a
viewer is refused). Locally a stand-in identity replaces the header (settings refuse it on
Cloud Run); every page then says so.
"""

from __future__ import annotations

import base64
import binascii
import json
from collections.abc import Mapping
from dataclasses import dataclass
from enum import StrEnum
from typing import Any

import google.auth.exceptions
import google.auth.transport
from google.oauth2 import id_token

from services.edge.auth_errors import Forbidden, Unauthenticated
from services.edge.certs import CachedCertsRequest, CertsCache

IAP_HEADER = "X-Goog-IAP-JWT-Assertion"
IAP_ISSUER = "https://cloud.google.com/iap"
IAP_ALGORITHM = "ES256"
# An IAP assertion is well under 2 KiB; anything far larger is not one.
_MAX_TOKEN_CHARS = 16 * 1024


class Role(StrEnum):
    VIEWER = "viewer"  # reads every page, changes nothing
    OPERATOR = "operator"  # reads, and acts: bulk actions, replay, control


@dataclass(frozen=True)
class Principal:
    email: str
    role: Role
    stand_in: bool = False  # a local stand-in, not an IAP-verified user

    @property
    def may_act(self) -> bool:
        return self.role is Role.OPERATOR


@dataclass(frozen=True)
class Roles:
    viewers: frozenset[str]
    operators: frozenset[str]

    def of(self, email: str) -> Role:
        """The role of `email`; Forbidden when it has none."""
        key = email.lower()
        if key in self.operators:
            return Role.OPERATOR
        if key in self.viewers:
            return Role.VIEWER
        raise Forbidden(f"{email} is neither a viewer nor an operator of this console")


class IapVerifier:
    """Checks IAP's signed header and answers the user's email."""

    def __init__(
        self,
        audience: str,
        keys_url: str,
        *,
        clock_skew_s: int = 10,
        request: google.auth.transport.Request | None = None,
    ) -> None:
        self._audience = audience
        self._keys = CertsCache(keys_url, request)
        self._skew = clock_skew_s

    def verify(self, headers: Mapping[str, str] | Any) -> str:
        """The verified email; Unauthenticated naming what is wrong (never the token),
        CertsUnavailable when IAP's keys cannot be fetched."""
        token = headers.get(IAP_HEADER)
        if not token:
            raise Unauthenticated(f"missing {IAP_HEADER}: the console is served through IAP")
        if len(token) > _MAX_TOKEN_CHARS:
            raise Unauthenticated(f"{IAP_HEADER} is too large to be an IAP assertion")
        header = _header(token)
        if header.get("alg") != IAP_ALGORITHM:
            raise Unauthenticated(f"{IAP_HEADER}: algorithm must be {IAP_ALGORITHM}")
        kid = header.get("kid")
        request = CachedCertsRequest(self._keys, kid if isinstance(kid, str) else None)
        try:
            claims = id_token.verify_token(
                token,
                request,
                audience=self._audience,
                certs_url=self._keys.certs_url,
                clock_skew_in_seconds=self._skew,
            )
        except (ValueError, google.auth.exceptions.GoogleAuthError) as exc:
            if isinstance(exc, google.auth.exceptions.TransportError):
                raise
            raise Unauthenticated(f"{IAP_HEADER} refused: {_reason(exc)}") from exc
        if claims.get("iss") != IAP_ISSUER:
            raise Unauthenticated(f"{IAP_HEADER}: issuer must be {IAP_ISSUER}")
        email = claims.get("email")
        if not isinstance(email, str) or "@" not in email:
            raise Unauthenticated(f"{IAP_HEADER}: no email claim")
        return email


def _header(token: str) -> dict[str, Any]:
    segment = token.split(".", 1)[0]
    try:
        header = json.loads(base64.urlsafe_b64decode(segment + "=" * (-len(segment) % 4)))
    except (ValueError, binascii.Error) as exc:
        raise Unauthenticated(f"{IAP_HEADER} is not a JWT") from exc
    if not isinstance(header, dict):
        raise Unauthenticated(f"{IAP_HEADER} is not a JWT")
    return header


def _reason(exc: Exception) -> str:
    """google-auth's message without the token's claims (it quotes them for some failures)."""
    text = str(exc).split(":", 1)[0]
    return text[:120]
