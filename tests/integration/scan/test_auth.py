"""Who may trigger a scan: real tokens from the local issuer, verified via its certs URL — by
the scan alone (direct), and as on Cloud Run, behind the local front end's invoker check."""

from __future__ import annotations

import logging
import time
from collections.abc import Callable

import pytest
import requests

from emulators.cloudrun.contract import SIGNATURE_REMOVED
from emulators.oidc.issuer import Issuer
from tests.integration.scan.conftest import AUDIENCE, INVOKER, Rig


def tampered(token: str) -> str:
    header, payload, signature = token.split(".")
    flipped = ("A" if signature[10] != "A" else "B") + signature[11:]
    return ".".join([header, payload, signature[:10] + flipped])


@pytest.fixture
def rig(scan_rig: Callable[..., Rig]) -> Rig:
    """The scan alone: its own checks answer every request."""
    built = scan_rig(cloud_run=False)
    built.seed(3)
    return built


@pytest.fixture
def behind(scan_rig: Callable[..., Rig]) -> Rig:
    """The scan behind the front end, configured as behind Cloud Run IAM."""
    built = scan_rig()
    built.seed(3)
    return built


def test_the_allowed_invoker_with_a_valid_token_runs_a_scan(rig: Rig) -> None:
    response = rig.post(token=rig.token())
    assert response.status_code == 200
    assert response.get_json()["published"] == 3


@pytest.mark.parametrize(
    ("case", "status"),
    [
        ("no token", 401),
        ("not bearer", 401),
        ("garbage", 401),
        ("expired", 401),
        ("wrong audience", 401),
        ("wrong issuer", 401),
        ("other signing key", 401),
        ("tampered signature", 401),
        ("unverified email", 403),
        ("wrong email", 403),
    ],
)
def test_callers_without_a_valid_allowed_token_are_refused_and_nothing_is_claimed(
    rig: Rig, case: str, status: int
) -> None:
    now = time.time()
    headers = {
        "no token": {},
        "not bearer": {"Authorization": f"Basic {rig.token()}"},
        "garbage": {"Authorization": "Bearer not-a-jwt"},
        "expired": {"Authorization": f"Bearer {rig.token(now=now - 7200, lifetime_s=600)}"},
        "wrong audience": {"Authorization": f"Bearer {rig.token(audience=AUDIENCE + '/x')}"},
        "wrong issuer": {
            "Authorization": "Bearer "
            + rig.token(extra_claims={"iss": "https://issuer.example.com"})
        },
        "other signing key": {
            "Authorization": f"Bearer {Issuer(kid=rig.oidc.issuer.kid).mint(AUDIENCE, INVOKER)}"
        },
        "tampered signature": {"Authorization": f"Bearer {tampered(rig.token())}"},
        "unverified email": {
            "Authorization": f"Bearer {rig.token(extra_claims={'email_verified': False})}"
        },
        "wrong email": {
            "Authorization": f"Bearer {rig.token(email='intruder@evil.iam.gserviceaccount.com')}"
        },
    }[case]
    response = rig.app.test_client().post("/", headers=headers)
    assert response.status_code == status, response.get_data(as_text=True)
    assert response.get_json()["error"] == ("unauthenticated" if status == 401 else "forbidden")
    assert rig.states([f"job-{n:06d}" for n in range(3)]) == {"deferred": 3}
    assert rig.sink.reports == []


def test_the_token_never_appears_in_the_logs(rig: Rig, caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.DEBUG)
    bad = rig.token(email="intruder@evil.iam.gserviceaccount.com")
    good = rig.token()
    assert rig.post(token=bad).status_code == 403
    assert rig.post(token=good).status_code == 200
    signatures = [bad.rsplit(".", 1)[1], good.rsplit(".", 1)[1]]
    assert not any(s in caplog.text for s in signatures)
    assert "intruder@evil" in caplog.text  # the refusal names the caller, not the token


def test_behind_the_front_end_the_invoker_runs_a_scan_and_the_scan_sees_a_stripped_token(
    behind: Rig, caplog: pytest.LogCaptureFixture
) -> None:
    response = behind.post()
    assert response.status_code == 200, response.get_data(as_text=True)
    assert response.get_json()["published"] == 3


@pytest.mark.parametrize(
    ("case", "status"),
    [
        ("no token", 403),
        ("garbage", 401),
        ("expired", 401),
        ("wrong audience", 401),
        ("wrong email", 403),
        ("replayed stripped token", 401),
    ],
)
def test_behind_the_front_end_cloud_run_refuses_first_with_its_own_pages(
    behind: Rig, case: str, status: int
) -> None:
    now = time.time()
    token = {
        "garbage": "not-a-jwt",
        "expired": behind.token(now=now - 7200, lifetime_s=600),
        "wrong audience": behind.token(audience=behind.audience + "/x"),
        "wrong email": behind.token(email="intruder@evil.iam.gserviceaccount.com"),
        "replayed stripped token": behind.token().rsplit(".", 1)[0] + "." + SIGNATURE_REMOVED,
    }.get(case)
    headers = {} if token is None else {"Authorization": f"Bearer {token}"}
    assert behind.served is not None and behind.served.front is not None
    response = requests.post(behind.served.front.url, headers=headers, timeout=30)
    assert response.status_code == status
    assert response.headers["Content-Type"].startswith("text/html")
    assert behind.states([f"job-{n:06d}" for n in range(3)]) == {"deferred": 3}


def test_an_unverified_email_passes_cloud_run_and_is_refused_by_the_scan(behind: Rig) -> None:
    response = behind.post(token=behind.token(extra_claims={"email_verified": False}))
    assert response.status_code == 403
    assert response.get_json()["error"] == "forbidden"
    assert behind.states([f"job-{n:06d}" for n in range(3)]) == {"deferred": 3}


def test_a_stripped_token_is_refused_by_a_scan_not_behind_cloud_run_iam(
    rig: Rig, caplog: pytest.LogCaptureFixture
) -> None:
    stripped = rig.token().rsplit(".", 1)[0] + "." + SIGNATURE_REMOVED
    with caplog.at_level(logging.WARNING):
        response = rig.post(token=stripped)
    assert response.status_code == 401
    assert "not configured as behind Cloud Run IAM" in caplog.text
    assert rig.states([f"job-{n:06d}" for n in range(3)]) == {"deferred": 3}
