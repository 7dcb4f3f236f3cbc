"""Who may push: the real verifier over HTTP, against tokens from the session's OIDC issuer —
alone (direct), and as on Cloud Run, behind the local front end's invoker check."""

from __future__ import annotations

import base64
import json
import logging
import time
from collections.abc import Callable

import pytest

from emulators.cloudrun.contract import SIGNATURE_REMOVED
from emulators.oidc.issuer import Issuer
from services.jobs.state import State
from tests.integration.worker.harness import WorkerHarness, envelope

TokenMaker = Callable[[WorkerHarness], str | None]


def _tampered(worker: WorkerHarness) -> str:
    header, payload, signature = worker.token(email="someone@else.example").split(".")
    claims = json.loads(base64.urlsafe_b64decode(payload + "=" * (-len(payload) % 4)))
    claims["email"] = "pusher@deferred-jobs.iam.gserviceaccount.com"
    forged = base64.urlsafe_b64encode(json.dumps(claims).encode()).rstrip(b"=").decode()
    return f"{header}.{forged}.{signature}"


CASES: dict[str, tuple[TokenMaker, int]] = {
    "no token": (lambda w: None, 401),
    "garbage": (lambda w: "not-a-jwt", 401),
    "expired": (lambda w: w.token(now=time.time() - 7200, lifetime_s=3600), 401),
    "wrong audience": (lambda w: w.token(audience="https://scan.example/"), 401),
    "wrong issuer": (lambda w: w.token(extra_claims={"iss": "https://issuer.evil"}), 401),
    "unknown signing key": (
        lambda w: Issuer().mint(w.url, "pusher@deferred-jobs.iam.gserviceaccount.com"),
        401,
    ),
    "tampered": (_tampered, 401),
    "wrong email": (lambda w: w.token(email="intruder@evil.example"), 403),
    "unverified email": (lambda w: w.token(extra_claims={"email_verified": False}), 403),
}


@pytest.mark.parametrize("case", sorted(CASES))
def test_push_without_a_valid_token_from_the_invoker_is_refused_and_not_processed(
    direct_worker: WorkerHarness, case: str
) -> None:
    worker = direct_worker
    make_token, status = CASES[case]
    worker.schedule("job-1", worker.upload("src/a.mp4"))
    claimed = worker.claim_one("job-1")
    worker.enqueue(claimed)
    token = make_token(worker)

    response = worker.post(
        envelope("job-1", claimed.generation), token=token, authorize=token is not None
    )

    assert response.status_code == status
    assert worker.job("job-1").state is State.ENQUEUED
    assert worker.deleter.calls == 0
    assert worker.rejected_documents() == []


@pytest.mark.parametrize("cloud_run", [True, False], ids=["behind the front end", "direct"])
def test_push_with_the_invokers_token_for_this_audience_is_processed(
    request: pytest.FixtureRequest, cloud_run: bool
) -> None:
    worker: WorkerHarness = request.getfixturevalue("worker" if cloud_run else "direct_worker")
    worker.schedule("job-1", worker.upload("src/a.mp4"))
    claimed = worker.claim_one("job-1")
    worker.enqueue(claimed)
    token = worker.token()
    response = worker.post(envelope("job-1", claimed.generation), token=token)
    assert response.status_code == 204
    assert worker.job("job-1").state is State.COMPLETED
    # What the app saw: the token as Cloud Run forwards it, or as sent.
    seen = SIGNATURE_REMOVED if cloud_run else token.rsplit(".", 1)[1]
    assert worker.counter.signatures == [seen]


# Behind the front end, Cloud Run's invoker check answers first (an HTML page); only what it
# lets through (a valid token of the invoker) reaches the worker's own checks (JSON).
FRONT_END_STATUS: dict[str, tuple[int, str]] = {
    "no token": (403, "front end"),
    "garbage": (401, "front end"),
    "expired": (401, "front end"),
    "wrong audience": (401, "front end"),
    "wrong issuer": (401, "front end"),
    "unknown signing key": (401, "front end"),
    "tampered": (401, "front end"),
    "wrong email": (403, "front end"),
    "unverified email": (403, "worker"),
}


@pytest.mark.parametrize("case", sorted(CASES))
def test_behind_the_front_end_every_bad_push_is_refused_by_cloud_run_or_the_worker(
    worker: WorkerHarness, case: str
) -> None:
    make_token, _ = CASES[case]
    status, refused_by = FRONT_END_STATUS[case]
    worker.schedule("job-1", worker.upload("src/a.mp4"))
    claimed = worker.claim_one("job-1")
    worker.enqueue(claimed)
    token = make_token(worker)
    response = worker.post(
        envelope("job-1", claimed.generation), token=token, authorize=token is not None
    )
    assert response.status_code == status
    if refused_by == "front end":
        assert response.headers["Content-Type"].startswith("text/html")
        assert sum(worker.counter.statuses.values()) == 0
    else:
        assert response.json() == {"error": "forbidden"}
    assert worker.job("job-1").state is State.ENQUEUED
    assert worker.deleter.calls == 0


def test_a_stripped_token_is_refused_by_a_worker_not_behind_cloud_run_iam(
    direct_worker: WorkerHarness, caplog: pytest.LogCaptureFixture
) -> None:
    worker = direct_worker
    worker.schedule("job-1", worker.upload("src/a.mp4"))
    claimed = worker.claim_one("job-1")
    worker.enqueue(claimed)
    stripped = worker.token().rsplit(".", 1)[0] + "." + SIGNATURE_REMOVED
    with caplog.at_level(logging.WARNING):
        response = worker.post(envelope("job-1", claimed.generation), token=stripped)
    assert response.status_code == 401
    assert "not configured as behind Cloud Run IAM" in caplog.text
    assert worker.job("job-1").state is State.ENQUEUED


def test_a_replayed_stripped_token_is_refused_by_the_front_end(worker: WorkerHarness) -> None:
    worker.schedule("job-1", worker.upload("src/a.mp4"))
    claimed = worker.claim_one("job-1")
    worker.enqueue(claimed)
    stripped = worker.token().rsplit(".", 1)[0] + "." + SIGNATURE_REMOVED
    response = worker.post(envelope("job-1", claimed.generation), token=stripped)
    assert response.status_code == 401
    assert sum(worker.counter.statuses.values()) == 0
    assert worker.job("job-1").state is State.ENQUEUED
