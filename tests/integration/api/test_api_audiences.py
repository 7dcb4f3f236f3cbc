"""A producer whose configured audience has a trailing slash (Google's service-to-service
sample uses that form) is accepted by Cloud Run's invoker check and then by the API itself,
through the front end and directly: the audience rule lives in services/edge/auth.py for all
three services (https://cloud.google.com/run/docs/authenticating/service-to-service)."""

from __future__ import annotations

from tests.integration.api.conftest import ApiRig
from tests.unit.api.contract import schedule_body


def test_a_token_for_the_url_with_a_slash_schedules_through_the_front_end(
    fronted_api_rig: ApiRig,
) -> None:
    rig = fronted_api_rig
    token = rig.token(audience=rig.audience + "/")
    created = rig.call("POST", "/v1/jobs", schedule_body(job_id="slash-1"), token=token)
    assert created.status_code == 201, created.text
    assert rig.document("slash-1") is not None


def test_a_token_for_the_url_with_a_slash_is_accepted_directly(api_rig: ApiRig) -> None:
    for audience, job_id in ((api_rig.audience + "/", "slash-2"), (api_rig.audience, "bare-2")):
        token = api_rig.token(audience=audience)
        created = api_rig.call("POST", "/v1/jobs", schedule_body(job_id=job_id), token=token)
        assert created.status_code == 201, created.text


def test_another_path_under_the_url_is_still_refused(api_rig: ApiRig) -> None:
    token = api_rig.token(audience=api_rig.audience + "/v1")
    refused = api_rig.call("POST", "/v1/jobs", schedule_body(job_id="slash-3"), token=token)
    assert refused.status_code == 401
    assert refused.json()["error"]["status"] == "UNAUTHENTICATED"
    assert api_rig.document("slash-3") is None
