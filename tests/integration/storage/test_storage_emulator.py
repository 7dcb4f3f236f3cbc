"""google-cloud-storage against the local emulator: the calls the worker's actions make."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest
import requests
from google.api_core import exceptions
from google.auth.credentials import AnonymousCredentials
from google.cloud import storage

from emulators.storage.server import ENV_VAR, StorageEmulator, start


def test_fixture_points_the_environment_at_the_emulator(
    storage_emulator: StorageEmulator,
) -> None:
    assert os.environ[ENV_VAR] == storage_emulator.url
    assert storage_emulator.url == f"http://127.0.0.1:{storage_emulator.port}"


def test_upload_then_download_returns_the_same_bytes(storage_bucket: storage.Bucket) -> None:
    storage_bucket.blob("media/42/source.mp4").upload_from_string(b"\x00frames\xff")
    assert storage_bucket.blob("media/42/source.mp4").download_as_bytes() == b"\x00frames\xff"


def test_large_upload_uses_the_resumable_path_and_round_trips(
    storage_bucket: storage.Bucket,
) -> None:
    data = os.urandom(9 * 1024 * 1024)  # above the client's 8 MiB multipart threshold
    storage_bucket.blob("big.bin").upload_from_string(data)
    assert storage_bucket.blob("big.bin").download_as_bytes() == data


def test_list_by_prefix_returns_only_matching_objects(
    storage_client: storage.Client, storage_bucket: storage.Bucket
) -> None:
    for name in ("media/1/a", "media/1/b", "media/2/a"):
        storage_bucket.blob(name).upload_from_string(b"x")
    names = [b.name for b in storage_client.list_blobs(storage_bucket, prefix="media/1/")]
    assert names == ["media/1/a", "media/1/b"]


def test_delete_removes_the_object(storage_bucket: storage.Bucket) -> None:
    storage_bucket.blob("gone").upload_from_string(b"x")
    storage_bucket.blob("gone").delete()
    assert not storage_bucket.blob("gone").exists()


def test_delete_of_a_missing_object_raises_not_found(storage_bucket: storage.Bucket) -> None:
    with pytest.raises(exceptions.NotFound):
        storage_bucket.blob("never-existed").delete()


def test_delete_in_a_missing_bucket_raises_not_found(storage_client: storage.Client) -> None:
    with pytest.raises(exceptions.NotFound):
        storage_client.bucket("no-such-bucket-here").blob("x").delete()


def test_delete_with_a_stale_generation_is_refused_and_keeps_the_object(
    storage_bucket: storage.Bucket,
) -> None:
    blob = storage_bucket.blob("guarded")
    blob.upload_from_string(b"v1")
    blob.reload()
    assert blob.generation is not None
    with pytest.raises(exceptions.PreconditionFailed):
        storage_bucket.blob("guarded").delete(if_generation_match=blob.generation + 1)
    assert storage_bucket.blob("guarded").exists()
    storage_bucket.blob("guarded").delete(if_generation_match=blob.generation)
    assert not storage_bucket.blob("guarded").exists()


def test_a_re_upload_gets_a_new_generation_and_survives_a_delete_of_the_old_one(
    storage_bucket: storage.Bucket,
) -> None:
    first = storage_bucket.blob("video.mp4")
    first.upload_from_string(b"original")
    first.reload()
    second = storage_bucket.blob("video.mp4")
    second.upload_from_string(b"restored by the customer")
    second.reload()
    assert first.generation is not None and second.generation is not None
    assert second.generation != first.generation

    # A late delete carrying the generation read before the re-upload: Cloud Storage's 412.
    with pytest.raises(exceptions.PreconditionFailed):
        storage_bucket.delete_blob("video.mp4", if_generation_match=first.generation)

    kept = storage_bucket.get_blob("video.mp4")
    assert kept is not None and kept.generation == second.generation
    assert kept.download_as_bytes() == b"restored by the customer"


def test_a_get_with_a_stale_generation_or_metageneration_is_refused(
    storage_bucket: storage.Bucket,
) -> None:
    blob = storage_bucket.blob("meta")
    blob.upload_from_string(b"v1")
    blob.reload()
    assert blob.generation is not None and blob.metageneration is not None
    with pytest.raises(exceptions.PreconditionFailed):
        storage_bucket.get_blob("meta", if_generation_match=blob.generation + 1)
    with pytest.raises(exceptions.PreconditionFailed):
        storage_bucket.blob("meta").download_as_bytes(if_generation_match=blob.generation + 1)
    with pytest.raises(exceptions.PreconditionFailed):
        storage_bucket.delete_blob("meta", if_metageneration_match=blob.metageneration + 1)
    matched = storage_bucket.get_blob(
        "meta", if_generation_match=blob.generation, if_metageneration_match=blob.metageneration
    )
    assert matched is not None and matched.generation == blob.generation
    assert storage_bucket.blob("meta").exists()


def test_a_not_match_precondition_that_matches_answers_not_modified(
    storage_bucket: storage.Bucket, storage_emulator: StorageEmulator
) -> None:
    blob = storage_bucket.blob("same")
    blob.upload_from_string(b"v1")
    blob.reload()
    url = f"{storage_emulator.url}/storage/v1/b/{storage_bucket.name}/o/same"
    same = requests.get(url, params={"ifGenerationNotMatch": str(blob.generation)}, timeout=10)
    assert same.status_code == 304
    other = requests.get(url, params={"ifGenerationNotMatch": "1"}, timeout=10)
    assert other.status_code == 200 and other.json()["generation"] == str(blob.generation)
    bad = requests.get(url, params={"ifGenerationMatch": "not-a-number"}, timeout=10)
    assert bad.status_code == 400


def test_wipe_keeping_buckets_deletes_every_object(monkeypatch: pytest.MonkeyPatch) -> None:
    with start(default_bucket="kept") as emulator:
        monkeypatch.setenv(ENV_VAR, emulator.url)
        client = storage.Client(project="p", credentials=AnonymousCredentials())
        client.bucket("kept").blob("x").upload_from_string(b"x")
        assert [b.name for b in client.list_blobs("kept")] == ["x"]
        emulator.wipe(keep_buckets=True)
        assert list(client.list_blobs("kept")) == []


def test_port_in_use_raises_os_error(storage_emulator: StorageEmulator) -> None:
    with pytest.raises(OSError):
        start(port=storage_emulator.port)


def test_stopped_emulator_refuses_connections() -> None:
    emulator = start()
    url = emulator.url
    emulator.stop()
    with pytest.raises(requests.ConnectionError):
        requests.get(url, timeout=5)


def test_module_cli_reports_a_port_in_use_with_exit_code_2(
    storage_emulator: StorageEmulator,
) -> None:
    result = subprocess.run(
        [sys.executable, "-m", "emulators.storage", "--port", str(storage_emulator.port)],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert result.returncode == 2
    assert f"storage: cannot listen on 127.0.0.1:{storage_emulator.port}" in result.stderr


def test_list_pages_in_name_order_from_a_start_offset_as_cloud_storage_does(
    storage_client: storage.Client, storage_bucket: storage.Bucket
) -> None:
    names = [f"media/1/{n:02d}" for n in range(7)]
    for name in [*reversed(names), "media/2/a", "media/10"]:
        storage_bucket.blob(name).upload_from_string(b"x")
    pages = storage_client.list_blobs(storage_bucket, prefix="media/1/", page_size=3).pages
    assert [[b.name for b in page] for page in pages] == [names[:3], names[3:6], names[6:]]
    # startOffset is inclusive, endOffset exclusive; maxResults bounds what comes back.
    listed = storage_client.list_blobs(
        storage_bucket, prefix="media/1/", start_offset="media/1/02", end_offset="media/1/05"
    )
    assert [b.name for b in listed] == names[2:5]
    asked = storage_client.list_blobs(
        storage_bucket, prefix="media/1/", start_offset="media/1/05", max_results=5
    )
    assert [(b.name, b.generation is not None) for b in asked] == [(n, True) for n in names[5:]]


def test_a_bad_page_token_or_page_size_is_refused_400(
    storage_emulator: StorageEmulator, storage_bucket: storage.Bucket
) -> None:
    url = f"{storage_emulator.url}/storage/v1/b/{storage_bucket.name}/o"
    assert requests.get(url, params={"maxResults": "0"}, timeout=10).status_code == 400
    assert requests.get(url, params={"pageToken": "!!"}, timeout=10).status_code == 400
    missing = f"{storage_emulator.url}/storage/v1/b/no-such-bucket-here/o"
    assert requests.get(missing, params={"maxResults": "5"}, timeout=10).status_code == 404
