"""A slow worker whose lease lapsed: the reclaimer moved the job on while the action ran.

When the action then returns (success, transient or permanent error), the store refuses with
LeaseLost and the worker acknowledges the delivery as `stale` (2xx) with its one outcome line;
the job keeps what the reclaimer decided, and nothing is completed twice.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from datetime import timedelta
from typing import Any

import pytest

from services.jobs.actions import ActionRequest
from services.jobs.errors import PermanentError, TransientError
from services.jobs.state import State
from services.telemetry import metrics
from tests.integration.worker.harness import LEASE, WorkerHarness, envelope

CLAIM_TIMEOUT = timedelta(minutes=10)


def _outcome_lines(caplog: pytest.LogCaptureFixture) -> list[dict[str, Any]]:
    lines = [getattr(r, "fields", {}) for r in caplog.records]
    return [f for f in lines if f.get(metrics.LOG_EVENT) == metrics.EVENT_WORKER_OUTCOME]


def _lapse_then(worker: WorkerHarness, error: Exception | None) -> Callable[[ActionRequest], None]:
    """While the action runs: the lease lapses and the reclaimer takes the job back."""

    def during(request: ActionRequest) -> None:
        worker.clock.advance(LEASE + timedelta(seconds=1))
        (reclaimed,) = worker.store.reclaim_expired(
            worker.clock.now(), CLAIM_TIMEOUT, 10, "reclaim-1"
        )
        assert reclaimed.job_id == request.job_id
        if error is not None:
            raise error

    return during


@pytest.mark.parametrize(
    "error",
    [None, TransientError("storage answered 503"), PermanentError("bucket is gone")],
    ids=["action-succeeded", "transient-error", "permanent-error"],
)
def test_a_result_after_the_lease_was_reclaimed_is_acknowledged_as_stale(
    worker: WorkerHarness, caplog: pytest.LogCaptureFixture, error: Exception | None
) -> None:
    worker.schedule("slow", worker.upload("src/slow.mp4"))
    claimed = worker.claim_one("slow")
    worker.enqueue(claimed)
    worker.deleter.after_delete = _lapse_then(worker, error)
    caplog.set_level(logging.INFO)

    response = worker.post(envelope("slow", claimed.generation))

    assert response.status_code // 100 == 2
    assert response.json()["outcome"] == "stale"
    (line,) = _outcome_lines(caplog)
    assert line[metrics.LOG_OUTCOME] == "stale"
    job = worker.job("slow")
    # What the reclaimer decided stands: due again at once, in the next attempt.
    assert (job.state, job.attempt, job.last_error and job.last_error.code) == (
        State.DEFERRED,
        2,
        "lease_expired",
    )
    assert worker.completions("slow") == 0
    assert worker.idempotency_documents() == 0
    assert worker.counter.statuses[500] == 0


def test_a_success_after_the_last_attempt_was_reclaimed_to_failed_is_stale(
    worker: WorkerHarness, caplog: pytest.LogCaptureFixture
) -> None:
    worker.schedule("last", worker.upload("src/last.mp4"), max_attempts=1)
    claimed = worker.claim_one("last")
    worker.enqueue(claimed)
    worker.deleter.after_delete = _lapse_then(worker, None)
    caplog.set_level(logging.INFO)

    response = worker.post(envelope("last", claimed.generation))

    assert response.status_code // 100 == 2
    assert response.json()["outcome"] == "stale"
    assert [line[metrics.LOG_OUTCOME] for line in _outcome_lines(caplog)] == ["stale"]
    assert worker.job("last").state is State.FAILED
    assert worker.completions("last") == 0


def test_the_next_claim_completes_the_job_once(
    worker: WorkerHarness, caplog: pytest.LogCaptureFixture
) -> None:
    worker.schedule("slow", worker.upload("src/slow.mp4"))
    claimed = worker.claim_one("slow")
    worker.enqueue(claimed)
    worker.deleter.after_delete = _lapse_then(worker, None)
    assert worker.post(envelope("slow", claimed.generation)).json()["outcome"] == "stale"

    worker.deleter.after_delete = None
    again = worker.claim_one("slow", "run-2")
    worker.enqueue(again, "m-2")
    response = worker.post(envelope("slow", again.generation, message_id="m-2"))

    assert response.status_code == 204
    assert worker.job("slow").state is State.COMPLETED
    assert worker.completions("slow") == 1
    assert worker.deleter.deletions == 1  # the second run found the object already gone
