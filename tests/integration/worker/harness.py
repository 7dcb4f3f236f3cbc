"""A worker served on a real local port, with the real store, storage and verifier around it.

`WorkerHarness` wires: FirestoreJobStore (Firestore emulator, FakeClock), media.delete_source
over the storage emulator (wrapped to count what it really did, and to fail on demand),
media.delete_prefix over the same (`prefix_deleter.inner`, replaceable by a test),
RejectionStore, the real TokenVerifier trusting the session's OIDC issuer — all behind
`create_app`, served by werkzeug on 127.0.0.1:0 in a thread. Tests either POST to it
themselves (with minted tokens) or let the Pub/Sub emulator push to it.

By default the worker runs as on Cloud Run: `url` is a local Cloud Run front end
(`emulators/cloudrun`, the worker's sole invoker, infra's timeout and concurrency) before the
served app, which is configured as behind Cloud Run IAM and so sees only stripped tokens.
`cloud_run=False` is the direct mode for tests of the service alone: `url` is the app itself.
"""

from __future__ import annotations

import base64
import json
import threading
import time
from collections import Counter
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from typing import Any

import google.cloud.storage as storage
import requests
from google.cloud import firestore, pubsub_v1
from google.protobuf import duration_pb2
from werkzeug.serving import BaseWSGIServer, make_server

from services.jobs.actions import Action, ActionFn, ActionRequest, ActionResult
from services.jobs.clock import FakeClock
from services.jobs.errors import TransientError
from services.jobs.model import NewJob
from services.jobs.record import Job
from services.jobs.results import ClaimedJob
from services.local.cloud_run import WORKER_CONCURRENCY, WORKER_TIMEOUT_S
from services.store.job_store import FirestoreJobStore
from services.store.rejections import RejectionStore
from services.worker.actions import ActionRegistry
from services.worker.app import create_app
from services.worker.media import ACTION_NAME, DELETED, SourceDeleter
from services.worker.prefix import ACTION_NAME as PREFIX_ACTION_NAME
from services.worker.prefix import PrefixDeleter
from services.worker.settings import WorkerSettings
from tests.fixtures.cloudrun import front_end
from tests.fixtures.store import mark_enqueued

PUSHER = "pusher@deferred-jobs.iam.gserviceaccount.com"
START = datetime(2026, 3, 1, 12, 0, tzinfo=UTC)
LEASE = timedelta(seconds=60)


def wait_until(condition: Callable[[], bool], timeout_s: float = 30.0, what: str = "") -> None:
    """Poll `condition` until true; fail after `timeout_s` (a bound, not a measurement)."""
    end = time.monotonic() + timeout_s
    while not condition():
        if time.monotonic() > end:
            raise AssertionError(f"timed out waiting for {what or condition}")
        time.sleep(0.02)


@dataclass
class CountingDeleter:
    """The real media action, counting outcomes; fails the next `failures` calls on demand."""

    inner: SourceDeleter
    failures: int = 0
    failure: Callable[[], Exception] = lambda: TransientError("storage answered 503")
    after_delete: Callable[[ActionRequest], None] | None = None
    calls: int = 0
    outcomes: Counter[str] = field(default_factory=Counter)
    _lock: threading.Lock = field(default_factory=threading.Lock)

    def __call__(self, request: ActionRequest) -> ActionResult:
        with self._lock:
            self.calls += 1
            if self.failures > 0:
                self.failures -= 1
                raise self.failure()
        result = self.inner(request)
        with self._lock:
            self.outcomes[result.outcome] += 1
        if self.after_delete is not None:
            self.after_delete(request)
        return result

    @property
    def deletions(self) -> int:
        """Calls that really removed an object (not `already_absent`)."""
        return self.outcomes[DELETED]


@dataclass
class Delegating:
    """An action whose callable a test may swap (`inner`) after the worker is built."""

    inner: ActionFn

    def __call__(self, request: ActionRequest) -> ActionResult:
        return self.inner(request)


class StatusCounter:
    """WSGI middleware counting response statuses (and noting the token signatures seen)."""

    def __init__(self, app: Callable[..., Any]) -> None:
        self.app = app
        self.statuses: Counter[int] = Counter()
        self.signatures: list[str] = []
        self._lock = threading.Lock()

    def __call__(self, environ: dict[str, Any], start_response: Callable[..., Any]) -> Any:
        with self._lock:
            self.signatures.append(environ.get("HTTP_AUTHORIZATION", "").rpartition(".")[2])

        def counting(status: str, headers: Any, exc_info: Any = None) -> Any:
            with self._lock:
                self.statuses[int(status.split()[0])] += 1
            return start_response(status, headers, exc_info)

        return self.app(environ, counting)


class WorkerHarness:
    def __init__(
        self,
        *,
        project: str,
        firestore_client: firestore.Client,
        storage_client: storage.Client,
        bucket: storage.Bucket,
        oidc_server: Any,
        lease: timedelta = LEASE,
        max_body_bytes: int = 64 * 1024,
        cloud_run: bool = True,
    ) -> None:
        self.project = project
        self.clock = FakeClock(START)
        self.store = FirestoreJobStore(firestore_client, self.clock)
        self.rejections = RejectionStore(firestore_client)
        self.firestore = firestore_client
        self.bucket = bucket
        self.oidc = oidc_server
        self.deleter = CountingDeleter(SourceDeleter(storage_client))
        self.prefix_deleter = Delegating(PrefixDeleter(storage_client))
        self._app: Any = None
        self.counter = StatusCounter(lambda environ, start: self._app(environ, start))
        self._server: BaseWSGIServer = make_server("127.0.0.1", 0, self.counter, threaded=True)
        self.direct_url = f"http://127.0.0.1:{self._server.server_port}/"
        self.front_end = None
        self.url = self.direct_url
        if cloud_run:
            self.front_end = front_end(
                self.direct_url.rstrip("/"),
                oidc_server.certs_url,
                invokers=[PUSHER],
                service="deferred-jobs-worker",
                timeout_s=WORKER_TIMEOUT_S,
                concurrency=WORKER_CONCURRENCY,
            )
            self.url = self.front_end.url + "/"
        self.settings = WorkerSettings(
            project=project,
            audience=self.url,
            allowed_invokers=frozenset({PUSHER}),
            certs_url=oidc_server.certs_url,
            lease_s=int(lease.total_seconds()),
            max_body_bytes=max_body_bytes,
            behind_cloud_run_iam=cloud_run,
        )
        self.flask_app = create_app(
            self.settings,
            clock=self.clock,
            store=self.store,
            actions=ActionRegistry(
                [
                    Action(ACTION_NAME, self.deleter),
                    Action(PREFIX_ACTION_NAME, self.prefix_deleter),
                ]
            ),
            rejections=self.rejections,
            worker_id="worker-under-test",
        )
        self._app = self.flask_app
        self._thread = threading.Thread(target=self._server.serve_forever, daemon=True)
        self._thread.start()
        self._session = requests.Session()

    def redeploy(self, actions: ActionRegistry, worker_id: str) -> None:
        """A new worker revision with `actions`, behind the same URL (and front end): later
        deliveries reach it, as after a Cloud Run deploy."""
        self.flask_app = create_app(
            self.settings,
            clock=self.clock,
            store=self.store,
            actions=actions,
            rejections=self.rejections,
            worker_id=worker_id,
        )
        self._app = self.flask_app

    def close(self) -> None:
        if self.front_end is not None:
            self.front_end.stop()
        self._server.shutdown()
        self._server.server_close()
        self._thread.join(timeout=5)
        self._session.close()

    # -- jobs ------------------------------------------------------------------------------

    def upload(self, *names: str) -> list[str]:
        for name in names:
            self.bucket.blob(name).upload_from_string(b"source video bytes")
        return list(names)

    def objects(self) -> set[str]:
        return {blob.name for blob in self.bucket.client.list_blobs(self.bucket.name)}

    def schedule(self, job_id: str, objects: Iterable[str], **kwargs: Any) -> Job:
        new = NewJob(
            job_id=job_id,
            action=ACTION_NAME,
            subject=f"media-{job_id}",
            due_at=self.clock.now(),
            params={"bucket": self.bucket.name, "objects": list(objects)},
            **kwargs,
        )
        return self.store.schedule(new).job

    def claim(self, run_id: str = "run-1") -> list[ClaimedJob]:
        return self.store.claim_due(self.clock.now(), run_id, 100)

    def claim_one(self, job_id: str, run_id: str = "run-1") -> ClaimedJob:
        [claimed] = [c for c in self.claim(run_id) if c.job_id == job_id]
        return claimed

    def enqueue(self, claimed: ClaimedJob, message_id: str = "m-1") -> Job:
        return mark_enqueued(self.store, claimed.job_id, claimed.generation, message_id)

    def job(self, job_id: str) -> Job:
        job = self.store.get(job_id)
        assert job is not None
        return job

    def completions(self, job_id: str) -> int:
        return sum(1 for entry in self.job(job_id).history if entry.to_state.value == "completed")

    def idempotency_documents(self) -> int:
        return sum(1 for _ in self.firestore.collection("idempotency").stream())

    def rejected_documents(self) -> list[dict[str, Any]]:
        return [d.to_dict() or {} for d in self.firestore.collection("rejected").stream()]

    # -- HTTP ------------------------------------------------------------------------------

    def token(self, *, audience: str | None = None, email: str = PUSHER, **kwargs: Any) -> str:
        return str(self.oidc.issuer.mint(audience or self.url, email, **kwargs))

    def post(
        self,
        body: bytes,
        *,
        token: str | None = None,
        headers: dict[str, str] | None = None,
        authorize: bool = True,
    ) -> requests.Response:
        sent = dict(headers or {})
        if authorize:
            sent["Authorization"] = f"Bearer {token or self.token()}"
        return self._session.post(self.url, data=body, headers=sent, timeout=30)


def envelope(
    job_id: str,
    generation: int,
    *,
    run_id: str = "run-1",
    delivery_attempt: int | None = 1,
    message_id: str = "m-1",
) -> bytes:
    body: dict[str, Any] = {
        "message": {
            "data": base64.b64encode(job_id.encode()).decode(),
            "attributes": {"generation": str(generation), "run_id": run_id},
            "messageId": message_id,
            "publishTime": "2026-03-01T12:00:00Z",
        },
        "subscription": "projects/test/subscriptions/jobs-push",
    }
    if delivery_attempt is not None:
        body["deliveryAttempt"] = delivery_attempt
    return json.dumps(body).encode()


@dataclass
class PushTopic:
    """A topic whose push subscription targets the harness, with a dead-letter topic."""

    publisher: pubsub_v1.PublisherClient
    topic: str
    subscription: str
    dead_letter_subscription: str

    def publish(self, claimed: ClaimedJob, run_id: str = "run-1") -> str:
        future = self.publisher.publish(
            self.topic,
            claimed.job_id.encode(),
            generation=str(claimed.generation),
            run_id=run_id,
        )
        return str(future.result(timeout=30))


def _duration_ms(ms: int) -> duration_pb2.Duration:
    return duration_pb2.Duration(seconds=ms // 1000, nanos=(ms % 1000) * 1_000_000)


def push_topic(
    publisher: pubsub_v1.PublisherClient,
    subscriber: pubsub_v1.SubscriberClient,
    project: str,
    endpoint: str,
    *,
    max_delivery_attempts: int = 5,
    backoff_ms: int = 20,
    no_wrapper: bool = False,
) -> PushTopic:
    topic = publisher.create_topic(name=f"projects/{project}/topics/jobs").name
    dead = publisher.create_topic(name=f"projects/{project}/topics/jobs-dead").name
    dead_sub = subscriber.create_subscription(
        request={"name": f"projects/{project}/subscriptions/jobs-dead", "topic": dead}
    ).name
    push_config: dict[str, Any] = {
        "push_endpoint": endpoint,
        "oidc_token": {"service_account_email": PUSHER, "audience": endpoint},
    }
    if no_wrapper:
        push_config["no_wrapper"] = {"write_metadata": True}
    subscription = subscriber.create_subscription(
        request={
            "name": f"projects/{project}/subscriptions/jobs-push",
            "topic": topic,
            "push_config": push_config,
            "ack_deadline_seconds": 30,
            "retry_policy": {
                "minimum_backoff": _duration_ms(backoff_ms),
                "maximum_backoff": _duration_ms(backoff_ms * 4),
            },
            "dead_letter_policy": {
                "dead_letter_topic": dead,
                "max_delivery_attempts": max_delivery_attempts,
            },
        }
    ).name
    return PushTopic(publisher, topic, subscription, dead_sub)
