"""The founding case on the emulators: storage stays down across several 30-day retry cycles.

`attempt` counts retry cycles: Pub/Sub's quick redeliveries inside a cycle (503 until the
delivery-attempt threshold) never spend one; each long retry (`retry_later`) is the next
cycle; when the last cycle ends in a long retry, the job fails for good.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from datetime import timedelta

import pytest

from services.jobs.actions import DEFAULT_RETRY_LATER_AFTER_ATTEMPTS
from services.jobs.state import State
from services.telemetry import metrics
from tests.integration.worker.harness import PushTopic, WorkerHarness, envelope, wait_until

PushFactory = Callable[..., PushTopic]
MONTH = timedelta(days=30)
QUICK_RETRIES = DEFAULT_RETRY_LATER_AFTER_ATTEMPTS - 1  # 503s before the threshold delivery


def _cycle(worker: WorkerHarness, topic: PushTopic, number: int) -> None:
    """One retry cycle: a scan claims the due job and publishes it; wait for the ack."""
    run_id = f"run-cycle-{number}"
    claimed = worker.claim_one("job-1", run_id)
    assert claimed.generation == number
    acknowledged = worker.counter.statuses[200] + worker.counter.statuses[204]
    worker.enqueue(claimed, topic.publish(claimed, run_id))
    wait_until(
        lambda: worker.counter.statuses[200] + worker.counter.statuses[204] == acknowledged + 1,
        what=f"cycle {number} acknowledged",
    )


@pytest.mark.production_strict("OIDC token on push")
def test_storage_down_for_three_30_day_cycles_then_recovered_completes_the_job(
    worker: WorkerHarness, push: PushFactory
) -> None:
    """Production push with `oidc_token` sends a Google-signed ID token in `Authorization`
    (https://cloud.google.com/pubsub/docs/authenticate-push-subscriptions); Google's
    emulator sends none, so the worker behind its Cloud Run front end answers 403.
    """
    topic = push(max_delivery_attempts=5)
    worker.schedule("job-1", worker.upload("src/a.mp4"), max_attempts=5)
    worker.deleter.failures = 10**6  # storage stays down

    for cycle in (1, 2, 3):
        assert worker.job("job-1").attempt == cycle
        _cycle(worker, topic, cycle)
        job = worker.job("job-1")
        assert job.state is State.DEFERRED
        assert job.attempt == cycle + 1
        assert job.due_at == worker.clock.now() + MONTH
        assert job.last_error is not None and job.last_error.code == "transient"
        # Each cycle: quick redeliveries (503), then the threshold delivery acknowledged.
        assert worker.counter.statuses[503] == QUICK_RETRIES * cycle
        assert worker.counter.statuses[200] == cycle
        assert worker.deleter.calls == DEFAULT_RETRY_LATER_AFTER_ATTEMPTS * cycle
        worker.clock.advance(MONTH - timedelta(seconds=1))
        assert worker.claim(f"run-early-{cycle}") == []  # not due before the 30 days
        worker.clock.advance(timedelta(seconds=1))

    worker.deleter.failures = 0  # storage is back
    _cycle(worker, topic, 4)

    job = worker.job("job-1")
    assert (job.state, job.attempt, job.generation) == (State.COMPLETED, 4, 4)
    assert job.result is not None and job.result.outcome == "deleted"
    assert worker.counter.statuses[204] == 1
    assert worker.objects() == set()
    assert worker.deleter.deletions == 1
    # The bounded history keeps the newest entries: the last long retry named its cycle.
    last_retry = [e for e in job.history if e.to_state is State.DEFERRED][-1]
    assert last_retry.reason.endswith("attempt 4 of 5 next")


@pytest.mark.production_strict("OIDC token on push")
def test_the_max_attempts_th_long_retry_fails_the_job_for_good(
    worker: WorkerHarness, push: PushFactory, caplog: pytest.LogCaptureFixture
) -> None:
    """Production push with `oidc_token` sends a Google-signed ID token in `Authorization`
    (https://cloud.google.com/pubsub/docs/authenticate-push-subscriptions); Google's
    emulator sends none, so the worker behind its Cloud Run front end answers 403.
    """
    topic = push(max_delivery_attempts=5)
    worker.schedule("job-1", worker.upload("src/a.mp4"), max_attempts=3)
    worker.deleter.failures = 10**6  # storage never recovers

    with caplog.at_level(logging.INFO):
        for cycle in (1, 2, 3):
            _cycle(worker, topic, cycle)
            if cycle < 3:
                assert (worker.job("job-1").state, worker.job("job-1").attempt) == (
                    State.DEFERRED,
                    cycle + 1,
                )
                worker.clock.advance(MONTH)

    job = worker.job("job-1")
    assert (job.state, job.attempt) == (State.FAILED, 3)
    assert job.last_error is not None and job.last_error.code == "transient"
    assert job.expire_at is not None  # terminal: the TTL is set
    assert worker.counter.statuses[200] == 3 and worker.counter.statuses[503] == QUICK_RETRIES * 3
    assert worker.objects() == {"src/a.mp4"}
    failed = [
        r
        for r in caplog.records
        if (getattr(r, "fields", None) or {}).get(metrics.LOG_EVENT) == metrics.EVENT_JOB_FAILED
    ]
    assert len(failed) == 1 and failed[0].levelno == logging.ERROR
    # Terminal: a later scan finds nothing, and a stray redelivery is a duplicate.
    worker.clock.advance(MONTH)
    assert worker.claim("run-after") == []
    stray = worker.post(envelope("job-1", 3, delivery_attempt=1))
    assert stray.status_code == 200 and stray.json()["outcome"] == "duplicate"
    assert worker.job("job-1").state is State.FAILED
