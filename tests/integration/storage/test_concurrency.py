"""The storage emulator under real concurrency: many connections at once, one change at a time."""

from __future__ import annotations

import http.client
import socket
import threading
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor

import pytest
import requests
from google.api_core import exceptions
from google.cloud import storage

from emulators.storage.server import StorageEmulator

THREADS = 16


def test_concurrent_uploads_each_land_with_their_own_bytes(
    storage_bucket: storage.Bucket,
) -> None:
    def upload(n: int) -> None:
        storage_bucket.blob(f"obj/{n}").upload_from_string(f"content {n}".encode())

    with ThreadPoolExecutor(THREADS) as pool:
        list(pool.map(upload, range(200)))
    for n in (0, 57, 199):
        assert storage_bucket.blob(f"obj/{n}").download_as_bytes() == f"content {n}".encode()
    assert len(list(storage_bucket.list_blobs(prefix="obj/"))) == 200


def test_racing_guarded_deletes_of_one_object_let_exactly_one_win(
    storage_bucket: storage.Bucket,
) -> None:
    blob = storage_bucket.blob("contended")
    blob.upload_from_string(b"x")
    blob.reload()
    generation = blob.generation
    barrier = threading.Barrier(THREADS)

    def delete(_: int) -> str:
        barrier.wait()
        try:
            storage_bucket.blob("contended").delete(if_generation_match=generation)
        except exceptions.NotFound:
            return "not_found"
        except exceptions.PreconditionFailed:
            return "precondition"
        return "deleted"

    with ThreadPoolExecutor(THREADS) as pool:
        outcomes = list(pool.map(delete, range(THREADS)))
    assert outcomes.count("deleted") == 1
    assert outcomes.count("not_found") == THREADS - 1
    assert not storage_bucket.blob("contended").exists()


def test_concurrent_deletes_of_distinct_objects_all_succeed(
    storage_bucket: storage.Bucket,
) -> None:
    for n in range(100):
        storage_bucket.blob(f"d/{n}").upload_from_string(b"x")

    with ThreadPoolExecutor(THREADS) as pool:
        list(pool.map(lambda n: storage_bucket.blob(f"d/{n}").delete(), range(100)))
    assert list(storage_bucket.list_blobs(prefix="d/")) == []


def test_a_client_stalled_mid_body_does_not_hold_other_requests(
    storage_emulator: StorageEmulator, storage_bucket: storage.Bucket
) -> None:
    storage_bucket.blob("other").upload_from_string(b"still served")
    stalled = socket.create_connection((storage_emulator.host, storage_emulator.port))
    try:
        path = f"/upload/storage/v1/b/{storage_bucket.name}/o?uploadType=media&name=slow"
        stalled.sendall(
            f"POST {path} HTTP/1.1\r\nHost: x\r\nContent-Length: 1000\r\n\r\npartial".encode()
        )
        # A single-threaded server would still be reading the stalled body: this would time out.
        url = f"{storage_emulator.url}/storage/v1/b/{storage_bucket.name}/o/other?alt=media"
        answer = requests.get(url, timeout=10)
        assert answer.content == b"still served"
    finally:
        stalled.close()


def test_a_chunked_upload_is_stored_whole(
    storage_emulator: StorageEmulator, storage_bucket: storage.Bucket
) -> None:
    def chunks() -> Iterator[bytes]:
        yield b"first-"
        yield b"second"

    url = (
        f"{storage_emulator.url}/upload/storage/v1/b/{storage_bucket.name}/o"
        "?uploadType=media&name=chunked"
    )
    answer = requests.post(url, data=chunks(), timeout=10)
    assert answer.status_code == 200, answer.text
    assert storage_bucket.blob("chunked").download_as_bytes() == b"first-second"


def test_one_kept_alive_connection_serves_a_sequence_of_calls(
    storage_emulator: StorageEmulator, storage_bucket: storage.Bucket
) -> None:
    # What the client's connection pool does: each call on the connection the last one used.
    # Answers of every kind (2xx, 404, 412) leave it usable for the next request.
    objects = f"/storage/v1/b/{storage_bucket.name}/o"
    upload = f"/upload{objects}?uploadType=media&name=kept"
    connection = http.client.HTTPConnection(storage_emulator.host, storage_emulator.port)
    sockets, statuses = set(), []
    try:
        for method, path, body in [
            ("POST", upload, b"bytes"),
            ("GET", f"{objects}/kept?alt=media", None),
            ("DELETE", f"{objects}/kept?ifGenerationMatch=1", None),
            ("DELETE", f"{objects}/kept", None),
            ("DELETE", f"{objects}/kept", None),
            ("GET", f"{objects}/kept", None),
        ]:
            connection.request(method, path, body=body)
            response = connection.getresponse()
            response.read()
            statuses.append(response.status)
            assert not response.will_close
            sockets.add(id(connection.sock))
    finally:
        connection.close()
    # The delete's 2xx: the package answers 200 where Cloud Storage answers 204 (no body).
    assert statuses[:3] == [200, 200, 412] and 200 <= statuses[3] < 300
    assert statuses[4:] == [404, 404]
    assert len(sockets) == 1


@pytest.mark.parametrize(
    ("framing", "body"),
    [
        (b"Transfer-Encoding: chunked\r\n", b"-1\r\nabc"),
        (b"Content-Length: -1\r\n", b"abc"),
        (b"Transfer-Encoding: chunked\r\n", b"0x3\r\nabc\r\n0\r\n\r\n"),
    ],
    ids=["chunk size -1", "content length -1", "chunk size 0x3"],
)
def test_a_body_framed_by_a_negative_or_malformed_size_is_refused_at_once(
    storage_emulator: StorageEmulator, storage_bucket: storage.Bucket, framing: bytes, body: bytes
) -> None:
    # Before (issue 33, finding 7): `int(b"-1", 16)` and `read(-1)` read the connection to
    # EOF, unbounded; a client that kept it open held its thread until it went away.
    path = f"/upload/storage/v1/b/{storage_bucket.name}/o?uploadType=media&name=bad"
    with socket.create_connection(
        (storage_emulator.host, storage_emulator.port), timeout=10
    ) as connection:
        connection.sendall(f"POST {path} HTTP/1.1\r\nHost: x\r\n".encode() + framing + b"\r\n")
        connection.sendall(body)  # and the connection stays open
        answer = connection.recv(200)
    assert answer.startswith(b"HTTP/1.1 400 "), answer
    assert storage_bucket.get_blob("bad") is None
