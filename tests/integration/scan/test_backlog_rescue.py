"""The backlog-aware stale-enqueued rescue (issue 24, finding 9), end to end on the emulators:
jobs in Firestore, their messages in a Pub/Sub subscription, the subscription's oldest unacked
age sampled by the Monitoring emulator (60 s sampling, 120 s visibility) and read back with the
official `MetricServiceClient` by `MonitoringQueueAge`.

Before: the rescue measured from `enqueued_at` alone, so a backlog older than
JOBS_ENQUEUED_TIMEOUT_S (a long worker outage) had every job whose message was still queued
taken back and published again. Now only a job enqueued before the oldest message still waiting
is taken back (its message is gone), and with no visible sample the step waits.

The clocks: the store, the reclaimer and the Monitoring emulator share one FakeClock, set to
the real time around each publish (Pub/Sub stamps publish times with the real clock), then
moved on; the Pub/Sub emulator's ages are measured against it.
"""

from __future__ import annotations

import logging
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta

import pytest
from google.cloud import firestore, pubsub_v1

from emulators.monitoring.server import MonitoringEmulator, pubsub_admin_source
from emulators.monitoring.server import start as start_monitoring
from emulators.pubsub.server import PubsubEmulator
from services.edge.publisher import ATTR_GENERATION
from services.jobs.budget import ScanLimits
from services.jobs.clock import FakeClock
from services.jobs.model import NewJob
from services.jobs.state import State
from services.scan.queue_age import MonitoringQueueAge, monitoring_client
from services.scan.reclaimer import REASON_RESCUE_SKIPPED, Reclaimer
from services.scan.summary import RunTally
from services.store.job_store import FirestoreJobStore
from tests.fixtures.store import mark_enqueued

pytestmark = pytest.mark.builtin_emulator(
    "the Monitoring emulator samples the built-in Pub/Sub emulator"
)

ENQUEUED_TIMEOUT = timedelta(minutes=5)  # the setting's floor (MIN_ENQUEUED_TIMEOUT_S)
CLAIM_TIMEOUT = timedelta(minutes=10)
SUBSCRIPTION = "jobs-push"


def _real_now() -> datetime:
    return datetime.now(UTC)


class World:
    def __init__(
        self,
        store: FirestoreJobStore,
        clock: FakeClock,
        publisher: pubsub_v1.PublisherClient,
        topic: str,
        monitoring: MonitoringEmulator,
        project: str,
    ) -> None:
        self.store = store
        self.clock = clock
        self.publisher = publisher
        self.topic = topic
        self.monitoring = monitoring
        self.client = monitoring_client(monitoring.address)
        self.ages = MonitoringQueueAge(self.client, project, SUBSCRIPTION, clock)

    def enqueue(self, job_id: str, *, publish: bool) -> None:
        """Schedule, claim and mark one job enqueued, its message published (or lost)."""
        self.store.schedule(
            NewJob(
                job_id,
                "media.delete_source",
                f"m-{job_id}",
                self.clock.now(),
                {"objects": [f"{job_id}/source.mp4"]},
            )
        )
        [claimed] = [c for c in self.store.claim_due(self.clock.now(), "run-1", 10)]
        message_id = "lost"
        if publish:
            future = self.publisher.publish(
                self.topic, job_id.encode(), **{ATTR_GENERATION: str(claimed.generation)}
            )
            message_id = future.result(timeout=30)
            # Marked after the publish is acknowledged, as the scan does.
            self.clock.set(max(self.clock.now(), _real_now()))
        mark_enqueued(self.store, job_id, claimed.generation, message_id)

    def rescue(self) -> RunTally:
        limits = ScanLimits(enqueued_timeout_s=ENQUEUED_TIMEOUT.total_seconds())
        tally = RunTally()
        Reclaimer(self.store, self.clock, limits, self.ages).reclaim("run-9", CLAIM_TIMEOUT, tally)
        return tally

    def state(self, job_id: str) -> State:
        job = self.store.get(job_id)
        assert job is not None
        return job.state


@pytest.fixture
def world(
    firestore_client: firestore.Client,
    pubsub_emulator: PubsubEmulator,
    publisher_client: pubsub_v1.PublisherClient,
    subscriber_client: pubsub_v1.SubscriberClient,
    pubsub_project: str,
) -> Iterator[World]:
    clock = FakeClock(_real_now().replace(microsecond=0))
    topic = publisher_client.create_topic(name=f"projects/{pubsub_project}/topics/jobs").name
    subscriber_client.create_subscription(
        name=f"projects/{pubsub_project}/subscriptions/{SUBSCRIPTION}", topic=topic
    )
    monitoring = start_monitoring(
        pubsub_emulator.oldest_unacked_publish_times,
        clock=lambda: clock.now().timestamp(),
        autosample=False,
    )
    try:
        yield World(
            FirestoreJobStore(firestore_client, clock),
            clock,
            publisher_client,
            topic,
            monitoring,
            pubsub_project,
        )
    finally:
        monitoring.stop()


def test_a_backlog_older_than_the_timeout_is_not_republished_but_a_lost_message_is(
    world: World, caplog: pytest.LogCaptureFixture
) -> None:
    # An hour ago: a job marked enqueued whose message never reached the subscription.
    world.clock.set(_real_now().replace(microsecond=0) - timedelta(hours=1))
    world.enqueue("lost", publish=False)
    # Now: three jobs whose messages wait in the subscription (no worker is pulling).
    world.clock.set(_real_now())
    for n in range(3):
        world.enqueue(f"queued-{n}", publish=True)
    # The backlog outlives the enqueued timeout: every job above is "stale" by enqueued_at.
    world.clock.advance(ENQUEUED_TIMEOUT + timedelta(minutes=1))
    world.monitoring.samples.sample()

    # Sampled, but not visible for 120 s yet: the age is unknown, so nothing is taken back.
    world.clock.advance(timedelta(seconds=60))
    with caplog.at_level(logging.WARNING):
        skipped = world.rescue()
    assert skipped.reclaimed == 0
    assert any(
        getattr(r, "fields", {}).get("reason") == REASON_RESCUE_SKIPPED for r in caplog.records
    )
    assert world.state("lost") is State.ENQUEUED

    world.clock.advance(timedelta(seconds=60))
    done = world.rescue()

    assert done.reclaimed == 1
    assert world.state("lost") is State.DEFERRED  # its message really was lost
    assert {world.state(f"queued-{n}") for n in range(3)} == {State.ENQUEUED}


def test_an_acked_backlog_lets_the_rescue_take_back_what_is_still_enqueued(
    world: World, subscriber_client: pubsub_v1.SubscriberClient, pubsub_project: str
) -> None:
    # A job whose message was delivered and acknowledged without the job ever starting (a
    # worker that acked and died, a subscription recreated): the backlog empties, the sample
    # says so (age 0), and the job is taken back once older than the timeout.
    world.clock.set(_real_now())
    world.enqueue("acked", publish=True)
    path = f"projects/{pubsub_project}/subscriptions/{SUBSCRIPTION}"
    pulled = subscriber_client.pull(subscription=path, max_messages=10, timeout=30)
    subscriber_client.acknowledge(
        subscription=path, ack_ids=[m.ack_id for m in pulled.received_messages]
    )
    world.clock.advance(ENQUEUED_TIMEOUT + timedelta(minutes=1))
    world.monitoring.samples.sample()
    world.clock.advance(timedelta(seconds=120))

    assert world.ages.oldest_unacked() is not None
    assert world.rescue().reclaimed == 1
    assert world.state("acked") is State.DEFERRED


def test_a_standalone_emulator_samples_the_pubsub_emulator_over_its_admin_endpoint(
    pubsub_emulator: PubsubEmulator,
    publisher_client: pubsub_v1.PublisherClient,
    subscriber_client: pubsub_v1.SubscriberClient,
    pubsub_project: str,
) -> None:
    topic = publisher_client.create_topic(name=f"projects/{pubsub_project}/topics/jobs").name
    path = f"projects/{pubsub_project}/subscriptions/jobs-sub"
    subscriber_client.create_subscription(name=path, topic=topic)
    published = datetime.now(UTC)
    publisher_client.publish(topic, b"job-1").result(timeout=30)
    later = FakeClock(published + timedelta(minutes=5))

    source = pubsub_admin_source(pubsub_emulator.admin_url)
    with start_monitoring(
        source, clock=lambda: later.now().timestamp(), autosample=False
    ) as emulator:
        emulator.samples.sample()
        later.advance(timedelta(seconds=120))
        client = monitoring_client(emulator.address)
        age = MonitoringQueueAge(client, pubsub_project, "jobs-sub", later).oldest_unacked()

    assert age is not None
    assert 5 * 60 - 5 <= age.oldest_unacked_age_s <= 5 * 60 + 5
