"""The worker end to end: Firestore, Cloud Storage and Pub/Sub emulators, real clients, the
Pub/Sub emulator pushing with OIDC tokens to the worker on a real local port."""

from __future__ import annotations

import threading
from collections import Counter
from collections.abc import Callable
from datetime import timedelta
from typing import Any

import pytest

from services.jobs.errors import TransientError
from services.jobs.state import State
from services.worker.media import SourceDeleter
from tests.integration.worker.harness import LEASE, PushTopic, WorkerHarness, envelope, wait_until
from tests.integration.worker.storage_proxy import flaky_storage

PushFactory = Callable[..., PushTopic]
KEY = "media-job-1:retention-decision-1"


def _state_is(worker: WorkerHarness, job_id: str, state: State) -> Callable[[], bool]:
    return lambda: worker.job(job_id).state is state


@pytest.mark.production_strict("OIDC token on push")
def test_pushed_job_deletes_its_objects_completes_and_records_idempotency(
    worker: WorkerHarness, push: PushFactory
) -> None:
    """Production push with `oidc_token` sends a Google-signed ID token in `Authorization`
    (https://cloud.google.com/pubsub/docs/authenticate-push-subscriptions); Google's
    emulator sends none, so the worker behind its Cloud Run front end answers 403.
    """
    topic = push()
    objects = worker.upload("src/1/a.mp4", "src/1/b.mp4", "keep/other.mp4")
    # A supplied key: the idempotency document is written (a derived key needs none).
    worker.schedule("job-1", objects[:2], idempotency_key=KEY)
    claimed = worker.claim_one("job-1")
    worker.enqueue(claimed, topic.publish(claimed))

    wait_until(_state_is(worker, "job-1", State.COMPLETED), what="job-1 completed")

    job = worker.job("job-1")
    assert job.result is not None and job.result.outcome == "deleted"
    assert sorted(job.result.details["deleted"]) == ["src/1/a.mp4", "src/1/b.mp4"]
    assert worker.objects() == {"keep/other.mp4"}
    record = worker.store.get_idempotency(job.idempotency_key)
    assert record is not None and (record.job_id, record.outcome) == ("job-1", "deleted")
    assert worker.deleter.deletions == 1
    assert worker.counter.statuses[204] == 1


@pytest.mark.production_strict("OIDC token on push")
def test_unwrapped_push_with_metadata_headers_completes_too(
    worker: WorkerHarness, push: PushFactory
) -> None:
    """Production push with `oidc_token` sends a Google-signed ID token in `Authorization`
    (https://cloud.google.com/pubsub/docs/authenticate-push-subscriptions); Google's
    emulator sends none, so the worker behind its Cloud Run front end answers 403.
    """
    topic = push(no_wrapper=True)
    worker.schedule("job-raw", worker.upload("src/raw.mp4"))
    claimed = worker.claim_one("job-raw")
    worker.enqueue(claimed, topic.publish(claimed))
    wait_until(_state_is(worker, "job-raw", State.COMPLETED), what="job-raw completed")
    assert worker.objects() == set()


def test_same_id_delivered_three_times_in_a_row_deletes_once(worker: WorkerHarness) -> None:
    worker.schedule("job-1", worker.upload("src/a.mp4"), idempotency_key=KEY)
    claimed = worker.claim_one("job-1")
    worker.enqueue(claimed)
    body = envelope("job-1", claimed.generation)

    statuses = [worker.post(body).status_code for _ in range(3)]

    assert statuses == [204, 200, 200]
    assert worker.deleter.deletions == 1 and worker.deleter.calls == 1
    assert worker.completions("job-1") == 1
    assert worker.idempotency_documents() == 1


def test_same_id_delivered_concurrently_deletes_once(worker: WorkerHarness) -> None:
    worker.schedule("job-1", worker.upload("src/a.mp4"))
    claimed = worker.claim_one("job-1")
    worker.enqueue(claimed)
    body = envelope("job-1", claimed.generation)
    token = worker.token()
    barrier = threading.Barrier(6)
    statuses: Counter[int] = Counter()
    lock = threading.Lock()

    def deliver() -> None:
        barrier.wait()
        status = worker.post(body, token=token).status_code
        with lock:
            statuses[status] += 1

    threads = [threading.Thread(target=deliver) for _ in range(6)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=60)

    # Exactly one delivery did the work; the rest were told to come back (429: lease held,
    # 503: contention) or saw it done (200: duplicate).
    assert statuses[204] == 1
    assert set(statuses) <= {204, 200, 429, 503}
    assert worker.deleter.deletions == 1 and worker.deleter.calls == 1
    assert worker.completions("job-1") == 1
    assert worker.job("job-1").state is State.COMPLETED
    # A redelivery of any of the refused ones is now a duplicate.
    assert worker.post(body, token=token).status_code == 200


@pytest.mark.production_strict("OIDC token on push")
def test_job_cancelled_after_enqueue_deletes_nothing(
    worker: WorkerHarness, push: PushFactory
) -> None:
    """Production push with `oidc_token` sends a Google-signed ID token in `Authorization`
    (https://cloud.google.com/pubsub/docs/authenticate-push-subscriptions); Google's
    emulator sends none, so the worker behind its Cloud Run front end answers 403.
    """
    topic = push()
    worker.schedule("job-1", worker.upload("src/a.mp4"))
    claimed = worker.claim_one("job-1")
    worker.enqueue(claimed)
    worker.store.cancel("job-1", "retention decision revoked", "ops@example.com")

    topic.publish(claimed)
    wait_until(lambda: worker.counter.statuses[200] >= 1, what="the push to be answered")

    assert worker.job("job-1").state is State.CANCELLED
    assert worker.objects() == {"src/a.mp4"}
    assert worker.deleter.calls == 0


def test_cancel_requested_while_running_is_honoured_by_the_next_delivery(
    worker: WorkerHarness,
) -> None:
    worker.schedule("job-1", worker.upload("src/a.mp4"))
    claimed = worker.claim_one("job-1")
    worker.enqueue(claimed)
    worker.deleter.failures = 1  # the first delivery fails transiently: the job is released
    body = envelope("job-1", claimed.generation)
    assert worker.post(body).status_code == 503
    # Running again under another worker's lease when the operator asks to cancel.
    worker.store.start("job-1", claimed.generation, LEASE, "other-worker")
    worker.store.cancel("job-1", "retention decision revoked", "ops@example.com")
    worker.clock.advance(LEASE + timedelta(seconds=1))  # the other worker died

    assert worker.post(envelope("job-1", claimed.generation, delivery_attempt=2)).status_code == 200
    assert worker.job("job-1").state is State.CANCELLED
    assert worker.objects() == {"src/a.mp4"}


@pytest.mark.production_strict("OIDC token on push")
def test_storage_failing_briefly_answers_503_then_the_redelivery_completes(
    worker: WorkerHarness, push: PushFactory
) -> None:
    """Production push with `oidc_token` sends a Google-signed ID token in `Authorization`
    (https://cloud.google.com/pubsub/docs/authenticate-push-subscriptions); Google's
    emulator sends none, so the worker behind its Cloud Run front end answers 403.
    """
    topic = push()
    worker.schedule("job-1", worker.upload("src/a.mp4"))
    worker.deleter.failures = 2
    claimed = worker.claim_one("job-1")
    worker.enqueue(claimed, topic.publish(claimed))

    wait_until(_state_is(worker, "job-1", State.COMPLETED), what="job-1 completed")
    # The record is completed just before the answer goes out: wait for the answer too.
    wait_until(lambda: worker.counter.statuses[204] >= 1, what="the 204 answer")

    assert worker.counter.statuses[503] == 2
    assert worker.counter.statuses[204] == 1
    assert worker.deleter.calls == 3 and worker.deleter.deletions == 1
    job = worker.job("job-1")
    assert job.attempt == 1  # three deliveries, one retry cycle: Pub/Sub counted them
    assert worker.objects() == set()


@pytest.mark.production_strict("OIDC token on push")
def test_storage_down_past_the_threshold_defers_30_days_then_a_later_claim_completes(
    worker: WorkerHarness, push: PushFactory
) -> None:
    """Production push with `oidc_token` sends a Google-signed ID token in `Authorization`
    (https://cloud.google.com/pubsub/docs/authenticate-push-subscriptions); Google's
    emulator sends none, so the worker behind its Cloud Run front end answers 403.
    """
    topic = push(max_delivery_attempts=5)
    worker.schedule("job-1", worker.upload("src/a.mp4"))
    worker.deleter.failures = 10**6  # storage stays down
    claimed = worker.claim_one("job-1")
    worker.enqueue(claimed, topic.publish(claimed))

    wait_until(_state_is(worker, "job-1", State.DEFERRED), what="job-1 deferred")

    deferred_at = worker.clock.now()
    job = worker.job("job-1")
    assert job.due_at == deferred_at + timedelta(days=30)
    assert job.last_error is not None and job.last_error.code == "transient"
    assert job.attempt == 2  # the next retry cycle
    # Three redeliveries asked for (503), the fourth delivery acknowledged: never dead-lettered.
    assert worker.counter.statuses[503] == 3
    assert worker.counter.statuses[200] == 1
    assert worker.objects() == {"src/a.mp4"}
    # Nothing is due before the 30 days are up.
    worker.clock.advance(timedelta(days=29))
    assert worker.claim("run-early") == []

    worker.deleter.failures = 0  # storage is back
    worker.clock.advance(timedelta(days=1, seconds=1))
    again = worker.claim_one("job-1", "run-30-days-later")
    assert again.generation == claimed.generation + 1
    worker.enqueue(again, topic.publish(again, "run-30-days-later"))

    wait_until(_state_is(worker, "job-1", State.COMPLETED), what="job-1 completed")
    assert worker.objects() == set()
    assert worker.deleter.deletions == 1
    assert worker.job("job-1").attempt == 2


def test_stale_generation_is_acknowledged_without_acting(worker: WorkerHarness) -> None:
    worker.schedule("job-1", worker.upload("src/a.mp4"))
    claimed = worker.claim_one("job-1")
    worker.enqueue(claimed)
    response = worker.post(envelope("job-1", claimed.generation - 1))
    assert response.status_code == 200
    assert response.json() == {"outcome": "stale", "job_id": "job-1"}
    assert worker.deleter.calls == 0


class SimulatedCrash(Exception):
    """Stands for the process dying between the side effect and recording its result."""


def test_crash_after_deletion_before_completion_redelivery_completes_without_second_effect(
    worker: WorkerHarness, monkeypatch: pytest.MonkeyPatch
) -> None:
    worker.schedule("job-1", worker.upload("src/a.mp4"), idempotency_key=KEY)
    claimed = worker.claim_one("job-1")
    worker.enqueue(claimed)
    real_complete = worker.store.complete
    crashes = [SimulatedCrash()]

    def complete_unless_crashing(*args: Any, **kwargs: Any) -> Any:
        # The process "dies" at the moment it would record the result: nothing is written,
        # and the lease is never released.
        if crashes:
            raise crashes.pop()
        return real_complete(*args, **kwargs)

    monkeypatch.setattr(worker.store, "complete", complete_unless_crashing)
    body = envelope("job-1", claimed.generation)

    # The object is gone but nothing was recorded: Pub/Sub sees a failure and redelivers.
    assert worker.post(body).status_code == 500
    assert worker.objects() == set()
    assert worker.job("job-1").state is State.RUNNING
    # While the dead attempt's lease is live, redeliveries are asked to come back later.
    assert worker.post(envelope("job-1", claimed.generation, delivery_attempt=2)).status_code == 429
    worker.clock.advance(LEASE + timedelta(seconds=1))

    response = worker.post(envelope("job-1", claimed.generation, delivery_attempt=3))

    assert response.status_code == 204
    job = worker.job("job-1")
    assert job.state is State.COMPLETED and job.result is not None
    assert job.result.outcome == "already_absent"
    assert worker.deleter.deletions == 1  # the second run found nothing left to delete
    assert worker.completions("job-1") == 1
    assert worker.idempotency_documents() == 1


def test_permanent_error_fails_the_job_at_once(worker: WorkerHarness) -> None:
    worker.schedule("job-1", ["src/a.mp4"])
    claimed = worker.claim_one("job-1")
    worker.enqueue(claimed)
    # Params pointing at a bucket that does not exist: no retry can fix that.
    worker.firestore.collection("jobs").document("job-1").update(
        {"params": {"bucket": "no-such-bucket-anywhere", "object": "a"}}
    )
    response = worker.post(envelope("job-1", claimed.generation))
    assert response.status_code == 200 and response.json()["outcome"] == "failed"
    job = worker.job("job-1")
    assert job.state is State.FAILED and job.attempt == 1


def test_transient_errors_in_the_last_attempt_are_redelivered_then_fail_at_the_threshold(
    worker: WorkerHarness,
) -> None:
    worker.schedule("job-1", worker.upload("src/a.mp4"), max_attempts=1)
    claimed = worker.claim_one("job-1")
    worker.enqueue(claimed)
    worker.deleter.failures = 2
    worker.deleter.failure = lambda: TransientError("storage 503")
    # The only attempt still gets its quick redeliveries: release never spends attempts.
    first = worker.post(envelope("job-1", claimed.generation, delivery_attempt=1))
    assert first.status_code == 503
    assert (worker.job("job-1").state, worker.job("job-1").attempt) == (State.ENQUEUED, 1)
    # At the threshold a long retry is due, but no attempt is left: failed and acknowledged.
    response = worker.post(envelope("job-1", claimed.generation, delivery_attempt=4))
    assert response.status_code == 200 and response.json()["outcome"] == "failed"
    assert (worker.job("job-1").state, worker.job("job-1").attempt) == (State.FAILED, 1)


@pytest.mark.production_strict("OIDC token on push")
def test_storage_answering_503_over_http_is_retried_through_pubsub_until_it_recovers(
    worker: WorkerHarness, push: PushFactory, storage_emulator: Any
) -> None:
    """Production push with `oidc_token` sends a Google-signed ID token in `Authorization`
    (https://cloud.google.com/pubsub/docs/authenticate-push-subscriptions); Google's
    emulator sends none, so the worker behind its Cloud Run front end answers 403.
    """
    topic = push()
    worker.schedule("job-1", worker.upload("src/a.mp4"))
    with flaky_storage(storage_emulator.url) as (outage, client):
        worker.deleter.inner = SourceDeleter(client)
        outage.fail_deletes = 2
        claimed = worker.claim_one("job-1")
        worker.enqueue(claimed, topic.publish(claimed))

        wait_until(_state_is(worker, "job-1", State.COMPLETED), what="job-1 completed")
        wait_until(lambda: worker.counter.statuses[204] >= 1, what="the 204 answer")

    assert outage.answered[503] == 2
    assert worker.counter.statuses[503] == 2 and worker.counter.statuses[204] == 1
    assert worker.deleter.deletions == 1
    assert worker.objects() == set()


@pytest.mark.production_strict("OIDC token on push")
def test_same_id_published_three_times_is_deleted_and_completed_once(
    worker: WorkerHarness, push: PushFactory
) -> None:
    """Production push with `oidc_token` sends a Google-signed ID token in `Authorization`
    (https://cloud.google.com/pubsub/docs/authenticate-push-subscriptions); Google's
    emulator sends none, so the worker behind its Cloud Run front end answers 403.
    """
    topic = push()
    worker.schedule("job-1", worker.upload("src/a.mp4"), idempotency_key=KEY)
    claimed = worker.claim_one("job-1")
    message_ids = [topic.publish(claimed) for _ in range(3)]
    worker.enqueue(claimed, message_ids[0])

    # Every copy ends acknowledged: one completion, the others duplicates (a copy that met the
    # live lease was answered 429 and came back).
    wait_until(
        lambda: worker.counter.statuses[204] + worker.counter.statuses[200] == 3,
        what="three acknowledged deliveries",
    )
    assert worker.counter.statuses[204] == 1
    assert worker.deleter.deletions == 1 and worker.deleter.calls == 1
    assert worker.completions("job-1") == 1
    assert worker.idempotency_documents() == 1
