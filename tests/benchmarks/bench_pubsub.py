"""Pub/Sub emulator throughput: batched publish, streaming pull, and OIDC-signed push.

Run: `.venv/bin/python -m tests.benchmarks pubsub`. Everything runs on 127.0.0.1 in this
process (emulator, clients, push endpoint), so the figures include the client library's and the
endpoint's own cost on the same two cores.
"""

from __future__ import annotations

import os
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

from emulators.pubsub.server import PubsubEmulator, start

PUBLISH_COUNT = 20_000
PULL_COUNT = 10_000
PUSH_COUNT = 5_000
PAYLOAD = b"x" * 100
DEADLINE_S = 120.0


class _Ok(BaseHTTPRequestHandler):
    # HTTP/1.1 keeps the pusher's connections alive, as a real endpoint would.
    protocol_version = "HTTP/1.1"

    def do_POST(self) -> None:
        self.rfile.read(int(self.headers.get("Content-Length") or 0))
        self.send_response(204)
        self.send_header("Content-Length", "0")
        self.end_headers()

    def log_message(self, format: str, *args: Any) -> None:
        pass


def _wait_for(condition: Any, what: str) -> None:
    end = time.monotonic() + DEADLINE_S
    while not condition():
        if time.monotonic() > end:
            raise RuntimeError(f"benchmark timed out waiting for {what}")
        time.sleep(0.005)


def _publish_throughput(publisher: Any, topic: str, count: int) -> float:
    started = time.perf_counter()
    futures = [publisher.publish(topic, PAYLOAD, n=str(i)) for i in range(count)]
    for future in futures:
        future.result(timeout=DEADLINE_S)
    return count / (time.perf_counter() - started)


def _pull_throughput(publisher: Any, subscriber: Any, topic: str, sub: str) -> float:
    futures = [publisher.publish(topic, PAYLOAD) for _ in range(PULL_COUNT)]
    for future in futures:
        future.result(timeout=DEADLINE_S)
    received = 0
    lock = threading.Lock()

    def on_message(message: Any) -> None:
        nonlocal received
        message.ack()
        with lock:
            received += 1

    started = time.perf_counter()
    streaming = subscriber.subscribe(sub, on_message)
    try:
        _wait_for(lambda: received >= PULL_COUNT, "streaming pull")
        elapsed = time.perf_counter() - started
    finally:
        streaming.cancel()
        streaming.result(timeout=30)
    return PULL_COUNT / elapsed


def _push_throughput(emulator: PubsubEmulator, publisher: Any, subscriber: Any) -> float:
    server = ThreadingHTTPServer(("127.0.0.1", 0), _Ok)
    server.daemon_threads = True
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    url = f"http://127.0.0.1:{server.server_address[1]}/push"
    topic = "projects/bench/topics/push-bench"
    try:
        publisher.create_topic(name=topic)
        futures = [publisher.publish(topic, PAYLOAD) for _ in range(PUSH_COUNT)]
        for future in futures:
            future.result(timeout=DEADLINE_S)
        emulator.clear_stats()
        started = time.perf_counter()
        subscriber.create_subscription(
            request={
                "name": "projects/bench/subscriptions/push-bench",
                "topic": topic,
                "push_config": {
                    "push_endpoint": url,
                    "oidc_token": {"service_account_email": "bench@bench.iam.gserviceaccount.com"},
                },
            }
        )
        # The subscription only sees messages published after it exists: publish again.
        futures = [publisher.publish(topic, PAYLOAD) for _ in range(PUSH_COUNT)]
        for future in futures:
            future.result(timeout=DEADLINE_S)
        _wait_for(lambda: emulator.stats()["acknowledged"] >= PUSH_COUNT, "push acks")
        return PUSH_COUNT / (time.perf_counter() - started)
    finally:
        server.shutdown()
        server.server_close()


def main() -> None:
    from google.cloud import pubsub_v1

    with start() as emulator:
        previous = os.environ.get("PUBSUB_EMULATOR_HOST")
        os.environ["PUBSUB_EMULATOR_HOST"] = emulator.address
        try:
            publisher = pubsub_v1.PublisherClient()
            big_batches = pubsub_v1.PublisherClient(
                batch_settings=pubsub_v1.types.BatchSettings(max_messages=1000, max_latency=0.05)
            )
            subscriber = pubsub_v1.SubscriberClient()
            topic = "projects/bench/topics/publish-bench"
            sub = "projects/bench/subscriptions/pull-bench"
            publisher.create_topic(name=topic)

            rate = _publish_throughput(publisher, topic, PUBLISH_COUNT)
            print(f"publish, default batching (100 msgs/batch): {rate:,.0f} messages/s")
            rate = _publish_throughput(big_batches, topic, PUBLISH_COUNT)
            print(f"publish, batches of up to 1000:            {rate:,.0f} messages/s")

            subscriber.create_subscription(name=sub, topic=topic)
            rate = _pull_throughput(publisher, subscriber, topic, sub)
            print(f"streaming pull via subscribe() with acks:   {rate:,.0f} messages/s")

            rate = _push_throughput(emulator, publisher, subscriber)
            print(f"push to a local 204 endpoint, OIDC-signed:  {rate:,.0f} messages/s")
            print(f"  ({PUSH_COUNT} published, pushed and acked, end to end; 16 in flight)")
            subscriber.close()
        finally:
            if previous is None:
                os.environ.pop("PUBSUB_EMULATOR_HOST", None)
            else:
                os.environ["PUBSUB_EMULATOR_HOST"] = previous
