"""The API on the production path: behind the local Cloud Run front end (the invoker check,
tokens forwarded with their signature removed), configured as behind Cloud Run IAM, on the
real Firestore client against the emulator."""

from __future__ import annotations

import requests

from emulators.cloudrun.contract import SIGNATURE_REMOVED
from services.edge.auth import SERVERLESS_AUTHORIZATION
from tests.integration.api.conftest import ApiRig
from tests.unit.api.contract import schedule_body


def _stripped(token: str) -> str:
    return token.rsplit(".", 1)[0] + "." + SIGNATURE_REMOVED


def test_an_invoker_schedules_reads_and_cancels_through_the_front_end(
    fronted_api_rig: ApiRig,
) -> None:
    rig = fronted_api_rig
    created = rig.call("POST", "/v1/jobs", schedule_body(job_id="fronted-1"))
    assert created.status_code == 201, created.text
    assert rig.call("POST", "/v1/jobs", schedule_body(job_id="fronted-1")).status_code == 200
    read = rig.call("GET", "/v1/jobs/fronted-1")
    assert (read.status_code, read.json()["state"]) == (200, "deferred")
    cancelled = rig.call("POST", "/v1/jobs/fronted-1:cancel", {})
    assert (cancelled.status_code, cancelled.json()["state"]) == (200, "cancelled")
    stored = rig.document("fronted-1")
    assert stored is not None and stored["state"] == "cancelled"


def test_the_front_end_refuses_before_the_api_and_the_api_refuses_replays(
    fronted_api_rig: ApiRig,
) -> None:
    rig = fronted_api_rig
    body = schedule_body(job_id="refused-1")
    stranger = rig.token(email="stranger@test-project.iam.gserviceaccount.com")
    answers = {
        "no token": rig.session.post(rig.url + "/v1/jobs", json=body, timeout=30),
        "not an invoker": rig.call("POST", "/v1/jobs", body, token=stranger),
        # Another service's URL as audience: Cloud Run's check refuses it.
        "wrong audience": rig.call(
            "POST", "/v1/jobs", body, token=rig.token(audience="https://other.a.run.app")
        ),
        # A forwarded token replayed at the front door has no signature to check.
        "replayed stripped token": rig.call("POST", "/v1/jobs", body, token=_stripped(rig.token())),
    }
    # Cloud Run's own HTML pages, not the API's JSON errors: the API never saw these.
    assert {name: a.status_code for name, a in answers.items()} == {
        "no token": 403,
        "not an invoker": 403,
        "wrong audience": 401,
        "replayed stripped token": 401,
    }
    assert all("<title>" in a.text for a in answers.values())
    assert rig.document("refused-1") is None


def test_the_api_behind_iam_takes_the_forwarded_token_and_x_serverless_authorization(
    fronted_api_rig: ApiRig,
) -> None:
    rig = fronted_api_rig
    forwarded = f"Bearer {_stripped(rig.token())}"
    # Straight to the container, as only Cloud Run can reach it: what the front end forwards.
    direct = requests.post(
        rig.container_url + "/v1/jobs",
        json=schedule_body(job_id="container-1"),
        headers={"Authorization": forwarded},
        timeout=30,
    )
    assert direct.status_code == 201, direct.text
    # Through the front end with X-Serverless-Authorization: Cloud Run checks that header and
    # Authorization is the caller's own, passed through untouched.
    serverless = rig.session.post(
        rig.url + "/v1/jobs",
        json=schedule_body(job_id="serverless-1"),
        headers={SERVERLESS_AUTHORIZATION: f"Bearer {rig.token()}", "Authorization": "Basic x"},
        timeout=30,
    )
    assert serverless.status_code == 201, serverless.text
    # A signed token the api would accept, but for another audience: refused by the api too.
    other = requests.post(
        rig.container_url + "/v1/jobs",
        json=schedule_body(job_id="container-2"),
        headers={"Authorization": f"Bearer {_stripped(rig.token(audience='https://x.a.run.app'))}"},
        timeout=30,
    )
    assert other.status_code == 401
    assert rig.document("container-2") is None
