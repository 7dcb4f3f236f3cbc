"""--data-dir keeps its promise under damage and a full disk (issue 33, finding 6): every
acknowledged write is there after a restart, or the start refuses, naming the file.

Each emulator runs in this process on its own data directory; a copy of that directory taken
while it runs is what a SIGKILL leaves (every acknowledged change is fsynced before its answer),
so the crash and the clean-stop paths are both exercised without a subprocess.
"""

from __future__ import annotations

import shutil
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest
from google.cloud import pubsub_v1

from emulators.pubsub import server as pubsub_server
from emulators.pubsub.server import PubsubEmulator

TOPIC, SUB = "projects/p/topics/jobs", "projects/p/subscriptions/jobs"


@contextmanager
def _pubsub(
    data_file: Path, monkeypatch: pytest.MonkeyPatch
) -> Iterator[tuple[PubsubEmulator, pubsub_v1.PublisherClient, pubsub_v1.SubscriberClient]]:
    with pubsub_server.start(data_file=data_file) as emulator:
        monkeypatch.setenv("PUBSUB_EMULATOR_HOST", emulator.address)
        publisher, subscriber = pubsub_v1.PublisherClient(), pubsub_v1.SubscriberClient()
        try:
            yield emulator, publisher, subscriber
        finally:
            subscriber.close()
            publisher.transport.close()


def _drain(subscriber: pubsub_v1.SubscriberClient) -> set[str]:
    """Pull and acknowledge every message; their IDs."""
    seen: set[str] = set()
    while True:
        got = subscriber.pull(subscription=SUB, max_messages=100, timeout=10).received_messages
        if not got:
            return seen
        seen |= {m.message.message_id for m in got}
        subscriber.acknowledge(subscription=SUB, ack_ids=[m.ack_id for m in got])


@pytest.mark.parametrize("stop", ["clean stop", "crash"])
def test_message_ids_are_never_handed_out_again_after_a_restart(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, stop: str
) -> None:
    # Before the high-water mark was kept, the counter restarted after the largest
    # unacknowledged ID: with every message acknowledged, at 1 again.
    data = tmp_path / "data"
    crash = tmp_path / "crash"
    with _pubsub(data / "pubsub.json", monkeypatch) as (_emulator, publisher, subscriber):
        publisher.create_topic(name=TOPIC)
        subscriber.create_subscription(name=SUB, topic=TOPIC)
        first = {publisher.publish(TOPIC, f"m-{i}".encode()).result(timeout=10) for i in range(5)}
        assert _drain(subscriber) == first
        shutil.copytree(data, crash)  # what a SIGKILL leaves: the log not folded yet
    restarted = data if stop == "clean stop" else crash
    with _pubsub(restarted / "pubsub.json", monkeypatch) as (_emulator, publisher, subscriber):
        again = {publisher.publish(TOPIC, b"after").result(timeout=10) for _ in range(3)}
        assert _drain(subscriber) == again
    assert len(first) == 5 and len(again) == 3
    assert not first & again
    assert min(int(i) for i in again) > max(int(i) for i in first)
