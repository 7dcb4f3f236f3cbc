"""Token verification rules, with certs served from memory (no network)."""

from __future__ import annotations

import base64
import json
import threading
import time
from collections.abc import Mapping
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import google.auth.exceptions
import google.auth.transport
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from emulators.oidc.issuer import Issuer
from services.edge.auth import (
    SIGNATURE_REMOVED,
    AuthPolicy,
    TokenVerifier,
    accepted_audiences,
    allowed_emails,
    bearer_token,
    invoker_authorization,
)
from services.edge.auth_errors import CertsUnavailable, Forbidden, Unauthenticated
from services.edge.certs import CertsCache

CERTS_URL = "https://certs.example/oauth2/v1/certs"
AUDIENCE = "https://worker.example.run.app/push"
EMAIL = "pusher@p.iam.gserviceaccount.com"


class _Response(google.auth.transport.Response):
    def __init__(self, status: int, data: bytes, headers: Mapping[str, str]) -> None:
        self._status, self._data, self._headers = status, data, headers

    @property
    def status(self) -> int:
        return self._status

    @property
    def headers(self) -> Mapping[str, str]:
        return self._headers

    @property
    def data(self) -> bytes:
        return self._data


class FakeCertsEndpoint(google.auth.transport.Request):
    """Serves one issuer's certs and counts fetches; can be told to fail."""

    def __init__(self, issuer: Issuer, headers: Mapping[str, str] | None = None) -> None:
        self.issuer = issuer
        self.headers = dict(headers or {})
        self.fetches = 0
        self.failure: str | None = None
        self.delay_s = 0.0

    def __call__(
        self,
        url: str,
        method: str = "GET",
        body: bytes | None = None,
        headers: Mapping[str, str] | None = None,
        timeout: float | None = None,
        **kwargs: Any,
    ) -> google.auth.transport.Response:
        assert url == CERTS_URL
        self.fetches += 1
        time.sleep(self.delay_s)
        if self.failure == "connect":
            raise google.auth.exceptions.TransportError("connection refused")
        if self.failure == "500":
            return _Response(500, b"oops", {})
        if self.failure == "html":
            return _Response(200, b"<html>", {})
        return _Response(200, json.dumps(self.issuer.certs()).encode(), self.headers)


class FakeClock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


@pytest.fixture(scope="module")
def issuer() -> Issuer:
    return Issuer()


@pytest.fixture
def endpoint(issuer: Issuer) -> FakeCertsEndpoint:
    return FakeCertsEndpoint(issuer)


@pytest.fixture
def clock() -> FakeClock:
    return FakeClock()


def make_verifier(
    endpoint: FakeCertsEndpoint, clock: FakeClock | None = None, **cache: float
) -> TokenVerifier:
    policy = AuthPolicy(AUDIENCE, frozenset({EMAIL}), certs_url=CERTS_URL)
    return TokenVerifier(
        policy, CertsCache(CERTS_URL, endpoint, clock=clock or FakeClock(), **cache)
    )


@pytest.mark.parametrize(
    ("header", "token"),
    [("Bearer abc.def.ghi", "abc.def.ghi"), ("bearer  tok", "tok"), ("BEARER tok ", "tok")],
)
def test_bearer_token_is_taken_from_the_authorization_header(header: str, token: str) -> None:
    assert bearer_token(header) == token


@pytest.mark.parametrize("header", [None, "", "   ", "Basic dXNlcg==", "Bearer", "Bearer a b"])
def test_missing_or_non_bearer_authorization_is_unauthenticated(header: str | None) -> None:
    with pytest.raises(Unauthenticated):
        bearer_token(header)


def test_right_token_yields_the_caller(issuer: Issuer, endpoint: FakeCertsEndpoint) -> None:
    now = int(time.time())
    caller = make_verifier(endpoint).verify(issuer.mint(AUDIENCE, EMAIL, now=now))
    assert caller.email == EMAIL
    assert (caller.issued_at, caller.expires_at) == (now, now + 3600)


def test_verify_header_checks_the_bearer_token(issuer: Issuer, endpoint: FakeCertsEndpoint) -> None:
    verifier = make_verifier(endpoint)
    assert verifier.verify_header("Bearer " + issuer.mint(AUDIENCE, EMAIL)).email == EMAIL
    with pytest.raises(Unauthenticated, match="missing Authorization"):
        verifier.verify_header(None)


def test_token_within_clock_skew_is_accepted(issuer: Issuer, endpoint: FakeCertsEndpoint) -> None:
    # Expired 5 s ago: inside the default 10 s skew.
    token = issuer.mint(AUDIENCE, EMAIL, lifetime_s=60, now=time.time() - 65)
    assert make_verifier(endpoint).verify(token).email == EMAIL


def test_token_expired_beyond_clock_skew_is_unauthenticated(
    issuer: Issuer, endpoint: FakeCertsEndpoint
) -> None:
    token = issuer.mint(AUDIENCE, EMAIL, lifetime_s=60, now=time.time() - 90)
    with pytest.raises(Unauthenticated, match="expired"):
        make_verifier(endpoint).verify(token)


def test_token_issued_in_the_future_is_unauthenticated(
    issuer: Issuer, endpoint: FakeCertsEndpoint
) -> None:
    token = issuer.mint(AUDIENCE, EMAIL, now=time.time() + 600)
    with pytest.raises(Unauthenticated, match="before its issue time"):
        make_verifier(endpoint).verify(token)


def test_audience_must_match_the_url_up_to_one_trailing_slash(
    issuer: Issuer, endpoint: FakeCertsEndpoint
) -> None:
    # The URL with a slash is accepted, as Cloud Run accepts it (the audience tests below).
    verifier = make_verifier(endpoint)
    for audience in (AUDIENCE + "//", AUDIENCE.upper(), "https://worker.example.run.app"):
        with pytest.raises(Unauthenticated, match="wrong audience"):
            verifier.verify(issuer.mint(audience, EMAIL))


def test_audience_list_claim_is_not_accepted(issuer: Issuer, endpoint: FakeCertsEndpoint) -> None:
    token = issuer.mint(AUDIENCE, EMAIL, extra_claims={"aud": [AUDIENCE, "other"]})
    with pytest.raises(Unauthenticated):
        make_verifier(endpoint).verify(token)


@pytest.mark.parametrize("iss", ["accounts.google.com", "https://accounts.google.com"])
def test_both_google_issuer_spellings_are_accepted(
    issuer: Issuer, endpoint: FakeCertsEndpoint, iss: str
) -> None:
    token = issuer.mint(AUDIENCE, EMAIL, extra_claims={"iss": iss})
    assert make_verifier(endpoint).verify(token).email == EMAIL


@pytest.mark.parametrize("iss", ["https://evil.example", "http://accounts.google.com", None])
def test_other_issuers_are_unauthenticated(
    issuer: Issuer, endpoint: FakeCertsEndpoint, iss: str | None
) -> None:
    token = issuer.mint(AUDIENCE, EMAIL, extra_claims={"iss": iss})
    with pytest.raises(Unauthenticated, match="issuer"):
        make_verifier(endpoint).verify(token)


@pytest.mark.parametrize("email", ["someone@else.com", EMAIL.upper(), "", None])
def test_email_outside_the_allowlist_is_forbidden(
    issuer: Issuer, endpoint: FakeCertsEndpoint, email: str | None
) -> None:
    token = issuer.mint(AUDIENCE, EMAIL, extra_claims={"email": email})
    with pytest.raises(Forbidden):
        make_verifier(endpoint).verify(token)


@pytest.mark.parametrize("verified", [False, "true", None])
def test_unverified_email_is_forbidden(
    issuer: Issuer, endpoint: FakeCertsEndpoint, verified: object
) -> None:
    token = issuer.mint(AUDIENCE, EMAIL, extra_claims={"email_verified": verified})
    with pytest.raises(Forbidden, match="verified"):
        make_verifier(endpoint).verify(token)


def test_empty_allowlist_lets_nobody_in(issuer: Issuer, endpoint: FakeCertsEndpoint) -> None:
    policy = AuthPolicy(AUDIENCE, allowed_emails(["", "  "]), certs_url=CERTS_URL)
    verifier = TokenVerifier(policy, CertsCache(CERTS_URL, endpoint))
    with pytest.raises(Forbidden):
        verifier.verify(issuer.mint(AUDIENCE, EMAIL))


def test_allowlist_strips_blanks() -> None:
    assert allowed_emails([" a@x.com", "", "b@x.com "]) == {"a@x.com", "b@x.com"}


def test_token_signed_by_another_key_with_the_same_kid_is_unauthenticated(
    issuer: Issuer, endpoint: FakeCertsEndpoint
) -> None:
    forger = Issuer(kid=issuer.kid)
    with pytest.raises(Unauthenticated, match="invalid signature"):
        make_verifier(endpoint).verify(forger.mint(AUDIENCE, EMAIL))


def test_tampered_payload_is_unauthenticated(issuer: Issuer, endpoint: FakeCertsEndpoint) -> None:
    header, _, signature = issuer.mint(AUDIENCE, "nobody@x.com").split(".")
    payload = issuer.mint(AUDIENCE, EMAIL).split(".")[1]
    with pytest.raises(Unauthenticated, match="invalid signature"):
        make_verifier(endpoint).verify(f"{header}.{payload}.{signature}")


def test_unsigned_alg_none_token_is_unauthenticated(
    issuer: Issuer, endpoint: FakeCertsEndpoint
) -> None:
    _, payload, signature = issuer.mint(AUDIENCE, EMAIL).split(".")
    header = "eyJhbGciOiJub25lIiwidHlwIjoiSldUIn0"  # {"alg":"none","typ":"JWT"}
    with pytest.raises(Unauthenticated, match="alg"):
        make_verifier(endpoint).verify(f"{header}.{payload}.{signature}")


@pytest.mark.parametrize(
    "token", ["", "garbage", "a.b", "a.b.c", "a..c", "!!!.???.***", "e30.e30.e30", "x" * 20000]
)
def test_garbage_tokens_are_unauthenticated(endpoint: FakeCertsEndpoint, token: str) -> None:
    with pytest.raises(Unauthenticated):
        make_verifier(endpoint).verify(token)


_SHARED_ISSUER = Issuer()


@settings(max_examples=200, deadline=None)
@given(st.text(max_size=300) | st.from_regex(r"[A-Za-z0-9_=-]*\.[A-Za-z0-9_=-]*\.[A-Za-z0-9_=-]*"))
def test_random_strings_are_unauthenticated_and_raise_nothing_else(token: str) -> None:
    verifier = make_verifier(FakeCertsEndpoint(_SHARED_ISSUER))
    with pytest.raises(Unauthenticated):
        verifier.verify(token)


def test_error_messages_never_contain_the_token(
    issuer: Issuer, endpoint: FakeCertsEndpoint
) -> None:
    verifier = make_verifier(endpoint)
    good = issuer.mint(AUDIENCE, EMAIL)
    samples = [
        good + "x",
        good.replace(".", "..", 1),
        issuer.mint("other", EMAIL),
        issuer.mint(AUDIENCE, EMAIL, lifetime_s=1, now=0),
    ]
    for token in samples:
        with pytest.raises(Unauthenticated) as caught:
            verifier.verify(token)
        chain: BaseException | None = caught.value
        while chain is not None:
            assert token not in str(chain)
            assert token.split(".")[2] not in str(chain)
            chain = chain.__cause__


def test_certs_are_fetched_once_for_many_verifications(
    issuer: Issuer, endpoint: FakeCertsEndpoint
) -> None:
    verifier = make_verifier(endpoint)
    for _ in range(25):
        verifier.verify(issuer.mint(AUDIENCE, EMAIL))
    assert endpoint.fetches == 1


def test_concurrent_first_verifications_fetch_certs_once(issuer: Issuer) -> None:
    endpoint = FakeCertsEndpoint(issuer)
    endpoint.delay_s = 0.05  # widen the window in which racing threads would each fetch
    verifier = make_verifier(endpoint)
    tokens = [issuer.mint(AUDIENCE, EMAIL) for _ in range(4)]
    barrier = threading.Barrier(8)

    def verify_all() -> list[str]:
        barrier.wait()
        return [verifier.verify(token).email for token in tokens]

    with ThreadPoolExecutor(8) as pool:
        results = list(pool.map(lambda _: verify_all(), range(8)))
    assert results == [[EMAIL] * 4] * 8
    assert endpoint.fetches == 1


def test_certs_are_refetched_after_the_ttl(
    issuer: Issuer, endpoint: FakeCertsEndpoint, clock: FakeClock
) -> None:
    verifier = make_verifier(endpoint, clock, max_ttl_s=300)
    verifier.verify(issuer.mint(AUDIENCE, EMAIL))
    clock.now += 299
    verifier.verify(issuer.mint(AUDIENCE, EMAIL))
    assert endpoint.fetches == 1
    clock.now += 1
    verifier.verify(issuer.mint(AUDIENCE, EMAIL))
    assert endpoint.fetches == 2


def test_cache_control_max_age_shortens_the_ttl(issuer: Issuer, clock: FakeClock) -> None:
    endpoint = FakeCertsEndpoint(issuer, {"Cache-Control": "public, max-age=60, must-revalidate"})
    verifier = make_verifier(endpoint, clock, max_ttl_s=300)
    verifier.verify(issuer.mint(AUDIENCE, EMAIL))
    clock.now += 60
    verifier.verify(issuer.mint(AUDIENCE, EMAIL))
    assert endpoint.fetches == 2


def test_rotated_key_is_picked_up_without_waiting_for_the_ttl(clock: FakeClock) -> None:
    old, new = Issuer(), Issuer()
    endpoint = FakeCertsEndpoint(old)
    verifier = make_verifier(endpoint, clock, refresh_floor_s=30)
    verifier.verify(old.mint(AUDIENCE, EMAIL))
    endpoint.issuer = new
    clock.now += 30
    assert verifier.verify(new.mint(AUDIENCE, EMAIL)).email == EMAIL
    assert endpoint.fetches == 2


def test_unknown_key_ids_refetch_at_most_once_per_floor(
    issuer: Issuer, endpoint: FakeCertsEndpoint, clock: FakeClock
) -> None:
    verifier = make_verifier(endpoint, clock, refresh_floor_s=30)
    verifier.verify(issuer.mint(AUDIENCE, EMAIL))
    stranger = Issuer()
    for _ in range(10):
        with pytest.raises(Unauthenticated, match="unknown key"):
            verifier.verify(stranger.mint(AUDIENCE, EMAIL))
    assert endpoint.fetches == 1
    clock.now += 30
    with pytest.raises(Unauthenticated):
        verifier.verify(stranger.mint(AUDIENCE, EMAIL))
    assert endpoint.fetches == 2


@pytest.mark.parametrize("failure", ["connect", "500", "html"])
def test_unreachable_certs_without_a_cache_are_certs_unavailable(
    issuer: Issuer, endpoint: FakeCertsEndpoint, failure: str
) -> None:
    endpoint.failure = failure
    with pytest.raises(CertsUnavailable):
        make_verifier(endpoint).verify(issuer.mint(AUDIENCE, EMAIL))


def test_failed_refresh_keeps_serving_cached_certs_and_backs_off(
    issuer: Issuer, endpoint: FakeCertsEndpoint, clock: FakeClock
) -> None:
    verifier = make_verifier(endpoint, clock, max_ttl_s=300, refresh_floor_s=30)
    verifier.verify(issuer.mint(AUDIENCE, EMAIL))
    endpoint.failure = "connect"
    clock.now += 300
    for _ in range(5):
        assert verifier.verify(issuer.mint(AUDIENCE, EMAIL)).email == EMAIL
    assert endpoint.fetches == 2
    clock.now += 30
    endpoint.failure = None
    verifier.verify(issuer.mint(AUDIENCE, EMAIL))
    assert endpoint.fetches == 3


def test_verifier_requires_an_audience() -> None:
    with pytest.raises(ValueError):
        TokenVerifier(AuthPolicy("", frozenset({EMAIL})))


def test_errors_default_to_their_docstring() -> None:
    assert str(Unauthenticated()) == "The request carries no valid identity token."
    assert str(CertsUnavailable()).startswith("The token signing certificates")


# -- tokens as Cloud Run forwards them (signature replaced by SIGNATURE_REMOVED_BY_GOOGLE) ------


def stripped(token: str) -> str:
    header, payload, _ = token.split(".")
    return f"{header}.{payload}.{SIGNATURE_REMOVED}"


def iam_verifier(endpoint: FakeCertsEndpoint, *, behind_iam: bool = True) -> TokenVerifier:
    policy = AuthPolicy(
        AUDIENCE, frozenset({EMAIL}), certs_url=CERTS_URL, behind_cloud_run_iam=behind_iam
    )
    return TokenVerifier(policy, CertsCache(CERTS_URL, endpoint, clock=FakeClock()))


def test_stripped_token_is_accepted_behind_cloud_run_iam_without_fetching_certs(
    issuer: Issuer, endpoint: FakeCertsEndpoint
) -> None:
    now = int(time.time())
    caller = iam_verifier(endpoint).verify(stripped(issuer.mint(AUDIENCE, EMAIL, now=now)))
    assert (caller.email, caller.issued_at, caller.expires_at) == (EMAIL, now, now + 3600)
    assert endpoint.fetches == 0  # nothing to verify a missing signature against


def test_stripped_token_is_refused_when_not_behind_cloud_run_iam(
    issuer: Issuer, endpoint: FakeCertsEndpoint
) -> None:
    token = stripped(issuer.mint(AUDIENCE, EMAIL))
    for verifier in (iam_verifier(endpoint, behind_iam=False), make_verifier(endpoint)):
        with pytest.raises(Unauthenticated, match="not configured as behind Cloud Run IAM"):
            verifier.verify(token)


def test_signed_tokens_keep_full_verification_behind_cloud_run_iam(
    issuer: Issuer, endpoint: FakeCertsEndpoint
) -> None:
    verifier = iam_verifier(endpoint)
    assert verifier.verify(issuer.mint(AUDIENCE, EMAIL)).email == EMAIL
    with pytest.raises(Unauthenticated, match="invalid signature"):
        verifier.verify(Issuer(kid=issuer.kid).mint(AUDIENCE, EMAIL))


@pytest.mark.parametrize(
    ("claims", "error", "match"),
    [
        ({"email": "intruder@p.iam.gserviceaccount.com"}, Forbidden, "not allowed"),
        ({"email_verified": False}, Forbidden, "verified"),
        ({"email_verified": "true"}, Forbidden, "verified"),
        ({"aud": "https://other.example.run.app"}, Unauthenticated, "audience"),
        ({"aud": [AUDIENCE]}, Unauthenticated, "audience"),
        ({"iss": "https://evil.example"}, Unauthenticated, "issuer"),
        ({"exp": int(time.time()) - 3600}, Unauthenticated, "expired"),
        ({"iat": int(time.time()) + 3600}, Unauthenticated, "before its issue time"),
        ({"exp": None}, Unauthenticated, "required claim"),
        ({"iat": "yesterday"}, Unauthenticated, "wrong types"),
    ],
)
def test_stripped_token_is_still_checked_behind_cloud_run_iam(
    issuer: Issuer,
    endpoint: FakeCertsEndpoint,
    claims: dict[str, object],
    error: type[Exception],
    match: str,
) -> None:
    token = stripped(issuer.mint(AUDIENCE, EMAIL, extra_claims=claims))
    with pytest.raises(error, match=match):
        iam_verifier(endpoint).verify(token)


@pytest.mark.parametrize("claim", ["iat", "exp"])
@pytest.mark.parametrize("literal", ["NaN", "Infinity", "-Infinity", "1e400"])
def test_stripped_token_with_non_finite_times_is_unauthenticated_not_a_crash(
    issuer: Issuer, endpoint: FakeCertsEndpoint, claim: str, literal: str
) -> None:
    header, payload, _ = issuer.mint(AUDIENCE, EMAIL).split(".")
    claims = json.loads(base64.urlsafe_b64decode(payload + "=" * (-len(payload) % 4)))
    text = json.dumps({**claims, claim: "__X__"}).replace('"__X__"', literal)
    forged = base64.urlsafe_b64encode(text.encode()).rstrip(b"=").decode()
    with pytest.raises(Unauthenticated, match="wrong types"):
        iam_verifier(endpoint).verify(f"{header}.{forged}.{SIGNATURE_REMOVED}")


def test_stripped_token_within_the_clock_skew_is_accepted(
    issuer: Issuer, endpoint: FakeCertsEndpoint
) -> None:
    expired_5s_ago = issuer.mint(AUDIENCE, EMAIL, now=time.time() - 65, lifetime_s=60)
    assert iam_verifier(endpoint).verify(stripped(expired_5s_ago)).email == EMAIL


def _b64json(value: object) -> str:
    return base64.urlsafe_b64encode(json.dumps(value).encode()).rstrip(b"=").decode()


@pytest.mark.parametrize(
    "header", [{"alg": "RS256", "typ": "JWT"}, {"alg": "RS256", "kid": ""}, {"alg": "none"}]
)
def test_stripped_token_without_kid_or_rs256_is_refused_behind_cloud_run_iam(
    issuer: Issuer, endpoint: FakeCertsEndpoint, header: dict[str, str]
) -> None:
    payload = issuer.mint(AUDIENCE, EMAIL).split(".")[1]
    with pytest.raises(Unauthenticated, match=r"key id|alg"):
        iam_verifier(endpoint).verify(f"{_b64json(header)}.{payload}.{SIGNATURE_REMOVED}")


def test_a_signature_merely_resembling_the_marker_gets_full_verification(
    issuer: Issuer, endpoint: FakeCertsEndpoint
) -> None:
    header, payload, _ = issuer.mint(AUDIENCE, EMAIL).split(".")
    for signature in ("signature_removed_by_google", SIGNATURE_REMOVED + "A"):
        with pytest.raises(Unauthenticated, match="signature"):
            iam_verifier(endpoint).verify(f"{header}.{payload}.{signature}")


def test_x_serverless_authorization_is_read_in_preference_to_authorization(
    issuer: Issuer, endpoint: FakeCertsEndpoint
) -> None:
    good = "Bearer " + stripped(issuer.mint(AUDIENCE, EMAIL))
    app_token = "Bearer the-application's-own-credential"
    verifier = iam_verifier(endpoint)
    caller = verifier.verify_request(
        {"X-Serverless-Authorization": good, "Authorization": app_token}
    )
    assert caller.email == EMAIL
    assert verifier.verify_request({"Authorization": good}).email == EMAIL
    with pytest.raises(Unauthenticated):
        # Present, so it is the one checked, even when Authorization alone would pass.
        verifier.verify_request({"X-Serverless-Authorization": "", "Authorization": good})


def test_invoker_authorization_without_either_header_is_none() -> None:
    assert invoker_authorization({}) is None
    assert invoker_authorization({"Authorization": "Bearer a"}) == "Bearer a"


class _CountingVerify:
    """google-auth's verify_token, counted: the signature checks a verifier really makes."""

    def __init__(self, monkeypatch: pytest.MonkeyPatch) -> None:
        from services.edge import auth

        self.calls = 0
        real = auth.id_token.verify_token

        def counted(*args: Any, **kwargs: Any) -> Any:
            self.calls += 1
            return real(*args, **kwargs)

        monkeypatch.setattr(auth.id_token, "verify_token", counted)


class _WallClock:
    def __init__(self) -> None:
        self.now = time.time()

    def __call__(self) -> float:
        return self.now


def _remembering_verifier(
    endpoint: FakeCertsEndpoint, certs_clock: FakeClock, wall: _WallClock
) -> TokenVerifier:
    policy = AuthPolicy(AUDIENCE, frozenset({EMAIL}), certs_url=CERTS_URL)
    return TokenVerifier(
        policy, CertsCache(CERTS_URL, endpoint, clock=certs_clock), wall_clock=wall
    )


def test_a_token_seen_again_is_not_signature_checked_again(
    issuer: Issuer, endpoint: FakeCertsEndpoint, monkeypatch: pytest.MonkeyPatch
) -> None:
    counted = _CountingVerify(monkeypatch)
    verifier = _remembering_verifier(endpoint, FakeClock(), _WallClock())
    token = issuer.mint(AUDIENCE, EMAIL)
    callers = {verifier.verify(token) for _ in range(5)}
    assert len(callers) == 1 and next(iter(callers)).email == EMAIL
    assert counted.calls == 1
    # Another token (another text) is checked on its own.
    verifier.verify(issuer.mint(AUDIENCE, EMAIL, now=time.time() - 1))
    assert counted.calls == 2


def test_a_remembered_token_still_expires_on_the_clock_of_each_request(
    issuer: Issuer, endpoint: FakeCertsEndpoint, monkeypatch: pytest.MonkeyPatch
) -> None:
    counted = _CountingVerify(monkeypatch)
    wall = _WallClock()
    verifier = _remembering_verifier(endpoint, FakeClock(), wall)
    token = issuer.mint(AUDIENCE, EMAIL, lifetime_s=60, now=wall.now)
    verifier.verify(token)
    wall.now += 60 + 10  # expiry + the default skew, in whole seconds: still accepted
    assert verifier.verify(token).email == EMAIL
    wall.now += 1
    with pytest.raises(Unauthenticated, match="expired"):
        verifier.verify(token)
    assert counted.calls == 1  # the refusal came from the remembered claims, checked again


def test_a_remembered_token_is_verified_again_once_the_certs_are_refreshed(
    issuer: Issuer, endpoint: FakeCertsEndpoint, monkeypatch: pytest.MonkeyPatch
) -> None:
    counted = _CountingVerify(monkeypatch)
    certs_clock = FakeClock()
    verifier = _remembering_verifier(endpoint, certs_clock, _WallClock())
    token = issuer.mint(AUDIENCE, EMAIL)
    verifier.verify(token)
    certs_clock.now += 3601  # past the certs' TTL: a new document (a key may be withdrawn)
    verifier.verify(token)
    assert (counted.calls, endpoint.fetches) == (2, 2)


def test_a_token_with_the_right_claims_and_a_wrong_signature_is_never_taken_for_one_seen(
    issuer: Issuer, endpoint: FakeCertsEndpoint
) -> None:
    verifier = _remembering_verifier(endpoint, FakeClock(), _WallClock())
    token = issuer.mint(AUDIENCE, EMAIL)
    verifier.verify(token)
    head, body, signature = token.split(".")
    forged = ".".join(
        [head, body, signature[:-4] + ("AAAA" if signature[-4:] != "AAAA" else "BBBB")]
    )
    with pytest.raises(Unauthenticated, match="signature"):
        verifier.verify(forged)


def test_a_refused_token_is_not_remembered(
    issuer: Issuer, endpoint: FakeCertsEndpoint, monkeypatch: pytest.MonkeyPatch
) -> None:
    counted = _CountingVerify(monkeypatch)
    verifier = _remembering_verifier(endpoint, FakeClock(), _WallClock())
    token = issuer.mint(AUDIENCE, "someone-else@p.iam.gserviceaccount.com")
    for _ in range(3):
        with pytest.raises(Forbidden):
            verifier.verify(token)
    assert counted.calls == 3


def test_the_remembered_tokens_are_bounded(issuer: Issuer, endpoint: FakeCertsEndpoint) -> None:
    verifier = _remembering_verifier(endpoint, FakeClock(), _WallClock())
    now = time.time()
    tokens = [issuer.mint(AUDIENCE, EMAIL, now=now - n) for n in range(300)]
    for token in tokens:
        verifier.verify(token)
    assert len(verifier._verified) == 256
    assert verifier.verify(tokens[0]).email == EMAIL  # dropped, so verified again: still fine


def test_with_the_certs_unreachable_a_request_asks_for_them_once(
    issuer: Issuer, endpoint: FakeCertsEndpoint
) -> None:
    endpoint.failure = "connect"
    verifier = _remembering_verifier(endpoint, FakeClock(), _WallClock())
    with pytest.raises(CertsUnavailable):
        verifier.verify(issuer.mint(AUDIENCE, EMAIL))
    assert endpoint.fetches == 1


# -- audiences as Cloud Run matches them ----------------------------------------------------
# The service URL with or without a trailing slash, or a custom audience
# (https://cloud.google.com/run/docs/configuring/custom-audiences).


def test_accepted_audiences_are_the_url_with_and_without_a_slash_then_custom_ones() -> None:
    url = "https://api-abc.a.run.app"
    assert accepted_audiences(url) == (url, url + "/")
    assert accepted_audiences(url + "/") == (url, url + "/")
    assert accepted_audiences(url, ["https://jobs.example.com", url, ""]) == (
        url,
        url + "/",
        "https://jobs.example.com",
    )


@pytest.mark.parametrize("configured", [AUDIENCE, AUDIENCE + "/"])
@pytest.mark.parametrize("sent", [AUDIENCE, AUDIENCE + "/", "https://jobs.example.com"])
def test_a_token_for_the_url_with_or_without_a_slash_or_a_custom_audience_is_accepted(
    issuer: Issuer, endpoint: FakeCertsEndpoint, configured: str, sent: str
) -> None:
    for behind in (False, True):
        policy = AuthPolicy(
            configured,
            frozenset({EMAIL}),
            certs_url=CERTS_URL,
            behind_cloud_run_iam=behind,
            custom_audiences=("https://jobs.example.com",),
        )
        verifier = TokenVerifier(policy, CertsCache(CERTS_URL, endpoint, clock=FakeClock()))
        token = issuer.mint(sent, EMAIL)
        assert verifier.verify(stripped(token) if behind else token).email == EMAIL


@pytest.mark.parametrize(
    "sent", [AUDIENCE + "//", AUDIENCE + "/x", AUDIENCE.upper(), "https://jobs.example.com/"]
)
def test_any_other_audience_is_refused_signed_or_forwarded(
    issuer: Issuer, endpoint: FakeCertsEndpoint, sent: str
) -> None:
    policy = AuthPolicy(
        AUDIENCE,
        frozenset({EMAIL}),
        certs_url=CERTS_URL,
        behind_cloud_run_iam=True,
        custom_audiences=("https://jobs.example.com",),
    )
    verifier = TokenVerifier(policy, CertsCache(CERTS_URL, endpoint, clock=FakeClock()))
    token = issuer.mint(sent, EMAIL)
    for presented in (token, stripped(token)):
        with pytest.raises(Unauthenticated, match="wrong audience"):
            verifier.verify(presented)


def test_the_services_and_the_local_front_end_accept_the_same_audiences() -> None:
    from emulators.cloudrun.invoker import InvokerPolicy

    for url in ("http://127.0.0.1:8102", "https://api-abc.a.run.app/"):
        custom = ("https://jobs.example.com",)
        emulated = InvokerPolicy(url, frozenset(), custom).audiences
        assert tuple(emulated) == accepted_audiences(url, custom)
