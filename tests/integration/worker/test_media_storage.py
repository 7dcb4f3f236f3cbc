"""media.delete_source against Cloud Storage over HTTP: the storage emulator, and a stand-in
server that answers every request with one status (a real outage, seen by the real client)."""

from __future__ import annotations

import threading
from collections.abc import Iterator
from contextlib import contextmanager

import google.cloud.storage as storage
import pytest
from google.api_core.client_options import ClientOptions
from google.auth.credentials import AnonymousCredentials
from werkzeug.serving import make_server
from werkzeug.wrappers import Request, Response

from services.jobs.actions import ActionRequest
from services.jobs.errors import PermanentError, TransientError
from services.worker.media import ALREADY_ABSENT, DELETED, SourceDeleter


def _request(bucket: str, *objects: str) -> ActionRequest:
    return ActionRequest(
        "job-1",
        "media.delete_source",
        "media-1",
        {"bucket": bucket, "objects": list(objects)},
        1,
        "key-1",
    )


def test_existing_objects_are_deleted(
    storage_client: storage.Client, storage_bucket: storage.Bucket
) -> None:
    for name in ("src/a.mp4", "src/b.mp4"):
        storage_bucket.blob(name).upload_from_string(b"video")
    result = SourceDeleter(storage_client)(_request(storage_bucket.name, "src/a.mp4", "src/b.mp4"))
    assert result.outcome == DELETED
    assert result.details["deleted"] == ["src/a.mp4", "src/b.mp4"]
    assert list(storage_client.list_blobs(storage_bucket.name)) == []


def test_deleting_again_succeeds_as_already_absent(
    storage_client: storage.Client, storage_bucket: storage.Bucket
) -> None:
    storage_bucket.blob("src/a.mp4").upload_from_string(b"video")
    deleter = SourceDeleter(storage_client)
    assert deleter(_request(storage_bucket.name, "src/a.mp4")).outcome == DELETED
    assert deleter(_request(storage_bucket.name, "src/a.mp4")).outcome == ALREADY_ABSENT


def test_missing_bucket_is_a_permanent_error(storage_client: storage.Client) -> None:
    with pytest.raises(PermanentError, match="does not exist"):
        SourceDeleter(storage_client)(_request("no-such-bucket-here", "a"))


def test_other_bucket_than_the_media_bucket_is_refused_before_any_call(
    storage_client: storage.Client, storage_bucket: storage.Bucket
) -> None:
    storage_bucket.blob("a").upload_from_string(b"video")
    deleter = SourceDeleter(storage_client, default_bucket="the-media-bucket")
    with pytest.raises(PermanentError):
        deleter(_request(storage_bucket.name, "a"))
    assert storage_bucket.blob("a").exists()


@contextmanager
def answering(status: int) -> Iterator[tuple[str, list[str]]]:
    """An HTTP server on 127.0.0.1 that answers every request with `status`."""
    seen: list[str] = []

    @Request.application
    def app(request: Request) -> Response:
        seen.append(f"{request.method} {request.path}")
        return Response(
            f'{{"error": {{"code": {status}, "message": "injected"}}}}',
            status,
            content_type="application/json",
        )

    server = make_server("127.0.0.1", 0, app, threaded=True)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_port}", seen
    finally:
        server.shutdown()
        thread.join(timeout=5)


def _client_at(endpoint: str) -> storage.Client:
    return storage.Client(
        project="p",
        credentials=AnonymousCredentials(),
        client_options=ClientOptions(api_endpoint=endpoint),
    )


@pytest.mark.parametrize("status", [429, 500, 503])
def test_throttling_and_server_errors_are_transient(status: int) -> None:
    with answering(status) as (endpoint, seen), pytest.raises(TransientError):
        SourceDeleter(_client_at(endpoint), timeout_s=5)(_request("media-src", "a"))
    # The first call is the generation read the delete is conditioned on (objects.get).
    assert any(line.startswith("GET /storage/v1/b/media-src/o/a") for line in seen), seen


@pytest.mark.parametrize("status", [400, 403])
def test_refusals_are_permanent(status: int) -> None:
    with answering(status) as (endpoint, _seen), pytest.raises(PermanentError):
        SourceDeleter(_client_at(endpoint), timeout_s=5)(_request("media-src", "a"))


def test_unreachable_storage_is_transient() -> None:
    with answering(503) as (endpoint, _seen):
        pass  # the server is gone: connections are refused
    with pytest.raises(TransientError):
        SourceDeleter(_client_at(endpoint), timeout_s=2)(_request("media-src", "a"))
