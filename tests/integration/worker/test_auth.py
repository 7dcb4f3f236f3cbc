"""Who may push: the real verifier over HTTP, against tokens from the session's OIDC issuer."""

from __future__ import annotations

import base64
import json
import time
from collections.abc import Callable

import pytest

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
    worker: WorkerHarness, case: str
) -> None:
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


def test_push_with_the_invokers_token_for_this_audience_is_processed(
    worker: WorkerHarness,
) -> None:
    worker.schedule("job-1", worker.upload("src/a.mp4"))
    claimed = worker.claim_one("job-1")
    worker.enqueue(claimed)
    response = worker.post(envelope("job-1", claimed.generation), token=worker.token())
    assert response.status_code == 204
    assert worker.job("job-1").state is State.COMPLETED
