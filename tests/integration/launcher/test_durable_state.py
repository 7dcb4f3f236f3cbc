"""--data-dir keeps its promise under damage and a full disk (issue 33, finding 6): every
acknowledged write is there after a restart, or the start refuses, naming the file.

Each emulator runs in this process on its own data directory; a copy of that directory taken
while it runs is what a SIGKILL leaves (every acknowledged change is fsynced before its answer),
so the crash and the clean-stop paths are both exercised without a subprocess.
"""

from __future__ import annotations

import json
import shutil
import signal
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest
import requests
from google.api_core.client_options import ClientOptions
from google.api_core.exceptions import GoogleAPICallError, GoogleAPIError
from google.auth.credentials import AnonymousCredentials
from google.cloud import firestore, pubsub_v1
from google.cloud.storage import Client as StorageClient
from google.cloud.storage.exceptions import InvalidResponse

from emulators.firestore import server as firestore_server
from emulators.firestore.engine import Engine
from emulators.journal import MARKER_BYTES, encode_record, open_journal
from emulators.pubsub import server as pubsub_server
from emulators.pubsub.server import PubsubEmulator
from emulators.snapshot import SnapshotError
from emulators.storage import server as storage_server
from tests.integration.launcher.test_durability import _clients
from tests.integration.launcher.test_launcher import ALL_FREE, Launcher

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


def _loaded_firestore(data_file: Path) -> dict[str, object]:
    """Start Firestore's state from `data_file` as the emulator does; what it then holds."""
    engine = Engine(270.0, 60.0, 20.0, 0.0, None)
    journal = open_journal(
        engine, "firestore", data_file, firestore_server.SNAPSHOT_KIND, "documents", "test"
    )
    journal.close(None)
    return engine.export_state()


def test_every_single_bit_flip_in_a_snapshot_is_refused_naming_it_or_loads_the_same_data(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Before snapshots carried a checksum, a flipped bit inside a document's base64 loaded
    # silently as a document missing, renamed or changed.
    saved = tmp_path / "saved"
    with firestore_server.start(admin_port=None, data_file=saved / "firestore.json") as fs:
        monkeypatch.setenv("FIRESTORE_EMULATOR_HOST", fs.address)
        db = firestore.Client(project="p")
        db.collection("jobs").document("job-1").set({"state": "deferred", "attempt": 1})
        db.collection("jobs").document("job-2").set({"params": {"generations": [3, 4]}})
        db.close()
    pristine = (saved / "firestore.json").read_bytes()
    assert (saved / "firestore.log").stat().st_size == MARKER_BYTES  # all in the snapshot
    expected = _loaded_firestore(saved / "firestore.json")
    assert len(expected["databases"][0]["docs"]) == 2  # type: ignore[index]

    outcomes = {"refused": 0, "identical": 0}
    for position in range(len(pristine)):
        folder = tmp_path / f"flip-{position}"
        folder.mkdir()
        damaged = bytearray(pristine)
        damaged[position] ^= 0x01
        (folder / "firestore.json").write_bytes(bytes(damaged))
        try:
            loaded = _loaded_firestore(folder / "firestore.json")
        except SnapshotError as exc:
            assert str(folder / "firestore.json") in str(exc), (position, str(exc))
            assert "--fresh" in str(exc)
            outcomes["refused"] += 1
        else:
            assert loaded == expected, f"byte {position} flipped loaded different data"
            outcomes["identical"] += 1
        shutil.rmtree(folder)
    assert outcomes["refused"] + outcomes["identical"] == len(pristine)
    assert outcomes["refused"] > 0


# -- a log cut short ---------------------------------------------------------------------
# Each component: acknowledged writes through the real client, a crash image of its data
# directory taken while it runs, and what a start from such a directory holds.


def _gcs(url: str) -> StorageClient:
    return StorageClient(
        project="p",
        credentials=AnonymousCredentials(),
        client_options=ClientOptions(api_endpoint=url),
    )


def _firestore_crash_image(
    data: Path, image: Path, count: int, monkeypatch: pytest.MonkeyPatch
) -> Path:
    with firestore_server.start(admin_port=None, data_file=data / "firestore.json") as fs:
        monkeypatch.setenv("FIRESTORE_EMULATOR_HOST", fs.address)
        db = firestore.Client(project="p")
        for i in range(count):
            db.collection("jobs").document(f"job-{i}").set({"n": i})
        db.close()
        shutil.copytree(data, image)
    return image / "firestore.log"


def _firestore_held(image: Path, monkeypatch: pytest.MonkeyPatch) -> int:
    with firestore_server.start(admin_port=None, data_file=image / "firestore.json") as fs:
        monkeypatch.setenv("FIRESTORE_EMULATOR_HOST", fs.address)
        db = firestore.Client(project="p")
        held = len(list(db.collection("jobs").stream()))
        db.close()
    return held


def _pubsub_crash_image(
    data: Path, image: Path, count: int, monkeypatch: pytest.MonkeyPatch
) -> Path:
    with _pubsub(data / "pubsub.json", monkeypatch) as (_emulator, publisher, subscriber):
        publisher.create_topic(name=TOPIC)
        subscriber.create_subscription(name=SUB, topic=TOPIC)
        for i in range(count):
            publisher.publish(TOPIC, f"m-{i}".encode()).result(timeout=10)
        shutil.copytree(data, image)
    return image / "pubsub.log"


def _pubsub_held(image: Path, monkeypatch: pytest.MonkeyPatch) -> int:
    with _pubsub(image / "pubsub.json", monkeypatch) as (_emulator, _publisher, subscriber):
        return len(_drain(subscriber))


def _storage_crash_image(
    data: Path, image: Path, count: int, monkeypatch: pytest.MonkeyPatch
) -> Path:
    with storage_server.start(data_dir=data / "storage") as emulator:
        bucket = _gcs(emulator.url).create_bucket("media")
        for i in range(count):
            bucket.blob(f"o-{i}").upload_from_string(f"content {i}".encode())
        shutil.copytree(data, image)
    return image / "storage" / "storage.log"


def _storage_held(image: Path, monkeypatch: pytest.MonkeyPatch) -> int:
    with storage_server.start(data_dir=image / "storage") as emulator:
        return len(list(_gcs(emulator.url).list_blobs("media")))


_COMPONENTS = {
    # component: (crash image, what a start holds, acknowledged writes)
    "firestore": (_firestore_crash_image, _firestore_held, 50),
    "pubsub": (_pubsub_crash_image, _pubsub_held, 10),
    "storage": (_storage_crash_image, _storage_held, 5),
}


@pytest.mark.parametrize("component", sorted(_COMPONENTS))
def test_a_log_cut_at_half_is_refused_naming_it_not_taken_for_a_torn_write(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, component: str
) -> None:
    # Before the log carried a marker of the last acknowledged record, a cut at half lost
    # every acknowledged record after it with a WARNING that the lost write "was never
    # acknowledged" (storage: no warning at all).
    crash_image, held, count = _COMPONENTS[component]
    log = crash_image(tmp_path / "data", tmp_path / "image", count, monkeypatch)
    assert held(_copy(tmp_path / "image", tmp_path / "whole"), monkeypatch) == count
    raw = log.read_bytes()
    log.write_bytes(raw[: len(raw) // 2])

    with pytest.raises(SnapshotError) as refused:
        held(tmp_path / "image", monkeypatch)
    assert f"{component}: {log}: cut short" in str(refused.value)
    assert "was acknowledged" in str(refused.value) and "--fresh" in str(refused.value)
    assert log.read_bytes() == raw[: len(raw) // 2]  # left as it is


@pytest.mark.parametrize("component", sorted(_COMPONENTS))
def test_a_torn_unacknowledged_last_record_is_still_discarded_and_the_rest_kept(
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    component: str,
    caplog: pytest.LogCaptureFixture,
) -> None:
    crash_image, held, count = _COMPONENTS[component]
    log = crash_image(tmp_path / "data", tmp_path / "image", count, monkeypatch)
    torn = encode_record({"seq": 10**6, "ops": []})
    with log.open("ab") as out:
        out.write(torn[: len(torn) // 2])  # a crash in the middle of the next append

    assert held(tmp_path / "image", monkeypatch) == count
    assert f"{component}: discarded the torn last record of {log}" in caplog.text


def _copy(source: Path, target: Path) -> Path:
    shutil.copytree(source, target)
    return target


# -- a full disk -------------------------------------------------------------------------

_FILE_BYTES = 48 * 1024  # where a file of the data directory meets the "full disk"
# How an upload can fail: an error answer, or (the package's own handling of an exception) a
# connection closed without one.
_UPLOAD_FAILED = (GoogleAPIError, InvalidResponse, requests.ConnectionError)


def test_a_full_disk_keeps_every_acknowledged_write_and_the_data_dir_starts_after_space_returns(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Before a blob's digest was remembered only once the blob was written, the upload that
    # met the full disk left its digest cached, the next upload logged a reference to that
    # missing blob, and the data directory could not start again.
    data = tmp_path / "data"
    args = ("--data-dir", str(data), "--project", "p", *ALL_FREE)
    full = Launcher(*args, file_bytes=_FILE_BYTES)
    try:
        db, publisher, subscriber, gcs = _clients(full.wait_ready(), monkeypatch)
        bucket = gcs.create_bucket("media")
        uploaded = {}
        for i in range(3):
            bucket.blob(f"small-{i}").upload_from_string(f"content {i}".encode())
            uploaded[f"small-{i}"] = f"content {i}".encode()
        with pytest.raises(_UPLOAD_FAILED):
            bucket.blob("large").upload_from_string(b"x" * 2 * _FILE_BYTES, retry=None)
        for name in ("after-1", "after-2"):  # the next change never refers to the lost blob
            try:
                bucket.blob(name).upload_from_string(name.encode(), retry=None)
            except _UPLOAD_FAILED:
                continue
            uploaded[name] = name.encode()

        documents: dict[str, int] = {}
        for i in range(2000):
            try:
                db.collection("jobs").document(f"job-{i}").set({"n": i}, retry=None, timeout=10)
            except GoogleAPICallError:
                break
            documents[f"job-{i}"] = i
        assert 0 < len(documents) < 2000  # the disk filled up in the middle

        publisher.create_topic(name=TOPIC)
        subscriber.create_subscription(name=SUB, topic=TOPIC)
        published: set[str] = set()
        for i in range(2000):
            future = publisher.publish(TOPIC, f"m-{i}".encode(), retry=None, timeout=10)
            try:
                published.add(future.result(timeout=30))
            except GoogleAPICallError:
                break
        assert 0 < len(published) < 2000
        db.close()
    finally:
        full.terminate(signal.SIGKILL)  # no clean stop on a full disk: the harsher case

    again = Launcher(*args)  # space returned
    try:
        db, _publisher, subscriber, gcs = _clients(again.wait_ready(), monkeypatch)
        held = {s.id: s.get("n") for s in db.collection("jobs").stream()}
        assert held.items() >= documents.items()
        assert _drain(subscriber) >= published
        objects = {b.name: b.download_as_bytes() for b in gcs.list_blobs("media")}
        assert objects.items() >= uploaded.items()
        db.close()
    finally:
        assert again.terminate() == 0


def test_a_data_directory_of_the_previous_format_loads_and_is_rewritten_with_checks(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # `make run` keeps its data across upgrades: a snapshot without a checksum (format 1) and
    # a log without a marker, as earlier versions wrote them, still load, whole.
    log = _firestore_crash_image(tmp_path / "data", tmp_path / "image", 5, monkeypatch)
    expected = _loaded_firestore(_copy(tmp_path / "image", tmp_path / "copy") / "firestore.json")
    saved = tmp_path / "image" / "firestore.json"
    _header, _, body = saved.read_bytes().partition(b"\n")
    state = json.loads(body)
    saved.write_text(json.dumps({"format": 1, "kind": "firestore", **state}))
    log.write_bytes(log.read_bytes()[MARKER_BYTES:])  # the records, no marker

    assert _loaded_firestore(saved) == expected
    assert len(expected["databases"][0]["docs"]) == 5  # type: ignore[index]
    assert saved.read_bytes().startswith(b'{"format":2,')  # rewritten by that start
    assert log.read_bytes()[:8] == b"EMUJLOG2"
