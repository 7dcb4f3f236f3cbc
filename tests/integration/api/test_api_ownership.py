"""Caller ownership (services/api/ownership.py, docs/api.md "Caller ownership"): a job records
its producer; a caller reads, cancels and reschedules only its own jobs, and gets 403
PERMISSION_DENIED for any other job ID whether or not it exists (https://google.aip.dev/211);
a trusted caller acts on all; the same decision scheduled by two callers belongs to the first.
Through the local Cloud Run front end and directly, on the real store."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest
from google.cloud import firestore

from services.jobs.clock import FakeClock
from services.jobs.model import NewJob
from services.store.job_store import FirestoreJobStore
from tests.integration.api.conftest import CALLER, T0, ApiRig, _rig
from tests.unit.api.contract import ACTION, PARAMS, schedule_body

OTHER = "other-producer@test-project.iam.gserviceaccount.com"
TRUSTED = "operator-tool@test-project.iam.gserviceaccount.com"


@pytest.fixture(params=["direct", "fronted"])
def rig(
    request: pytest.FixtureRequest,
    firestore_client: firestore.Client,
    firestore_project: str,
    oidc_server: Any,
) -> Iterator[ApiRig]:
    yield from _rig(
        firestore_client,
        firestore_project,
        oidc_server,
        cloud_run=request.param == "fronted",
        callers=(CALLER, OTHER, TRUSTED),
        trusted=(TRUSTED,),
    )


def _as(rig: ApiRig, email: str, method: str, path: str, body: Any = None) -> Any:
    return rig.call(method, path, body, token=rig.token(email=email))


def _status(response: Any) -> tuple[int, str]:
    return response.status_code, response.json()["error"]["status"]


def test_a_scheduled_job_records_its_producer(rig: ApiRig) -> None:
    created = _as(rig, CALLER, "POST", "/v1/jobs", schedule_body(job_id="own-1"))
    assert created.status_code == 201
    assert created.json()["producer"] == CALLER
    stored = rig.document("own-1")
    assert stored is not None and stored["producer"] == CALLER


def test_another_caller_is_denied_exactly_as_for_a_job_that_does_not_exist(rig: ApiRig) -> None:
    assert _as(rig, CALLER, "POST", "/v1/jobs", schedule_body(job_id="own-2")).status_code == 201
    before = rig.document("own-2")
    answers = {
        "get": _as(rig, OTHER, "GET", "/v1/jobs/own-2"),
        "cancel": _as(rig, OTHER, "POST", "/v1/jobs/own-2:cancel", {}),
        "reschedule": _as(
            rig, OTHER, "POST", "/v1/jobs/own-2:reschedule", {"due_at": "2026-07-01T00:00:00Z"}
        ),
        "get missing": _as(rig, OTHER, "GET", "/v1/jobs/no-such-job"),
        "cancel missing": _as(rig, OTHER, "POST", "/v1/jobs/no-such-job:cancel", {}),
    }
    assert {k: _status(v) for k, v in answers.items()} == dict.fromkeys(
        answers, (403, "PERMISSION_DENIED")
    )
    # The same words whether it exists or not: nothing tells the two apart.
    hidden = answers["get"].json()["error"]["message"].replace("own-2", "X")
    absent = answers["get missing"].json()["error"]["message"].replace("no-such-job", "X")
    assert hidden == absent
    assert rig.document("own-2") == before
    assert rig.document("no-such-job") is None


def test_the_producer_reads_cancels_and_reschedules_its_own_job(rig: ApiRig) -> None:
    assert _as(rig, CALLER, "POST", "/v1/jobs", schedule_body(job_id="own-3")).status_code == 201
    assert _as(rig, CALLER, "GET", "/v1/jobs/own-3").status_code == 200
    moved = _as(
        rig, CALLER, "POST", "/v1/jobs/own-3:reschedule", {"due_at": "2026-08-01T00:00:00Z"}
    )
    assert moved.status_code == 200, moved.text
    assert _as(rig, CALLER, "POST", "/v1/jobs/own-3:cancel", {}).json()["state"] == "cancelled"
    # Its own missing job is 403 too: it produced no job by that ID.
    assert _status(_as(rig, CALLER, "GET", "/v1/jobs/never-made")) == (403, "PERMISSION_DENIED")


def test_a_trusted_caller_acts_on_every_job_and_alone_sees_404(
    rig: ApiRig, firestore_client: firestore.Client
) -> None:
    assert _as(rig, CALLER, "POST", "/v1/jobs", schedule_body(job_id="own-4")).status_code == 201
    # A job scheduled without the API (jobsctl, a Python producer) has no producer.
    FirestoreJobStore(firestore_client, FakeClock(T0)).schedule(
        NewJob("store-4", ACTION, "media-1", T0, dict(PARAMS))
    )
    assert _as(rig, TRUSTED, "GET", "/v1/jobs/own-4").json()["producer"] == CALLER
    assert _as(rig, TRUSTED, "GET", "/v1/jobs/store-4").json()["producer"] is None
    assert _status(_as(rig, CALLER, "GET", "/v1/jobs/store-4")) == (403, "PERMISSION_DENIED")
    assert _status(_as(rig, TRUSTED, "GET", "/v1/jobs/no-such-job")) == (404, "NOT_FOUND")
    cancelled = _as(rig, TRUSTED, "POST", "/v1/jobs/own-4:cancel", {})
    assert cancelled.status_code == 200 and cancelled.json()["state"] == "cancelled"


def test_the_same_decision_scheduled_by_two_callers_belongs_to_the_first(rig: ApiRig) -> None:
    body = schedule_body(job_id=..., decision_id="decision-5")
    first = _as(rig, CALLER, "POST", "/v1/jobs", body)
    assert first.status_code == 201
    job_id = first.json()["job_id"]
    stored = rig.document(job_id)
    second = _as(rig, OTHER, "POST", "/v1/jobs", body)
    assert _status(second) == (403, "PERMISSION_DENIED")
    assert rig.document(job_id) == stored  # nothing written
    repeat = _as(rig, CALLER, "POST", "/v1/jobs", body)
    assert repeat.status_code == 200 and repeat.json()["producer"] == CALLER
    trusted = _as(rig, TRUSTED, "POST", "/v1/jobs", body)
    assert trusted.status_code == 200 and trusted.json()["producer"] == CALLER
    assert rig.document(job_id) == stored


# Issue 33, finding 4: ownership before content. Every guess a foreign caller can make about
# another producer's job, on every route, gets one answer; only the producer (or a trusted
# caller) learns how its job differs.
_WRONG_GUESSES: dict[str, dict[str, Any]] = {
    "right params": {},
    "other subject": {"subject": "media-2"},
    "other params": {"params": {"bucket": "media-src", "objects": ["media-1/other.mp4"]}},
    "other max_attempts": {"max_attempts": 9},
    "everything other": {
        "subject": "media-9",
        "params": {"bucket": "media-src", "objects": ["media-9/x.mp4"]},
        "max_attempts": 2,
    },
}


def _answer(response: Any, job_id: str) -> tuple[int, str, str]:
    error = response.json()["error"]
    return response.status_code, error["status"], error["message"].replace(job_id, "X")


def test_scheduling_another_producers_job_id_answers_the_same_whatever_the_guess(
    rig: ApiRig,
) -> None:
    created = _as(rig, CALLER, "POST", "/v1/jobs", schedule_body(job_id="own-6"))
    assert created.status_code == 201
    before = rig.document("own-6")
    answers = {
        guess: _answer(
            _as(rig, OTHER, "POST", "/v1/jobs", schedule_body(job_id="own-6", **changes)),
            "own-6",
        )
        for guess, changes in _WRONG_GUESSES.items()
    }
    # Today: 403 for the right guess, 409 naming each differing field for a wrong one.
    assert set(answers.values()) == {
        (403, "PERMISSION_DENIED", _answer(_as(rig, OTHER, "GET", "/v1/jobs/none-6"), "none-6")[2])
    }, answers
    assert rig.document("own-6") == before
    # The producer still learns how its own job differs, and a trusted caller too.
    own = _as(rig, CALLER, "POST", "/v1/jobs", schedule_body(job_id="own-6", subject="media-2"))
    assert _status(own) == (409, "ALREADY_EXISTS") and "subject" in own.text
    trusted = _as(rig, TRUSTED, "POST", "/v1/jobs", schedule_body(job_id="own-6", max_attempts=9))
    assert _status(trusted) == (409, "ALREADY_EXISTS") and "max_attempts" in trusted.text


_ROUTES: dict[str, tuple[str, str, Any]] = {
    "get": ("GET", "/v1/jobs/{}", None),
    "cancel": ("POST", "/v1/jobs/{}:cancel", {}),
    "cancel with a reason": ("POST", "/v1/jobs/{}:cancel", {"reason": "guess"}),
    "cancel with a bad body": ("POST", "/v1/jobs/{}:cancel", {"reason": 7, "extra": True}),
    "reschedule": ("POST", "/v1/jobs/{}:reschedule", {"due_at": "2026-07-01T00:00:00Z"}),
    "reschedule into the past": (
        "POST",
        "/v1/jobs/{}:reschedule",
        {"due_at": "2000-01-01T00:00:00Z"},
    ),
    "reschedule with a bad body": ("POST", "/v1/jobs/{}:reschedule", {"due": "soon"}),
}


@pytest.mark.parametrize("route", sorted(_ROUTES))
def test_every_route_answers_a_foreign_job_as_one_that_does_not_exist(
    rig: ApiRig, route: str
) -> None:
    method, path, body = _ROUTES[route]
    assert _as(rig, CALLER, "POST", "/v1/jobs", schedule_body(job_id="own-7")).status_code == 201
    before = rig.document("own-7")
    foreign = _answer(_as(rig, OTHER, method, path.format("own-7"), body), "own-7")
    absent = _answer(_as(rig, OTHER, method, path.format("none-7"), body), "none-7")
    assert foreign == absent
    assert foreign[:2] == (403, "PERMISSION_DENIED")
    assert rig.document("own-7") == before
    assert rig.document("none-7") is None
