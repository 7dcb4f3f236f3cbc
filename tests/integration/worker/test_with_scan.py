"""The whole loop: the scan claims and publishes, Pub/Sub pushes, the worker acts; a storage
outage past the threshold puts the job 30 days out, and a scan run 30 days later finishes it."""

from __future__ import annotations

from collections.abc import Callable
from datetime import timedelta

import pytest
from google.cloud import pubsub_v1

from services.edge.publisher import Publisher
from services.jobs.budget import ScanLimits
from services.jobs.state import State
from services.scan.scanner import Scanner
from tests.integration.worker.harness import PushTopic, WorkerHarness, wait_until

PushFactory = Callable[..., PushTopic]


@pytest.mark.production_strict("OIDC token on push")
def test_outage_defers_a_job_30_days_and_the_scan_run_after_them_completes_it(
    worker: WorkerHarness, push: PushFactory, publisher_client: pubsub_v1.PublisherClient
) -> None:
    """Production push with `oidc_token` sends a Google-signed ID token in `Authorization`
    (https://cloud.google.com/pubsub/docs/authenticate-push-subscriptions); Google's
    emulator sends none, so the worker behind its Cloud Run front end answers 403.
    """
    topic = push(max_delivery_attempts=5)
    scanner = Scanner(
        worker.store, Publisher(publisher_client, topic.topic), worker.clock, ScanLimits()
    )
    worker.schedule("job-1", worker.upload("src/a.mp4"))
    worker.deleter.failures = 10**6  # storage is down

    first = scanner.run()
    wait_until(lambda: worker.job("job-1").state is State.DEFERRED, what="job-1 deferred")

    assert first.published == 1
    assert worker.job("job-1").due_at == worker.clock.now() + timedelta(days=30)
    assert worker.objects() == {"src/a.mp4"}
    worker.clock.advance(timedelta(days=29, hours=23))
    assert scanner.run().published == 0  # not due yet

    worker.deleter.failures = 0  # storage is back
    worker.clock.advance(timedelta(hours=1))
    second = scanner.run()
    wait_until(lambda: worker.job("job-1").state is State.COMPLETED, what="job-1 completed")

    assert second.published == 1
    assert worker.objects() == set()
    assert worker.deleter.deletions == 1
    job = worker.job("job-1")
    # Four quick deliveries in the first retry cycle, then the second cycle completed it.
    assert job.generation == 2 and job.attempt == 2
