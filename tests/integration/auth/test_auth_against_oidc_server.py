"""The verifier against the local issuer over HTTP, with google-auth's real requests transport."""

from __future__ import annotations

import time
from collections.abc import Callable

import pytest
import requests

from emulators.oidc.issuer import Issuer
from emulators.oidc.server import OidcServer, start
from services.edge.auth import AuthPolicy, TokenVerifier
from services.edge.auth_errors import CertsUnavailable, Forbidden, Unauthenticated

AUDIENCE = "https://scan.example.run.app/"
EMAIL = "scheduler@deferred-jobs-local.iam.gserviceaccount.com"


def verifier_for(server: OidcServer) -> TokenVerifier:
    return TokenVerifier(AuthPolicy(AUDIENCE, frozenset({EMAIL}), certs_url=server.certs_url))


def _tampered(issuer: Issuer) -> str:
    header, _, signature = issuer.mint(AUDIENCE, "someone@example.com").split(".")
    return ".".join([header, issuer.mint(AUDIENCE, EMAIL).split(".")[1], signature])


# name -> (header value built from the issuer, expected error)
CASES: dict[str, tuple[Callable[[Issuer], str | None], type[Exception]]] = {
    "no token": (lambda i: None, Unauthenticated),
    "not bearer": (lambda i: "Basic " + i.mint(AUDIENCE, EMAIL), Unauthenticated),
    "garbage": (lambda i: "Bearer garbage", Unauthenticated),
    "expired": (
        lambda i: "Bearer " + i.mint(AUDIENCE, EMAIL, lifetime_s=60, now=time.time() - 600),
        Unauthenticated,
    ),
    "wrong audience": (lambda i: "Bearer " + i.mint(AUDIENCE + "x", EMAIL), Unauthenticated),
    "wrong issuer": (
        lambda i: "Bearer " + i.mint(AUDIENCE, EMAIL, extra_claims={"iss": "https://x.example"}),
        Unauthenticated,
    ),
    "tampered signature": (lambda i: "Bearer " + _tampered(i), Unauthenticated),
    "foreign key": (lambda i: "Bearer " + Issuer(kid=i.kid).mint(AUDIENCE, EMAIL), Unauthenticated),
    "wrong email": (lambda i: "Bearer " + i.mint(AUDIENCE, "x@example.com"), Forbidden),
    "unverified email": (
        lambda i: "Bearer " + i.mint(AUDIENCE, EMAIL, extra_claims={"email_verified": False}),
        Forbidden,
    ),
}


@pytest.mark.parametrize("case", sorted(CASES))
def test_bad_requests_are_rejected_with_the_right_error(oidc_server: OidcServer, case: str) -> None:
    make_header, error = CASES[case]
    with pytest.raises(error):
        verifier_for(oidc_server).verify_header(make_header(oidc_server.issuer))


def test_right_token_is_accepted(oidc_server: OidcServer) -> None:
    token = oidc_server.issuer.mint(AUDIENCE, EMAIL)
    caller = verifier_for(oidc_server).verify_header(f"Bearer {token}")
    assert caller.email == EMAIL


def test_token_from_the_token_endpoint_is_accepted(oidc_server: OidcServer) -> None:
    response = requests.post(
        oidc_server.token_url, json={"audience": AUDIENCE, "email": EMAIL}, timeout=5
    )
    assert verifier_for(oidc_server).verify(response.json()["token"]).email == EMAIL


def test_certs_are_fetched_once_across_many_verifications() -> None:
    with start() as server:
        verifier = verifier_for(server)
        for _ in range(50):
            verifier.verify(server.issuer.mint(AUDIENCE, EMAIL))
        with pytest.raises(Forbidden):
            verifier.verify(server.issuer.mint(AUDIENCE, "x@example.com"))
        assert server.certs_requests == 1


def test_each_verifier_holds_its_own_cache() -> None:
    with start() as server:
        for _ in range(3):
            verifier_for(server).verify(server.issuer.mint(AUDIENCE, EMAIL))
        assert server.certs_requests == 3


def test_unreachable_certs_server_is_certs_unavailable() -> None:
    server = start()
    verifier = verifier_for(server)
    token = server.issuer.mint(AUDIENCE, EMAIL)
    server.stop()
    with pytest.raises(CertsUnavailable):
        verifier.verify(token)


def test_cached_certs_survive_the_certs_server_going_away() -> None:
    server = start()
    verifier = verifier_for(server)
    verifier.verify(server.issuer.mint(AUDIENCE, EMAIL))
    server.stop()
    assert verifier.verify(server.issuer.mint(AUDIENCE, EMAIL)).email == EMAIL
