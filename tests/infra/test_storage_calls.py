"""The worker's storage role covers every Cloud Storage call the worker makes.

infra/identity.py MEDIA_STORAGE_CALLS lists the JSON API methods the worker calls and the
permissions each needs; the media role is derived from it. Here the worker's real media
actions (`media.delete_source`, `media.delete_prefix`) run with the real google-cloud-storage
client against a local HTTP endpoint that records each request, through every path (deleted,
already absent, bucket gone): every method they call must be listed, every listed method must
be called, and each action's declared `needs` covers the calls it makes.
"""

from __future__ import annotations

import re
import threading
import urllib.parse
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest
from google.auth.credentials import AnonymousCredentials
from google.cloud import storage

from infra.identity import MEDIA_PERMISSIONS, MEDIA_STORAGE_CALLS
from services.jobs.actions import ActionRequest
from services.jobs.errors import Interrupted, PermanentError
from services.jobs.media import DELETE_PREFIX, DELETE_SOURCE
from services.worker.media import SourceDeleter
from services.worker.prefix import PrefixDeleter
from tests.infra.conftest import StackRun

BUCKET = "media-bucket"

# (HTTP verb, JSON API path) -> the JSON API method
# (https://cloud.google.com/storage/docs/json_api/v1).
_METHODS = (
    ("DELETE", re.compile(r"^/storage/v1/b/[^/]+/o/[^/]+$"), "objects.delete"),
    ("GET", re.compile(r"^/storage/v1/b/[^/]+/o/[^/]+$"), "objects.get"),
    ("GET", re.compile(r"^/storage/v1/b/[^/]+/o$"), "objects.list"),
    ("GET", re.compile(r"^/storage/v1/b/[^/]+$"), "buckets.get"),
)


class FakeStorage:
    """What the endpoint answers: which objects exist, whether the bucket does."""

    def __init__(self) -> None:
        self.objects: set[str] = set()
        self.bucket_exists = True
        self.calls: list[str] = []


def _handler(state: FakeStorage) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        def _method(self) -> str:
            path = self.path.split("?", 1)[0]
            for verb, pattern, method in _METHODS:
                if self.command == verb and pattern.match(path):
                    return method
            return f"unknown {self.command} {path}"

        def _answer(self) -> None:
            method = self._method()
            state.calls.append(method)
            name = urllib.parse.unquote(self.path.split("?", 1)[0].rsplit("/", 1)[-1])
            if method == "objects.get" and state.bucket_exists and name in state.objects:
                body = b'{"name": "%s", "bucket": "%s", "generation": "1"}' % (
                    name.encode(),
                    BUCKET.encode(),
                )
                self.send_response(200)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)
                return
            if method == "objects.list" and state.bucket_exists:
                items = b",".join(
                    b'{"name": "%s", "bucket": "%s", "generation": "1"}'
                    % (each.encode(), BUCKET.encode())
                    for each in sorted(state.objects)
                )
                body = b'{"kind": "storage#objects", "items": [%s]}' % items
                self.send_response(200)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)
                return
            if method == "objects.delete" and state.bucket_exists and name in state.objects:
                state.objects.discard(name)
                self.send_response(204)
                self.send_header("Content-Length", "0")
                self.end_headers()
                return
            found = method == "buckets.get" and state.bucket_exists
            body = b'{"name": "%s"}' % BUCKET.encode() if found else b'{"error": {"code": 404}}'
            self.send_response(200 if found else 404)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        do_GET = do_DELETE = do_POST = do_PUT = do_PATCH = _answer

        def log_message(self, format: str, *args: object) -> None:
            pass

    return Handler


@pytest.fixture
def fake() -> Iterator[tuple[FakeStorage, storage.Client]]:
    state = FakeStorage()
    server = ThreadingHTTPServer(("127.0.0.1", 0), _handler(state))
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    client = storage.Client(
        project="p",
        credentials=AnonymousCredentials(),
        client_options={"api_endpoint": f"http://127.0.0.1:{server.server_port}"},
    )
    try:
        yield state, client
    finally:
        server.shutdown()
        server.server_close()


def _request(*names: str) -> ActionRequest:
    return ActionRequest(
        job_id="job-1",
        action="media.delete_source",
        subject="s",
        params={"bucket": BUCKET, "objects": list(names)},
        attempt=1,
        idempotency_key="k",
    )


def _delete_prefix(client: storage.Client, progress: dict[str, object] | None = None) -> str:
    """Run media.delete_prefix to its end (each page's plan handed to the next run)."""
    deleter = PrefixDeleter(client, default_bucket=BUCKET, timeout_s=5, retry=None)
    for _ in range(10):
        request = ActionRequest(
            "job-2", "media.delete_prefix", "s", {"bucket": BUCKET, "prefix": "r/"}, 1, "k",
            progress=progress,
        )  # fmt: skip
        try:
            return deleter(request).outcome
        except Interrupted as stopped:
            progress = stopped.progress
    raise AssertionError("media.delete_prefix never finished")


def _calls_of_each_action(state: FakeStorage, client: storage.Client) -> dict[str, set[str]]:
    deleter = SourceDeleter(client, default_bucket=BUCKET, timeout_s=5, retry=None)
    state.objects = {"a.mp4", "b.mp4"}
    assert deleter(_request("a.mp4", "b.mp4")).outcome == "deleted"
    # A second run after a crash: everything is already gone, so the bucket is checked.
    assert deleter(_request("a.mp4", "b.mp4")).outcome == "already_absent"
    state.bucket_exists = False
    with pytest.raises(PermanentError, match="does not exist"):
        deleter(_request("a.mp4"))
    source, state.calls = set(state.calls), []
    state.bucket_exists = True
    state.objects = {"r/1.ts", "r/2.ts"}
    assert _delete_prefix(client) == "deleted"
    assert _delete_prefix(client) == "already_absent"
    state.bucket_exists = False
    with pytest.raises(PermanentError, match="does not exist"):
        _delete_prefix(client)
    return {DELETE_SOURCE.name: source, DELETE_PREFIX.name: set(state.calls)}


def test_every_storage_call_of_the_worker_is_listed_with_its_permissions(
    fake: tuple[FakeStorage, storage.Client],
) -> None:
    state, client = fake
    calls = _calls_of_each_action(state, client)
    assert calls[DELETE_SOURCE.name] == {"objects.get", "objects.delete", "buckets.get"}, calls
    assert calls[DELETE_PREFIX.name] == {"objects.list", "objects.delete"}, calls
    called = set().union(*calls.values())
    assert called <= set(MEDIA_STORAGE_CALLS), called - set(MEDIA_STORAGE_CALLS)
    assert set(MEDIA_STORAGE_CALLS) <= called  # nothing listed that the worker never calls
    # Each action declares (its `needs`) every permission its own calls need on the bucket.
    for action in (DELETE_SOURCE, DELETE_PREFIX):
        declared = {p for grant in action.needs.grants for p in grant.permissions}
        needed = {p for method in calls[action.name] for p in MEDIA_STORAGE_CALLS[method]}
        assert needed <= declared, (action.name, needed - declared)
        assert declared <= set(MEDIA_PERMISSIONS), (action.name, declared - MEDIA_PERMISSIONS)


def test_the_granted_role_covers_the_permissions_of_every_listed_call(stack: StackRun) -> None:
    role = stack.one("projects/iAMCustomRole:IAMCustomRole", "media-cleaner-role").state
    granted = set(role["permissions"])
    assert granted == set(MEDIA_PERMISSIONS)
    for method, needed in MEDIA_STORAGE_CALLS.items():
        assert set(needed) <= granted, method
    # bucket.exists() is buckets.get, which needs storage.buckets.get: without it a job whose
    # files are already gone fails permanently with 403.
    assert "storage.buckets.get" in granted
    assert not any(p.endswith((".create", ".update", ".setIamPolicy")) for p in granted)
