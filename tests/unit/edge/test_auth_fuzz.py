"""Fuzzing the Authorization header against the verifier: whatever arrives, the verifier
answers with a Caller, Unauthenticated or Forbidden, and never anything else (a crash here
would be a 500 before authentication on both services)."""

from __future__ import annotations

import base64
import json
import math
import time
from collections.abc import Mapping
from typing import Any

import google.auth.transport
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from emulators.oidc.issuer import Issuer
from services.edge.auth import SIGNATURE_REMOVED, AuthPolicy, Caller, TokenVerifier
from services.edge.auth_errors import Forbidden, Unauthenticated
from services.edge.certs import CertsCache

CERTS_URL = "https://certs.example/oauth2/v1/certs"
AUDIENCE = "https://scan.example.run.app/"
EMAIL = "scheduler@p.iam.gserviceaccount.com"

_ISSUER = Issuer()


class _Certs(google.auth.transport.Request):
    """Serves the issuer's certs from memory."""

    def __call__(self, url: str, method: str = "GET", **kwargs: Any) -> Any:
        issuer_certs = json.dumps(_ISSUER.certs()).encode()

        class _Ok(google.auth.transport.Response):
            status = 200
            headers: Mapping[str, str] = {}
            data = issuer_certs

        return _Ok()


def _verifier() -> TokenVerifier:
    policy = AuthPolicy(AUDIENCE, frozenset({EMAIL}), certs_url=CERTS_URL)
    return TokenVerifier(policy, CertsCache(CERTS_URL, _Certs()))


def _segment(raw: bytes) -> str:
    return base64.urlsafe_b64encode(raw).rstrip(b"=").decode("ascii")


def _nested(depth: int, opener: str = "[") -> str:
    closer = {"[": "]", "{": "}"}[opener]
    if opener == "[":
        return opener * depth + closer * depth
    return '{"a":' * depth + "1" + closer * depth


def test_a_token_whose_header_is_deeply_nested_json_is_unauthenticated() -> None:
    # Under the 16 KiB token cap, yet far deeper than the interpreter's recursion limit.
    header = _segment(_nested(5_000).encode())
    payload = _segment(b"{}")
    with pytest.raises(Unauthenticated, match="malformed token"):
        _verifier().verify(f"{header}.{payload}.c2ln")


def test_a_token_whose_payload_is_deeply_nested_json_is_unauthenticated() -> None:
    header = _segment(b'{"alg":"RS256"}')
    payload = _segment(_nested(1_500, "{").encode())
    with pytest.raises(Unauthenticated, match="malformed token"):
        _verifier().verify(f"{header}.{payload}.c2ln")


_JSON = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False) | st.text(max_size=20),
    lambda inner: (
        st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=8), inner, max_size=4)
    ),
    max_leaves=20,
)
_SEGMENT = (
    st.binary(max_size=200).map(_segment)
    | _JSON.map(lambda value: _segment(json.dumps(value).encode()))
    | st.integers(min_value=1, max_value=6_000).map(lambda d: _segment(_nested(d).encode()))
    | st.text(max_size=60)
)
_TOKEN = st.tuples(_SEGMENT, _SEGMENT, _SEGMENT).map(".".join) | st.text(max_size=300)
_CLAIM_VALUES = _JSON | st.integers(min_value=-(2**70), max_value=2**70)
_SIGNED = st.dictionaries(
    st.sampled_from(["iss", "aud", "email", "email_verified", "iat", "exp", "sub", "x"]),
    _CLAIM_VALUES,
    max_size=4,
).map(lambda claims: _ISSUER.mint(AUDIENCE, EMAIL, extra_claims=claims))
_HEADER = (
    st.none()
    | st.text(max_size=100)
    | _TOKEN.map(lambda token: "Bearer " + token)
    | _SIGNED.map(lambda token: "Bearer " + token)
)


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(_HEADER)
def test_any_authorization_header_yields_a_caller_or_a_refusal_and_nothing_else(
    header: str | None,
) -> None:
    try:
        caller = _verifier().verify_header(header)
    except (Unauthenticated, Forbidden):
        return
    assert isinstance(caller, Caller)
    assert caller.email == EMAIL
    assert caller.expires_at > time.time() - 60


def _stripped(token: str) -> str:
    return token.rsplit(".", 1)[0] + "." + SIGNATURE_REMOVED


_FORWARDED_HEADER = _segment(json.dumps({"alg": "RS256", "kid": _ISSUER.kid}).encode())
# Claims as Cloud Run might forward them, non-finite numbers included (json.dumps writes NaN and
# Infinity, and Python's json.loads reads them back).
_FORWARDED_CLAIMS = st.dictionaries(
    st.sampled_from(["iss", "aud", "email", "email_verified", "iat", "exp", "sub"]),
    st.sampled_from([math.nan, math.inf, -math.inf]) | _CLAIM_VALUES | st.floats(),
    max_size=7,
).map(
    lambda claims: {
        "iss": "https://accounts.google.com",
        "aud": AUDIENCE,
        "email": EMAIL,
        "email_verified": True,
        "iat": time.time(),
        "exp": time.time() + 60,
        **claims,
    }
)
_FORWARDED = (
    _SIGNED.map(_stripped)
    | st.tuples(_SEGMENT, _SEGMENT).map(lambda parts: ".".join([*parts, SIGNATURE_REMOVED]))
    | _FORWARDED_CLAIMS.map(
        lambda claims: (
            f"{_FORWARDED_HEADER}.{_segment(json.dumps(claims).encode())}." + SIGNATURE_REMOVED
        )
    )
)


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(_FORWARDED, st.booleans())
def test_any_forwarded_token_yields_a_caller_or_a_refusal_behind_iam_or_not(
    token: str, behind_iam: bool
) -> None:
    policy = AuthPolicy(
        AUDIENCE, frozenset({EMAIL}), certs_url=CERTS_URL, behind_cloud_run_iam=behind_iam
    )
    verifier = TokenVerifier(policy, CertsCache(CERTS_URL, _Certs()))
    try:
        caller = verifier.verify_request({"X-Serverless-Authorization": "Bearer " + token})
    except (Unauthenticated, Forbidden):
        return
    assert behind_iam
    assert caller.email == EMAIL
