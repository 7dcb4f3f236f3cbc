"""A scan service wired to the emulators: real Firestore and Pub/Sub clients, real OIDC tokens.

`scan_rig(**settings)` builds one: the jobs store on a FakeClock, a Publisher on a fresh topic
with a pull subscription that counts what was published, an InMemorySink, the scan_runs log,
and the Flask app from `create_app`.

By default the scan runs as on Cloud Run: the app is served on a 127.0.0.1 port behind a local
Cloud Run front end (`emulators/cloudrun`: the scheduler as sole invoker, infra's timeout and
concurrency), configured as behind Cloud Run IAM, and `rig.post()` goes over HTTP through the
front end. `scan_rig(cloud_run=False)` is the direct mode for tests of the service alone:
`rig.post()` uses Flask's test client and `rig.serve()` serves the bare app.
"""

from __future__ import annotations

import dataclasses
import threading
from collections import Counter
from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager
from datetime import UTC, datetime, timedelta
from typing import Any

import flask
import pytest
import requests
from google.cloud import firestore, pubsub_v1
from werkzeug.serving import BaseWSGIServer, make_server

from emulators.cloudrun.proxy import FrontEnd
from services.edge.publisher import ATTR_GENERATION, Publisher
from services.jobs import schema
from services.jobs.clock import FakeClock
from services.jobs.model import NewJob
from services.jobs.record import Job
from services.local.cloud_run import SCAN_CONCURRENCY, SCAN_TIMEOUT_S
from services.scan.app import create_app
from services.scan.settings import ScanSettings
from services.store.job_store import FirestoreJobStore
from services.store.partition_leases import PartitionLeases
from services.store.runs import ScanRunLog
from services.telemetry.metrics import InMemorySink
from tests.fixtures.cloudrun import front_end

T0 = datetime(2026, 6, 1, 12, 0, tzinfo=UTC)
ACTION = "media.delete_source"
INVOKER = "scheduler@test-project.iam.gserviceaccount.com"
AUDIENCE = "https://scan-test.a.run.app"
TOPIC = "deferred-jobs"
SUBSCRIPTION = "scan-test-pull"


class Reply:
    """A `requests` response read like Flask's test response (status_code, get_json, ...)."""

    def __init__(self, response: requests.Response) -> None:
        self.response = response
        self.status_code = response.status_code
        self.headers = response.headers

    def get_json(self) -> Any:
        return self.response.json()

    def json(self) -> Any:
        return self.response.json()

    def get_data(self, as_text: bool = False) -> str | bytes:
        return self.response.text if as_text else self.response.content


class Served:
    """The app on a real 127.0.0.1 port in a thread, and the front end before it (if any)."""

    def __init__(self, app: Callable[..., Any]) -> None:
        self.server: BaseWSGIServer = make_server("127.0.0.1", 0, app, threaded=True)
        self.url = f"http://127.0.0.1:{self.server.server_port}"
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)
        self.thread.start()
        self.front: FrontEnd | None = None

    def stop(self) -> None:
        if self.front is not None:
            self.front.stop()
        self.server.shutdown()
        self.server.server_close()
        self.thread.join(timeout=5)


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
    served: Served | None = None
    pulled: Counter[str] = dataclasses.field(default_factory=Counter)
    generations: dict[str, list[int]] = dataclasses.field(default_factory=dict)

    @property
    def audience(self) -> str:
        return self.settings.audience

    def token(self, email: str = INVOKER, audience: str | None = None, **kwargs: Any) -> str:
        token: str = self.oidc.issuer.mint(audience or self.audience, email, **kwargs)
        return token

    def post(self, body: bytes | str = b"", token: str | None = None, **kwargs: Any) -> Any:
        """POST /: through the front end over HTTP, or (direct) through Flask's test client."""
        headers = {"Authorization": f"Bearer {token or self.token()}"}
        headers.update(kwargs.pop("headers", {}))
        if self.served is None or self.served.front is None:
            return self.app.test_client().post("/", data=body, headers=headers, **kwargs)
        if "content_type" in kwargs:  # Flask's test-client spelling
            headers["Content-Type"] = kwargs.pop("content_type")
        url = self.served.front.url + "/"
        return Reply(requests.post(url, data=body, headers=headers, timeout=120, **kwargs))

    def scan(self, body: bytes | str = b"") -> dict[str, Any]:
        """One authorised scan request that must succeed; its JSON summary."""
        response = self.post(body)
        assert response.status_code == 200, response.get_data(as_text=True)
        summary: dict[str, Any] = response.get_json()
        return summary

    def seed(
        self,
        count: int,
        due_at: datetime = T0,
        prefix: str = "job",
        action: str = ACTION,
        params: Mapping[str, Any] | None = None,
    ) -> list[str]:
        """Write `count` deferred jobs with batched writes (what `schedule` would write), of
        `action` (any name: a plug-in's the scan itself need not know), with `params` when
        given (an http.request job's target, say)."""
        ids = [f"{prefix}-{n:06d}" for n in range(count)]
        for start in range(0, count, 500):
            batch = self.client.batch()
            for job_id in ids[start : start + 500]:
                media = {"object": f"media-{job_id}/source.mp4"}
                new = NewJob(job_id, ACTION, f"media-{job_id}", due_at, media)
                job = Job.create(new.validated(), self.clock.now(), shards=self.settings.shards)
                document = {**job.to_document(), "action": action}
                if params is not None:
                    document["params"] = dict(params)
                batch.set(self.client.collection(schema.JOBS).document(job_id), document)
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
        """The service's URL over real HTTP: its front end, or (direct) the bare app."""
        if self.served is not None and self.served.front is not None:
            yield self.served.front.url + "/"
            return
        served = Served(self.app)
        try:
            yield served.url + "/"
        finally:
            served.stop()


@pytest.fixture
def scan_rig(
    firestore_client: firestore.Client,
    firestore_project: str,
    pubsub_emulator: Any,
    oidc_server: Any,
    publisher_client: pubsub_v1.PublisherClient,
    subscriber_client: pubsub_v1.SubscriberClient,
    shard_indexes: Callable[[int], None],
) -> Iterator[Callable[..., Rig]]:
    """A factory: `scan_rig(max_per_run=..., page_size=..., clock=..., publisher=...)`. With
    `shards=N` the emulator serves the project with that N's index set, as a deployment with
    that `shards` key has."""
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
        cloud_run: bool = True,
        sleep: Callable[[float], None] | None = None,
        rates: dict[str, float] | None = None,
        max_clock_skew: timedelta | None = None,
        **overrides: Any,
    ) -> Rig:
        served: Served | None = None
        audience = AUDIENCE
        if cloud_run:
            # Served first (the front end needs an upstream), the app plugged in once built.
            apps: list[flask.Flask] = []
            served = Served(lambda environ, start: apps[0](environ, start))
            served.front = front_end(
                served.url,
                oidc_server.certs_url,
                invokers=[INVOKER],
                service="deferred-jobs-scan",
                timeout_s=SCAN_TIMEOUT_S,
                concurrency=SCAN_CONCURRENCY,
            )
            audience = served.front.url
        settings = ScanSettings(
            project=project,
            topic=TOPIC,
            audience=audience,
            allowed_invokers=frozenset({INVOKER}),
            certs_url=oidc_server.certs_url,
            metrics="none",
            behind_cloud_run_iam=cloud_run,
            # Housekeeping on every run unless a test sets the interval: the reclaimer's tests
            # expect each run to reclaim; test_idle_cost.py covers the interval and its default.
            **{
                "max_per_run": 100,
                "page_size": 50,
                "publish_timeout_s": 5.0,
                "housekeeping_interval_s": 0.0,
                **overrides,
            },
        )
        shard_indexes(settings.shards)
        clock = clock or FakeClock(T0 + timedelta(minutes=1))
        # No clock check unless a test asks (`max_clock_skew`): the rig's clock is simulated.
        store = FirestoreJobStore(
            firestore_client,
            clock,
            timeout_s=settings.firestore_timeout_s,
            shards=settings.shards,
            max_clock_skew=max_clock_skew,
        )
        publisher = publisher or Publisher.create(
            project, TOPIC, timeout_s=settings.publish_timeout_s
        )
        sink = InMemorySink()
        runs = ScanRunLog(  # as create_app builds it: every write bounded
            firestore_client,
            retention=timedelta(seconds=settings.run_retention_s),
            timeout_s=settings.firestore_timeout_s,
        )
        fake_clock = clock

        def advance(seconds: float) -> None:
            # A paced run's waits move the FakeClock (the scan's only time source).
            fake_clock.advance(timedelta(seconds=seconds))

        app = create_app(
            settings,
            clock=clock,
            store=store,
            publisher=publisher,
            metrics=sink,
            runs=runs,
            leases=PartitionLeases(firestore_client, timeout_s=settings.firestore_timeout_s),
            sleep=sleep or advance,
            rates=rates,
        )
        if cloud_run:
            apps.append(app)
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
            served=served,
        )
        built.append(rig)
        return rig

    yield build
    for rig in built:
        if rig.served is not None:
            rig.served.stop()
        rig.publisher.close()
    pubsub_emulator.clear_faults()
