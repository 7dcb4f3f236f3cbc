"""--data-dir survives a crash: every write an emulator acknowledged is there after a SIGKILL,
and a damaged data directory is refused with its file and the fix named, never emptied.

Before the write-ahead log, Firestore and Pub/Sub saved only at a clean stop, so a SIGKILL lost
every write since the start, and the storage emulator rewrote its index in place, so a SIGKILL
during a change could leave it cut short (issue 24, finding 7).
"""

from __future__ import annotations

import signal
from pathlib import Path

import pytest
from gcp_storage_emulator.storage import Storage
from google.api_core.client_options import ClientOptions
from google.auth.credentials import AnonymousCredentials
from google.cloud import firestore, pubsub_v1
from google.cloud.storage import Client as StorageClient

from emulators.firestore import server as firestore_server
from emulators.journal import MARKER_BYTES, encode_record
from emulators.pubsub import server as pubsub_server
from emulators.storage import server as storage_server
from tests.integration.launcher.test_launcher import ALL_FREE, Launcher
from tests.integration.launcher.test_persistence import _launch_fails

N = 40
TOPIC, SUB = "projects/p/topics/jobs", "projects/p/subscriptions/jobs"
ALL_KINDS = {"firestore.json", "firestore.log", "pubsub.json", "pubsub.log", "storage"}


def _clients(
    env: dict[str, str], monkeypatch: pytest.MonkeyPatch
) -> tuple[firestore.Client, pubsub_v1.PublisherClient, pubsub_v1.SubscriberClient, StorageClient]:
    for key in ("FIRESTORE_EMULATOR_HOST", "PUBSUB_EMULATOR_HOST"):
        monkeypatch.setenv(key, env[key])
    gcs = StorageClient(
        project="p",
        credentials=AnonymousCredentials(),
        client_options=ClientOptions(api_endpoint=env["STORAGE_EMULATOR_HOST"]),
    )
    return (
        firestore.Client(project="p"),
        pubsub_v1.PublisherClient(),
        pubsub_v1.SubscriberClient(),
        gcs,
    )


def _killed_after_writes(data: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """N acknowledged writes to each emulator, then SIGKILL: no chance to save anything."""
    launcher = Launcher("--data-dir", str(data), "--project", "p", *ALL_FREE)
    try:
        db, publisher, subscriber, gcs = _clients(launcher.wait_ready(), monkeypatch)
        for i in range(N):
            db.collection("jobs").document(f"job-{i}").set({"n": i})
        db.collection("jobs").document("job-0").update({"n": -1})
        db.collection("jobs").document("job-1").delete()
        publisher.create_topic(name=TOPIC)
        subscriber.create_subscription(name=SUB, topic=TOPIC)
        for i in range(N):
            publisher.publish(TOPIC, f"m-{i}".encode()).result(timeout=10)
        pulled = subscriber.pull(subscription=SUB, max_messages=5).received_messages
        subscriber.acknowledge(subscription=SUB, ack_ids=[m.ack_id for m in pulled])
        bucket = gcs.create_bucket("media")
        for i in range(N):
            bucket.blob(f"o-{i}").upload_from_string(f"content {i}".encode())
        bucket.delete_blob("o-0")
        bucket.blob("o-1").upload_from_string(b"uploaded again")
        db.close()
    finally:
        launcher.terminate(signal.SIGKILL)
    assert launcher.process.returncode == -signal.SIGKILL


def test_every_acknowledged_write_survives_a_sigkill(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    data = tmp_path / "data"
    _killed_after_writes(data, monkeypatch)
    assert {p.name for p in data.iterdir()} >= ALL_KINDS

    again = Launcher("--data-dir", str(data), "--project", "p", *ALL_FREE)
    try:
        db, _publisher, subscriber, gcs = _clients(again.wait_ready(), monkeypatch)
        docs = {s.id: s.get("n") for s in db.collection("jobs").stream()}
        assert docs == {f"job-{i}": (-1 if i == 0 else i) for i in range(N) if i != 1}
        # The five acknowledged messages are gone; every other one is delivered again.
        bodies: set[str] = set()
        for _ in range(20):
            got = subscriber.pull(subscription=SUB, max_messages=100, timeout=10)
            if not got.received_messages:
                break
            bodies |= {m.message.data.decode() for m in got.received_messages}
            ack_ids = [m.ack_id for m in got.received_messages]
            subscriber.acknowledge(subscription=SUB, ack_ids=ack_ids)
        assert len(bodies) == N - 5
        assert bodies < {f"m-{i}" for i in range(N)}
        objects = {b.name: b.download_as_bytes() for b in gcs.list_blobs("media")}
        assert set(objects) == {f"o-{i}" for i in range(1, N)}
        assert objects["o-1"] == b"uploaded again"
        assert objects["o-7"] == b"content 7"
        db.close()
    finally:
        assert again.terminate() == 0
    # A clean stop folded each log into its snapshot.
    assert (data / "firestore.log").stat().st_size == MARKER_BYTES
    assert (data / "pubsub.log").stat().st_size == MARKER_BYTES
    assert (data / "storage" / "storage.log").stat().st_size == MARKER_BYTES


def test_a_torn_last_record_is_discarded_with_a_warning_and_the_rest_kept(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    data = tmp_path / "data"
    _killed_after_writes(data, monkeypatch)
    log = data / "firestore.log"
    size = log.stat().st_size
    assert size > 0
    # A crash in the middle of an append: the start of a record, never acknowledged.
    torn = encode_record({"seq": 10**6, "db": ["p", "(default)"], "us": 1, "puts": []})
    with log.open("ab") as out:
        out.write(torn[: len(torn) // 2])

    again = Launcher("--data-dir", str(data), "--project", "p", "--log-level", "INFO", *ALL_FREE)
    try:
        db, *_ = _clients(again.wait_ready(), monkeypatch)
        assert len(list(db.collection("jobs").stream())) == N - 1
        db.close()
    finally:
        assert again.terminate() == 0
    stderr = "".join(again.stderr)
    assert "firestore: discarded the torn last record of" in stderr
    assert str(log) in stderr


def _corrupt_middle_of_log(log: Path) -> None:
    raw = bytearray(log.read_bytes())
    # Inside the first record's payload (after the log's 20-byte marker and the record's
    # 12-byte header), with more records after it.
    raw[40] ^= 0xFF
    log.write_bytes(bytes(raw))


@pytest.mark.parametrize(
    ("component", "damage", "expected"),
    [
        ("firestore", lambda d: _corrupt_middle_of_log(d / "firestore.log"), "corrupt at byte 20"),
        ("pubsub", lambda d: _corrupt_middle_of_log(d / "pubsub.log"), "corrupt at byte 20"),
        (
            "firestore",
            lambda d: (d / "firestore.json").write_text('{"format": 1, "kind": "fire'),
            "truncated or not a state file",
        ),
        (
            "storage",
            lambda d: _corrupt_middle_of_log(d / "storage" / "storage.log"),
            "corrupt at byte 20",
        ),
        (
            "storage",
            lambda d: (d / "storage" / "storage.json").write_text('{"format": 1, "ki'),
            "truncated or not a state file",
        ),
        (
            "storage",
            lambda d: next((d / "storage" / "blobs").iterdir()).write_bytes(b"bit rot"),
            "is damaged",
        ),
    ],
    ids=[
        "firestore-log",
        "pubsub-log",
        "firestore-snapshot",
        "storage-log",
        "storage-index",
        "storage-blob",
    ],
)
def test_a_damaged_data_directory_is_refused_naming_the_component_the_file_and_the_fix(
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    component: str,
    damage: object,
    expected: str,
) -> None:
    data = tmp_path / "data"
    _killed_after_writes(data, monkeypatch)
    assert callable(damage)
    damage(data)
    before = _files_of(data, component)

    result = _launch_fails("--data-dir", str(data))

    assert f"error: {component}: {data}" in result.stderr
    assert expected in result.stderr
    assert "--fresh" in result.stderr  # the fix
    # Nothing of the refused component was emptied or rewritten: its files are there to look
    # at. (A component started before it was stopped cleanly, as at any stop.)
    assert _files_of(data, component) == before


def _files_of(data: Path, component: str) -> dict[Path, bytes]:
    return {
        p: p.read_bytes()
        for p in data.rglob("*")
        if p.is_file() and p.relative_to(data).parts[0].startswith(component)
    }


def test_a_cut_short_index_from_the_old_storage_layout_is_refused_naming_it(
    tmp_path: Path,
) -> None:
    legacy = tmp_path / "storage" / ".cloudstorage"
    legacy.mkdir(parents=True)
    (legacy / ".meta").write_text('{"buckets": {"media": {')
    result = _launch_fails("--data-dir", str(tmp_path))
    assert f"error: storage: {legacy / '.meta'}: truncated" in result.stderr
    assert "--fresh" in result.stderr


def test_the_old_storage_layout_is_read_and_converted(tmp_path: Path) -> None:
    folder = tmp_path / "storage"
    # What earlier versions left: the package's own disk mode (objects and a .meta index).
    legacy = Storage(use_memory_fs=False, data_dir=str(folder))
    old = storage_server.StorageEmulator(storage_server._serve("127.0.0.1", 0, legacy), legacy)
    with old.start():
        bucket = _gcs(old.url).create_bucket("media")
        bucket.blob("a.mp4").upload_from_string(b"old bytes")
        generation = bucket.get_blob("a.mp4").generation  # type: ignore[union-attr]
    assert (folder / ".cloudstorage" / ".meta").exists()

    with storage_server.start(data_dir=folder) as emulator:
        blob = _gcs(emulator.url).bucket("media").get_blob("a.mp4")
        assert blob is not None and blob.generation == generation
        assert blob.download_as_bytes() == b"old bytes"
    assert (folder / "storage.json").exists()


def _gcs(url: str) -> StorageClient:
    return StorageClient(
        project="p",
        credentials=AnonymousCredentials(),
        client_options=ClientOptions(api_endpoint=url),
    )


def test_without_a_data_dir_nothing_is_written_anywhere(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)
    with (
        firestore_server.start(admin_port=None) as fs,
        pubsub_server.start() as ps,
        storage_server.start() as st,
    ):
        assert fs.engine.journal is None
        monkeypatch.setenv("FIRESTORE_EMULATOR_HOST", fs.address)
        monkeypatch.setenv("PUBSUB_EMULATOR_HOST", ps.address)
        firestore.Client(project="p").collection("c").document("d").set({"n": 1})
        pubsub_v1.PublisherClient().create_topic(name=TOPIC)
        gcs = StorageClient(
            project="p",
            credentials=AnonymousCredentials(),
            client_options=ClientOptions(api_endpoint=st.url),
        )
        gcs.create_bucket("b").blob("o").upload_from_string(b"x")
    assert list(tmp_path.iterdir()) == []
