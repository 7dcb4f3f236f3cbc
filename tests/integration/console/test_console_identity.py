"""Who may use the console: IAP's signed header checked, not trusted (a forged, expired,
wrong-audience or wrong-issuer assertion is refused), roles by the signed email, viewers never
change anything, every POST carries the CSRF token of its own cookie."""

from __future__ import annotations

from http import HTTPStatus

import pytest

from services.console.identity import IAP_HEADER
from services.jobs.state import State
from tests.fixtures.iap import other_key
from tests.integration.console.conftest import AUDIENCE, OPERATOR, VIEWER, Console


def test_a_request_without_the_iap_header_is_refused(console: Console) -> None:
    response = console.client.get("/")
    assert response.status_code == HTTPStatus.UNAUTHORIZED
    assert f"missing {IAP_HEADER}" in response.text


@pytest.mark.parametrize(
    ("mint", "why"),
    [
        ({"private_pem": other_key()}, "refused"),  # forged: a key IAP never published
        ({"issued_ago_s": 3600, "lifetime_s": 600}, "refused"),  # expired
        ({"issuer": "https://accounts.google.com"}, "issuer must be https://cloud.google.com/iap"),
    ],
    ids=["forged", "expired", "wrong-issuer"],
)
def test_an_assertion_iap_did_not_sign_for_us_is_refused(
    console: Console, mint: dict[str, object], why: str
) -> None:
    assert console.iap is not None
    headers = {IAP_HEADER: console.iap.mint(OPERATOR, AUDIENCE, **mint)}  # type: ignore[arg-type]
    response = console.client.get("/", headers=headers)
    assert response.status_code == HTTPStatus.UNAUTHORIZED
    assert why in response.text


def test_an_assertion_for_another_audience_is_refused(console: Console) -> None:
    assert console.iap is not None
    other = "/projects/123456/locations/europe-west1/services/another-service"
    response = console.client.get("/", headers={IAP_HEADER: console.iap.mint(OPERATOR, other)})
    assert response.status_code == HTTPStatus.UNAUTHORIZED


def test_an_unsigned_assertion_is_refused(console: Console) -> None:
    assert console.iap is not None
    head, body, _ = console.iap.mint(OPERATOR, AUDIENCE).split(".")
    response = console.client.get("/", headers={IAP_HEADER: f"{head}.{body}."})
    assert response.status_code == HTTPStatus.UNAUTHORIZED


def test_a_signed_user_with_no_role_is_forbidden(console: Console) -> None:
    response = console.get("/", "stranger@example.com")
    assert response.status_code == HTTPStatus.FORBIDDEN
    assert "neither a viewer nor an operator" in response.text


def test_a_viewer_sees_every_page_but_changes_nothing(console: Console, plant: object) -> None:
    for path in ("/", "/calendar", "/jobs", "/dead-letters", "/control"):
        assert console.get(path, VIEWER).status_code == HTTPStatus.OK, path
    assert "viewer" in console.get("/control", VIEWER).text
    token = console.csrf(VIEWER)
    refused = console.post("/control", {"csrf": token, "op": "pause", "reason": "x"}, VIEWER)
    assert refused.status_code == HTTPStatus.FORBIDDEN
    assert console.store.get_control().paused is False
    assert console.get("/bulk?kind=cancel&state=deferred", VIEWER).status_code == 403


def test_a_post_without_its_csrf_token_changes_nothing(console: Console) -> None:
    console.csrf()
    for data in ({"op": "pause", "reason": "x"}, {"op": "pause", "reason": "x", "csrf": "guess"}):
        response = console.post("/control", data)
        assert response.status_code == HTTPStatus.FORBIDDEN
        assert "CSRF" in response.text
    assert console.store.get_control().paused is False


def test_a_post_from_another_origin_is_refused(console: Console) -> None:
    token = console.csrf()
    response = console.client.post(
        "/control",
        data={"csrf": token, "op": "pause", "reason": "x"},
        headers={**console.headers(), "Origin": "https://evil.example"},
    )
    assert response.status_code == HTTPStatus.FORBIDDEN


def test_an_operator_pauses_and_the_control_document_names_them(console: Console) -> None:
    token = console.csrf()
    response = console.post("/control", {"csrf": token, "op": "pause", "reason": "incident 7"})
    assert response.status_code == HTTPStatus.SEE_OTHER
    control = console.store.get_control()
    assert control.paused and control.changed_by == f"console:{OPERATOR}"
    assert "yes" in console.get("/control").text


def test_the_stand_in_identity_is_labelled_on_every_page(stand_in_console: Console) -> None:
    for path in ("/", "/calendar", "/jobs", "/dead-letters", "/control"):
        response = stand_in_console.get(path)
        assert response.status_code == HTTPStatus.OK, path
        assert 'id="stand-in"' in response.text and "Local stand-in identity" in response.text
    assert State.DEFERRED.value in stand_in_console.get("/jobs").text
