"""Any job ID the model accepts survives the trip: the real Publisher publishes it to the
Pub/Sub emulator, which pushes it (wrapped, and unwrapped with metadata) to a local endpoint,
and the worker's envelope parser gives back the same ID and generation. Nothing the store
accepts can be refused at delivery and left enqueued forever."""

from __future__ import annotations

import queue
import threading
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import pytest
from google.cloud import pubsub_v1
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st
from werkzeug.serving import make_server
from werkzeug.wrappers import Request, Response

from services.edge.publisher import Publisher
from services.jobs.ids import is_valid_job_id
from services.worker.envelope import Delivery, parse


@dataclass(frozen=True)
class Pushed:
    path: str
    body: bytes
    headers: dict[str, str]


class PushCatcher:
    """A 127.0.0.1 endpoint that acknowledges every push and keeps what it received."""

    def __init__(self) -> None:
        self.received: queue.Queue[Pushed] = queue.Queue()
        self._server = make_server("127.0.0.1", 0, self._app, threaded=True)
        self._thread = threading.Thread(target=self._server.serve_forever, daemon=True)
        self._thread.start()
        self.url = f"http://127.0.0.1:{self._server.server_port}"

    def _app(self, environ: dict[str, Any], start_response: Any) -> Any:
        request = Request(environ)
        self.received.put(Pushed(request.path, request.get_data(), dict(request.headers)))
        return Response(status=204)(environ, start_response)

    def close(self) -> None:
        self._server.shutdown()
        self._thread.join()


@dataclass
class Route:
    publisher: Publisher
    catcher: PushCatcher


@pytest.fixture
def route(
    publisher_client: pubsub_v1.PublisherClient,
    subscriber_client: pubsub_v1.SubscriberClient,
    pubsub_project: str,
) -> Iterator[Route]:
    catcher = PushCatcher()
    topic = publisher_client.create_topic(name=f"projects/{pubsub_project}/topics/jobs").name
    subscriptions = []
    for name, config in (
        ("wrapped", {"push_endpoint": f"{catcher.url}/wrapped"}),
        (
            "unwrapped",
            {"push_endpoint": f"{catcher.url}/unwrapped", "no_wrapper": {"write_metadata": True}},
        ),
    ):
        subscriptions.append(
            subscriber_client.create_subscription(
                request={
                    "name": f"projects/{pubsub_project}/subscriptions/{name}",
                    "topic": topic,
                    "push_config": config,
                }
            ).name
        )
    try:
        yield Route(Publisher(publisher_client, topic), catcher)
    finally:
        for subscription in subscriptions:
            subscriber_client.delete_subscription(subscription=subscription)
        catcher.close()


def deliveries(route: Route, job_id: str, generation: int) -> dict[str, Delivery]:
    """Publish `job_id` and parse both pushes of it."""
    message_id = route.publisher.publish(job_id, generation, "run-1").result(timeout=30)
    parsed: dict[str, Delivery] = {}
    while len(parsed) < 2:
        pushed = route.catcher.received.get(timeout=30)
        delivery = parse(pushed.body, pushed.headers)
        if delivery.message_id == message_id:
            parsed[pushed.path] = delivery
    return parsed


@settings(
    max_examples=60,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture],
)
@given(
    job_id=st.text(min_size=1, max_size=120).filter(is_valid_job_id),
    generation=st.integers(min_value=1, max_value=2**63 - 1),
)
@example(job_id="{starts-like-json}", generation=1)
@example(job_id="media:42:décision-7:ab12", generation=3)
@example(job_id="with inner  spaces", generation=2)
@example(job_id="é" * 750, generation=1)
def test_every_job_id_the_model_accepts_survives_publish_and_push_parsing(
    route: Route, job_id: str, generation: int
) -> None:
    parsed = deliveries(route, job_id, generation)
    assert set(parsed) == {"/wrapped", "/unwrapped"}
    for delivery in parsed.values():
        assert (delivery.job_id, delivery.generation) == (job_id, generation)
    # Unwrapped, `run_id` arrives as a header, and WSGI servers drop headers with "_".
    assert parsed["/wrapped"].run_id == "run-1"
