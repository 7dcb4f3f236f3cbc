"""A scan service wired to the emulators: real Firestore and Pub/Sub clients, real OIDC tokens.

`scan_rig(**settings)` builds one: the jobs store on a FakeClock, a Publisher on a fresh topic
with a pull subscription that counts what was published, an InMemorySink, the scan_runs log,
and the Flask app from `create_app`. `rig.post()` sends a request through Flask's test client;
`rig.serve()` runs the app on a real 127.0.0.1 port for concurrent HTTP requests.
"""

from __future__ import annotations

import dataclasses
import threading
from collections import Counter
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from datetime import UTC, datetime, timedelta
from typing import Any

import flask
import pytest
from google.cloud import firestore, pubsub_v1
from werkzeug.serving import make_server

from services.jobs import schema
from services.jobs.clock import FakeClock
from services.jobs.metrics import InMemorySink
from services.jobs.model import Job, NewJob
from services.jobs.publisher import ATTR_GENERATION, Publisher
from services.jobs.runs import ScanRunLog
from services.jobs.store import FirestoreJobStore
from services.scan.app import create_app
from services.scan.settings import ScanSettings

T0 = datetime(2026, 6, 1, 12, 0, tzinfo=UTC)
ACTION = "media.delete_source"
INVOKER = "scheduler@test-project.iam.gserviceaccount.com"
AUDIENCE = "https://scan-test.a.run.app"
TOPIC = "deferred-jobs"
SUBSCRIPTION = "scan-test-pull"


@dataclasses.dataclass
class Rig:
    project: str
    settings: ScanSettings
    clock: FakeClock
    store: FirestoreJobStore
    publisher: Publisher
    sink: InMemorySink
    runs: ScanRunLog
    app: flask.Flask
    oidc: Any
    client: firestore.Client
    subscriber: pubsub_v1.SubscriberClient
    subscription: str
    pulled: Counter[str] = dataclasses.field(default_factory=Counter)
    generations: dict[str, list[int]] = dataclasses.field(default_factory=dict)

    def token(self, email: str = INVOKER, audience: str = AUDIENCE, **kwargs: Any) -> str:
        token: str = self.oidc.issuer.mint(audience, email, **kwargs)
        return token

    def post(self, body: bytes | str = b"", token: str | None = None, **kwargs: Any) -> Any:
        headers = {"Authorization": f"Bearer {token or self.token()}"}
        headers.update(kwargs.pop("headers", {}))
        return self.app.test_client().post("/", data=body, headers=headers, **kwargs)

    def scan(self, body: bytes | str = b"") -> dict[str, Any]:
        """One authorised scan request that must succeed; its JSON summary."""
        response = self.post(body)
        assert response.status_code == 200, response.get_data(as_text=True)
        summary: dict[str, Any] = response.get_json()
        return summary

    def seed(self, count: int, due_at: datetime = T0, prefix: str = "job") -> list[str]:
        """Write `count` deferred jobs with batched writes (what `schedule` would write)."""
        ids = [f"{prefix}-{n:06d}" for n in range(count)]
        for start in range(0, count, 500):
            batch = self.client.batch()
            for job_id in ids[start : start + 500]:
                new = NewJob(job_id, ACTION, f"media-{job_id}", due_at, {"bucket": "b"})
                job = Job.create(new.validated(), self.clock.now())
                batch.set(self.client.collection(schema.JOBS).document(job_id), job.to_document())
            batch.commit()
        return ids

    def pull(self) -> Counter[str]:
        """Drain the subscription; adds to and returns the count of messages per job ID."""
        while True:
            response = self.subscriber.pull(
                subscription=self.subscription, max_messages=1000, return_immediately=True
            )
            batch = list(response.received_messages)
            if not batch:
                return self.pulled
            self.subscriber.acknowledge(
                subscription=self.subscription, ack_ids=[m.ack_id for m in batch]
            )
            for received in batch:
                job_id = received.message.data.decode()
                self.pulled[job_id] += 1
                generation = int(received.message.attributes[ATTR_GENERATION])
                self.generations.setdefault(job_id, []).append(generation)

    def states(self, ids: list[str]) -> Counter[str]:
        refs = [self.client.collection(schema.JOBS).document(i) for i in ids]
        return Counter(s.get("state") for s in self.client.get_all(refs))

    @contextmanager
    def serve(self) -> Iterator[str]:
        """The app on a real 127.0.0.1 port, threaded; yields its URL."""
        server = make_server("127.0.0.1", 0, self.app, threaded=True)
        thread = threading.Thread(target=server.serve_forever, name="scan-http", daemon=True)
        thread.start()
        try:
            yield f"http://127.0.0.1:{server.server_port}/"
        finally:
            server.shutdown()
            server.server_close()
            thread.join(timeout=5)


@pytest.fixture
def scan_rig(
    firestore_client: firestore.Client,
    firestore_project: str,
    pubsub_emulator: Any,
    oidc_server: Any,
    publisher_client: pubsub_v1.PublisherClient,
    subscriber_client: pubsub_v1.SubscriberClient,
) -> Iterator[Callable[..., Rig]]:
    """A factory: `scan_rig(max_per_run=..., page_size=..., clock=..., publisher=...)`."""
    project = firestore_project
    topic_path = publisher_client.topic_path(project, TOPIC)
    subscription = subscriber_client.subscription_path(project, SUBSCRIPTION)
    publisher_client.create_topic(name=topic_path)
    subscriber_client.create_subscription(name=subscription, topic=topic_path)
    built: list[Rig] = []

    def build(
        *,
        clock: FakeClock | None = None,
        publisher: Publisher | None = None,
        **overrides: Any,
    ) -> Rig:
        settings = ScanSettings(
            project=project,
            topic=TOPIC,
            audience=AUDIENCE,
            allowed_invokers=frozenset({INVOKER}),
            certs_url=oidc_server.certs_url,
            metrics="none",
            **{"max_per_run": 100, "page_size": 50, "publish_timeout_s": 5.0, **overrides},
        )
        clock = clock or FakeClock(T0 + timedelta(minutes=1))
        store = FirestoreJobStore(firestore_client, clock, timeout_s=settings.firestore_timeout_s)
        publisher = publisher or Publisher.create(
            project, TOPIC, timeout_s=settings.publish_timeout_s
        )
        sink = InMemorySink()
        runs = ScanRunLog(firestore_client, retention=timedelta(seconds=settings.run_retention_s))
        app = create_app(
            settings, clock=clock, store=store, publisher=publisher, metrics=sink, runs=runs
        )
        rig = Rig(
            project=project,
            settings=settings,
            clock=clock,
            store=store,
            publisher=publisher,
            sink=sink,
            runs=runs,
            app=app,
            oidc=oidc_server,
            client=firestore_client,
            subscriber=subscriber_client,
            subscription=subscription,
        )
        built.append(rig)
        return rig

    yield build
    for rig in built:
        rig.publisher.close()
    pubsub_emulator.clear_faults()
