"""The API's own token verification (create_app's TokenVerifier, no fake) on tokens as Cloud Run
forwards them: signature replaced by SIGNATURE_REMOVED_BY_GOOGLE, possibly in
X-Serverless-Authorization. Such a token is accepted only when ApiSettings say the service runs
behind Cloud Run's IAM invoker check. Nothing here fetches certs: a stripped token is never
checked against them (Cloud Run checked its signature), so the certs URL points nowhere."""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from typing import Any

import pytest

from emulators.oidc.issuer import Issuer
from services.api.app import create_app
from services.api.settings import API_ALLOWED_CALLERS, API_AUDIENCE, ApiSettings
from services.edge.auth import SERVERLESS_AUTHORIZATION, SIGNATURE_REMOVED
from services.edge.settings import BEHIND_CLOUD_RUN_IAM, PROJECT
from services.jobs.clock import FakeClock
from tests.unit.api.conftest import SETTINGS
from tests.unit.api.fakes import CALLER, T0, FakeStore

JOB = "/v1/jobs/job-1"


@pytest.fixture(scope="module")
def issuer() -> Issuer:
    return Issuer()


def stripped(token: str) -> str:
    header, payload, _ = token.split(".")
    return f"{header}.{payload}.{SIGNATURE_REMOVED}"


def app_for(*, behind_iam: bool) -> Any:
    # Nothing listens on port 9 here: a certs fetch would be a quick CertsUnavailable (503),
    # which no test here expects.
    # CALLER trusted, so a request past authentication meets the store (404 for no such job)
    # rather than the ownership rule's 403.
    settings = dataclasses.replace(
        SETTINGS,
        certs_url="http://127.0.0.1:9/certs",
        behind_cloud_run_iam=behind_iam,
        trusted_callers=frozenset({CALLER}),
    )
    clock = FakeClock(T0)
    return create_app(settings, clock=clock, store=FakeStore(clock)).test_client()


def get(client: Any, headers: Mapping[str, str]) -> Any:
    return client.get(JOB, headers=dict(headers))


def test_a_stripped_token_is_accepted_behind_cloud_run_iam(issuer: Issuer) -> None:
    token = stripped(issuer.mint(SETTINGS.audience, CALLER))
    response = get(app_for(behind_iam=True), {"Authorization": f"Bearer {token}"})
    # Past authentication: the job does not exist.
    assert response.status_code == 404, response.get_json()


def test_a_stripped_token_is_refused_when_not_behind_cloud_run_iam(issuer: Issuer) -> None:
    token = stripped(issuer.mint(SETTINGS.audience, CALLER))
    response = get(app_for(behind_iam=False), {"Authorization": f"Bearer {token}"})
    assert response.status_code == 401
    error = response.get_json()["error"]
    assert error["status"] == "UNAUTHENTICATED"
    assert "not configured as behind Cloud Run IAM" in error["message"]


@pytest.mark.parametrize(
    ("claims", "status"),
    [
        ({"email": "stranger@test-project.iam.gserviceaccount.com"}, 403),
        ({"email_verified": False}, 403),
        ({"aud": "https://other.example.run.app"}, 401),
        ({"exp": 1}, 401),
    ],
    ids=["stranger", "unverified", "audience", "expired"],
)
def test_a_stripped_token_is_still_checked_behind_cloud_run_iam(
    issuer: Issuer, claims: dict[str, object], status: int
) -> None:
    token = stripped(issuer.mint(SETTINGS.audience, CALLER, extra_claims=claims))
    response = get(app_for(behind_iam=True), {"Authorization": f"Bearer {token}"})
    assert response.status_code == status, response.get_json()


def test_x_serverless_authorization_is_the_token_checked_and_authorization_passes_through(
    issuer: Issuer,
) -> None:
    token = stripped(issuer.mint(SETTINGS.audience, CALLER))
    headers = {SERVERLESS_AUTHORIZATION: f"Bearer {token}", "Authorization": "Basic app-own"}
    assert get(app_for(behind_iam=True), headers).status_code == 404


def test_a_bad_x_serverless_authorization_is_not_rescued_by_authorization(
    issuer: Issuer,
) -> None:
    good = stripped(issuer.mint(SETTINGS.audience, CALLER))
    headers = {SERVERLESS_AUTHORIZATION: "", "Authorization": f"Bearer {good}"}
    assert get(app_for(behind_iam=True), headers).status_code == 401


def test_settings_carry_behind_cloud_run_iam_from_the_environment() -> None:
    env = {
        PROJECT: "p",
        API_AUDIENCE: "https://api.example.run.app",
        API_ALLOWED_CALLERS: CALLER,
    }
    assert ApiSettings.from_env(env).behind_cloud_run_iam is False
    on_cloud_run = {**env, BEHIND_CLOUD_RUN_IAM: "true", "K_SERVICE": "deferred-jobs-api"}
    assert ApiSettings.from_env(on_cloud_run).behind_cloud_run_iam
