"""The local issuer's tokens pass google-auth's verification exactly like Google's would."""

from __future__ import annotations

import time
from typing import Any

import google.auth.exceptions
import google.auth.transport.requests
import pytest
import requests
from google.oauth2 import id_token

from emulators.oidc.issuer import GOOGLE_ISSUER, Issuer, subject_for
from emulators.oidc.server import OidcServer, start

AUDIENCE = "https://worker.example.run.app/push"
EMAIL = "pusher@deferred-jobs-local.iam.gserviceaccount.com"


def verify(server: OidcServer, token: str, audience: str = AUDIENCE) -> dict[str, Any]:
    request = google.auth.transport.requests.Request()
    claims = id_token.verify_token(token, request, audience=audience, certs_url=server.certs_url)
    return dict(claims)


def test_minted_token_verifies_with_google_auth_and_carries_google_claims(
    oidc_server: OidcServer,
) -> None:
    now = time.time()
    claims = verify(oidc_server, oidc_server.issuer.mint(AUDIENCE, EMAIL, now=now))

    assert claims["iss"] == GOOGLE_ISSUER
    assert claims["aud"] == AUDIENCE
    assert claims["email"] == EMAIL
    assert claims["email_verified"] is True
    assert claims["sub"] == subject_for(EMAIL)
    assert claims["azp"] == subject_for(EMAIL)
    assert claims["exp"] == int(now) + 3600
    assert claims["iat"] == int(now)


def test_subject_is_stable_per_email_and_differs_between_emails() -> None:
    assert subject_for(EMAIL) == subject_for(EMAIL)
    assert subject_for(EMAIL) != subject_for("other@example.com")
    assert len(subject_for(EMAIL)) == 21


def test_extra_claims_override_defaults(oidc_server: OidcServer) -> None:
    token = oidc_server.issuer.mint(
        AUDIENCE, EMAIL, extra_claims={"email_verified": False, "iss": "https://evil.example"}
    )
    claims = verify(oidc_server, token)
    assert claims["email_verified"] is False
    assert claims["iss"] == "https://evil.example"


def test_certs_document_has_googles_shape(oidc_server: OidcServer) -> None:
    response = requests.get(oidc_server.certs_url, timeout=5)
    assert response.status_code == 200
    body = response.json()
    assert list(body) == [oidc_server.issuer.kid]
    assert body[oidc_server.issuer.kid].startswith("-----BEGIN CERTIFICATE-----")


def test_tampered_token_is_rejected(oidc_server: OidcServer) -> None:
    header, _payload, signature = oidc_server.issuer.mint(AUDIENCE, EMAIL).split(".")
    other = oidc_server.issuer.mint(AUDIENCE, "attacker@example.com").split(".")[1]
    with pytest.raises(ValueError):
        verify(oidc_server, ".".join([header, other, signature]))


def test_token_from_another_key_is_rejected(oidc_server: OidcServer) -> None:
    stranger = Issuer(kid=oidc_server.issuer.kid)
    with pytest.raises(ValueError):
        verify(oidc_server, stranger.mint(AUDIENCE, EMAIL))


def test_expired_token_is_rejected(oidc_server: OidcServer) -> None:
    token = oidc_server.issuer.mint(AUDIENCE, EMAIL, lifetime_s=60, now=time.time() - 3600)
    with pytest.raises(ValueError, match="expired"):
        verify(oidc_server, token)


def test_wrong_audience_is_rejected(oidc_server: OidcServer) -> None:
    token = oidc_server.issuer.mint("https://scan.example.run.app", EMAIL)
    with pytest.raises(ValueError, match="audience"):
        verify(oidc_server, token)


def test_token_endpoint_returns_a_verifiable_token(oidc_server: OidcServer) -> None:
    response = requests.post(
        oidc_server.token_url, json={"audience": AUDIENCE, "email": EMAIL}, timeout=5
    )
    assert response.status_code == 200
    claims = verify(oidc_server, response.json()["token"])
    assert claims["email"] == EMAIL


def test_token_endpoint_honours_lifetime(oidc_server: OidcServer) -> None:
    response = requests.post(
        oidc_server.token_url,
        json={"audience": AUDIENCE, "email": EMAIL, "lifetime_s": 120},
        timeout=5,
    )
    claims = verify(oidc_server, response.json()["token"])
    assert claims["exp"] - claims["iat"] == 120


@pytest.mark.parametrize(
    ("body", "complaint"),
    [
        (b"not json", "not JSON"),
        (b"[1, 2]", "JSON object"),
        (b'{"email": "a@example.com"}', "'audience'"),
        (b'{"audience": "x"}', "'email'"),
        (b'{"audience": "x", "email": ""}', "'email'"),
        (b'{"audience": "x", "email": "a@example.com", "lifetime_s": "long"}', "lifetime_s"),
        (b'{"audience": "x", "email": "a@example.com", "lifetime_s": 0}', "lifetime_s"),
    ],
)
def test_token_endpoint_rejects_bad_requests_with_a_json_error(
    oidc_server: OidcServer, body: bytes, complaint: str
) -> None:
    response = requests.post(
        oidc_server.token_url,
        data=body,
        headers={"Content-Type": "application/json"},
        timeout=5,
    )
    assert response.status_code == 400
    assert complaint in response.json()["error"]


def test_unknown_paths_are_not_found(oidc_server: OidcServer) -> None:
    assert requests.get(oidc_server.url + "/nope", timeout=5).status_code == 404
    assert requests.post(oidc_server.url + "/nope", json={}, timeout=5).status_code == 404


def test_certs_requests_are_counted() -> None:
    with start() as server:
        for _ in range(3):
            requests.get(server.certs_url, timeout=5)
        assert server.certs_requests == 3


def test_stopped_server_refuses_connections() -> None:
    server = start()
    url = server.certs_url
    server.stop()
    with pytest.raises(requests.ConnectionError):
        requests.get(url, timeout=5)


def test_verifying_against_a_stopped_issuer_raises_transport_error() -> None:
    server = start()
    certs_url = server.certs_url
    server.stop()
    with pytest.raises(google.auth.exceptions.TransportError):
        id_token.verify_token(
            Issuer().mint(AUDIENCE, EMAIL),
            google.auth.transport.requests.Request(),
            audience=AUDIENCE,
            certs_url=certs_url,
        )
