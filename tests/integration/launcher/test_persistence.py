"""--data-dir: Firestore, Pub/Sub and Cloud Storage state survive a stop and a start, and a
stop in the middle of a drain resumes without losing anything."""

from __future__ import annotations

import json
import subprocess
import sys
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest
from google.api_core import exceptions
from google.auth.credentials import AnonymousCredentials
from google.cloud import firestore, pubsub_v1
from google.cloud.storage import Client as StorageClient

from emulators import snapshot
from emulators.firestore import server as firestore_server
from emulators.launcher import READY_LINE
from emulators.pubsub import server as pubsub_server
from emulators.storage import server as storage_server
from services.jobs import schema
from services.jobs.clock import FakeClock
from services.store.job_store import FirestoreJobStore
from tests.fixtures.firestore import seed_due_jobs
from tests.fixtures.store import mark_enqueued
from tests.integration.launcher.test_launcher import ALL_FREE, REPO, Launcher

T0 = datetime(2026, 1, 1, tzinfo=UTC)


def test_firestore_documents_and_their_update_times_survive_a_restart(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    data = tmp_path / "firestore.json"
    with firestore_server.start(admin_port=None, data_file=data) as emulator:
        monkeypatch.setenv("FIRESTORE_EMULATOR_HOST", emulator.address)
        client = firestore.Client(project="p")
        written = client.collection("c").document("d").set({"n": 1})
        client.collection("c").document("d").collection("s").document("e").set({"n": 2})
        firestore.Client(project="p", database="other").collection("c").document("x").set({})
    with firestore_server.start(admin_port=None, data_file=data) as emulator:
        monkeypatch.setenv("FIRESTORE_EMULATOR_HOST", emulator.address)
        client = firestore.Client(project="p")
        snap = client.collection("c").document("d").get()
        assert snap.to_dict() == {"n": 1}
        assert snap.update_time == written.update_time
        assert client.collection("c").document("d").collection("s").document("e").get().exists
        other = firestore.Client(project="p", database="other")
        assert other.collection("c").document("x").get().exists
        # The commit clock moves on from the loaded versions: a compare-and-set still works.
        option = client.write_option(last_update_time=snap.update_time)
        assert client.collection("c").document("d").update({"n": 3}, option=option)


def test_pubsub_keeps_topics_subscriptions_and_only_unacknowledged_messages(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    data = tmp_path / "pubsub.json"
    topic, sub = "projects/p/topics/tasks", "projects/p/subscriptions/tasks-sub"
    with pubsub_server.start(data_file=data) as emulator:
        monkeypatch.setenv("PUBSUB_EMULATOR_HOST", emulator.address)
        publisher, subscriber = pubsub_v1.PublisherClient(), pubsub_v1.SubscriberClient()
        publisher.create_topic(name=topic)
        publisher.create_topic(name="projects/p/topics/dead-letters")
        subscriber.create_subscription(
            request={
                "name": sub,
                "topic": topic,
                "dead_letter_policy": {
                    "dead_letter_topic": "projects/p/topics/dead-letters",
                    "max_delivery_attempts": 5,
                },
            }
        )
        for body in (b"acked", b"leased", b"ready"):
            publisher.publish(topic, body).result(timeout=10)
        first = subscriber.pull(subscription=sub, max_messages=1).received_messages[0]
        assert first.message.data == b"acked"
        subscriber.acknowledge(subscription=sub, ack_ids=[first.ack_id])
        leased = subscriber.pull(subscription=sub, max_messages=1).received_messages[0]
        assert leased.message.data == b"leased"  # delivered, never acknowledged
    with pubsub_server.start(data_file=data) as emulator:
        monkeypatch.setenv("PUBSUB_EMULATOR_HOST", emulator.address)
        publisher, subscriber = pubsub_v1.PublisherClient(), pubsub_v1.SubscriberClient()
        assert publisher.get_topic(topic=topic).name == topic
        config = subscriber.get_subscription(subscription=sub)
        assert config.dead_letter_policy.max_delivery_attempts == 5
        got = subscriber.pull(subscription=sub, max_messages=10).received_messages
        by_body = {m.message.data: m for m in got}
        assert set(by_body) == {b"leased", b"ready"}
        # Delivery counts carry over: the leased one is on its second attempt.
        assert by_body[b"leased"].delivery_attempt == 2
        assert by_body[b"ready"].delivery_attempt == 1
        new_id = publisher.publish(topic, b"after").result(timeout=10)
        assert int(new_id) > max(int(m.message.message_id) for m in got)


def test_cloud_storage_objects_survive_a_restart(tmp_path: Path) -> None:
    with storage_server.start(data_dir=tmp_path / "storage") as emulator:
        gcs = StorageClient(
            project="p",
            credentials=AnonymousCredentials(),
            client_options={"api_endpoint": emulator.url},
        )
        gcs.create_bucket("b").blob("o").upload_from_string(b"kept")
    with storage_server.start(data_dir=tmp_path / "storage") as emulator:
        gcs = StorageClient(
            project="p",
            credentials=AnonymousCredentials(),
            client_options={"api_endpoint": emulator.url},
        )
        assert gcs.bucket("b").blob("o").download_as_bytes() == b"kept"


def test_an_unreadable_state_file_stops_the_start_and_is_left_alone(tmp_path: Path) -> None:
    data = tmp_path / "firestore.json"
    data.write_text("{not json")
    with pytest.raises(snapshot.SnapshotError, match="not a state file"):
        firestore_server.start(admin_port=None, data_file=data)
    assert data.read_text() == "{not json"
    data.write_text(json.dumps({"format": 1, "kind": "pubsub"}))
    with pytest.raises(snapshot.SnapshotError, match="not a firestore state file"):
        firestore_server.start(admin_port=None, data_file=data)


def _connect(launcher: Launcher, monkeypatch: pytest.MonkeyPatch) -> dict[str, str]:
    env = launcher.wait_ready()
    for key in ("FIRESTORE_EMULATOR_HOST", "PUBSUB_EMULATOR_HOST"):
        monkeypatch.setenv(key, env[key])
    return env


def test_a_stop_mid_drain_resumes_claims_are_reclaimed_and_nothing_is_lost(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    data = tmp_path / "data"
    topic, sub = "projects/p/topics/jobs", "projects/p/subscriptions/jobs"
    first = Launcher("--data-dir", str(data), "--project", "p", *ALL_FREE)
    try:
        env = _connect(first, monkeypatch)
        assert first.notes["data"] == f"{data} (every acknowledged write is on disk)"
        client = firestore.Client(project="p")
        ids = seed_due_jobs(client, 10, T0)
        publisher, subscriber = pubsub_v1.PublisherClient(), pubsub_v1.SubscriberClient()
        publisher.create_topic(name=topic)
        subscriber.create_subscription(name=sub, topic=topic)
        store = FirestoreJobStore(client, FakeClock(T0))
        claimed = store.claim_due(T0, "run-1", 6)
        published = claimed[:3]  # the scan published these three, then was stopped
        for job in published:
            message_id = publisher.publish(topic, job.job_id.encode()).result(timeout=10)
            mark_enqueued(store, job.job_id, job.generation, message_id)
        client.close()
    finally:
        assert first.terminate() == 0  # SIGTERM mid-drain: the state is saved on the way out
    assert {p.name for p in data.iterdir()} >= {"firestore.json", "pubsub.json", "storage"}

    second = Launcher("--data-dir", str(data), "--project", "p", *ALL_FREE)
    try:
        assert _connect(second, monkeypatch) != env  # new ports, same state
        client = firestore.Client(project="p")
        later = T0 + timedelta(minutes=10)
        store = FirestoreJobStore(client, FakeClock(later))
        states = {s.id: s.get("state") for s in client.collection(schema.JOBS).stream()}
        assert sorted(states) == ids
        assert sorted(states.values()) == ["claimed"] * 3 + ["deferred"] * 4 + ["enqueued"] * 3
        subscriber = pubsub_v1.SubscriberClient()
        pending = subscriber.pull(subscription=sub, max_messages=10).received_messages
        assert sorted(m.message.data.decode() for m in pending) == sorted(
            j.job_id for j in published
        )
        reclaimed = store.reclaim_expired(later, timedelta(minutes=5), 100, "run-2")
        assert sorted(j.job_id for j in reclaimed) == sorted(j.job_id for j in claimed[3:])
        again = store.claim_due(later, "run-2", 100)
        assert sorted(j.job_id for j in again) == sorted(set(ids) - {j.job_id for j in published})
        with pytest.raises(exceptions.NotFound):
            subscriber.get_subscription(subscription="projects/p/subscriptions/never")
        client.close()
    finally:
        assert second.terminate() == 0


def _launch_fails(*args: str) -> subprocess.CompletedProcess[str]:
    result = subprocess.run(
        [sys.executable, "-m", "emulators", *ALL_FREE, *args],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert result.returncode == 2, result.stderr
    assert READY_LINE not in result.stdout
    return result


def test_a_corrupt_state_file_stops_the_launch_naming_it(tmp_path: Path) -> None:
    (tmp_path / "pubsub.json").write_text("[]")
    result = _launch_fails("--data-dir", str(tmp_path))
    assert "pubsub" in result.stderr
    assert f"{tmp_path / 'pubsub.json'}: not a pubsub state file" in result.stderr
    assert (tmp_path / "pubsub.json").read_text() == "[]"  # left for the user to look at


def test_data_dir_with_the_official_emulators_is_refused(tmp_path: Path) -> None:
    result = _launch_fails("--official", "--data-dir", str(tmp_path))
    assert "--data-dir needs the built-in emulators" in result.stderr
