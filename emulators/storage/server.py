"""Run `gcp-storage-emulator` in-process, in memory, with errors surfaced at start.

The package's own `create_server(...).start()` binds inside its thread: a port already in use
kills that thread and `start()` then waits forever. Binding here, in the caller's thread,
turns that into an `OSError` the launcher can report. Requests are served by the package's
handler and storage, so `google.cloud.storage.Client` talks to it over HTTP through
`STORAGE_EMULATOR_HOST=http://HOST:PORT`; connections are served concurrently with the store
changed one request at a time (`serialized`). Two gaps are filled, see `_PreconditionHandler`:
Cloud Storage's generation preconditions, and the paging of `objects.list` (`maxResults`,
`pageToken`, `startOffset`, `endOffset`), which the package ignores.

Connections are kept alive (HTTP/1.1), as Cloud Storage's JSON API keeps them: the package's
handler (http.server's default HTTP/1.0) closed each one after a single request, so every
client call paid a new TCP connection, and this server a new thread for it. Every answer
states its length (the package's `Response.close`, `send_json`, http.server's `send_error`),
and the body is read whole before the handler runs (`serialized`), so the next request on
the connection starts where this one ended.
"""

from __future__ import annotations

import base64
import binascii
import re
import urllib.parse
from functools import partial
from http import HTTPStatus
from http.server import ThreadingHTTPServer
from pathlib import Path

from gcp_storage_emulator.exceptions import BadRequest, NotFound
from gcp_storage_emulator.handlers import buckets
from gcp_storage_emulator.server import RequestHandler
from gcp_storage_emulator.storage import Storage

from emulators.http_server import BackgroundHTTPServer, send_json
from emulators.storage.durable_store import DurableStorage
from emulators.storage.serialized import InMemoryStorage, serialized

ENV_VAR = "STORAGE_EMULATOR_HOST"
IDLE_CONNECTION_TIMEOUT_S = 120

_OBJECT_PATH = re.compile(
    r"^(?:/download)?(?:/storage/v1)?/b/(?P<bucket>[-.\w]+)/o/(?P<object>.*[^/]+)$"
)

_LIST_PATH = re.compile(r"^(?:/storage/v1)?/b/(?P<bucket>[-.\w]+)/o/?$")
# objects.list's paging parameters (https://cloud.google.com/storage/docs/json_api/v1/objects/list):
# a list request carrying any of them is answered by `_PreconditionHandler._list_page`.
_PAGING = ("maxResults", "pageToken", "startOffset", "endOffset")
MAX_LIST_RESULTS = 1000  # Cloud Storage's largest page (and its default)


# Cloud Storage's request preconditions on an object
# (https://cloud.google.com/storage/docs/request-preconditions): the JSON API query parameter,
# the object property it compares, whether it must match, and the answer when it fails.
_PRECONDITIONS = (
    ("ifGenerationMatch", "generation", True, HTTPStatus.PRECONDITION_FAILED),
    ("ifMetagenerationMatch", "metageneration", True, HTTPStatus.PRECONDITION_FAILED),
    ("ifGenerationNotMatch", "generation", False, HTTPStatus.NOT_MODIFIED),
    ("ifMetagenerationNotMatch", "metageneration", False, HTTPStatus.NOT_MODIFIED),
)


class _PreconditionHandler(RequestHandler):
    """The package's handler, plus Cloud Storage's generation and metageneration preconditions
    on an existing object's GET (metadata or media) and DELETE.

    The package ignores them, and a delete guarded by a generation is exactly what a deferred
    "delete the source files" job sends (services/worker/media.py); without the check a test
    would pass where Cloud Storage refuses. A mismatched `ifGenerationMatch` /
    `ifMetagenerationMatch` answers 412 Precondition Failed, a matched `...NotMatch` 304 Not
    Modified, as the preconditions page lists. Every upload gets a new generation (the
    package's: the time in nanoseconds), so a re-uploaded object never matches an old one.
    """

    protocol_version = "HTTP/1.1"
    # An idle kept-alive connection is closed after this long (its thread ends with it).
    timeout = IDLE_CONNECTION_TIMEOUT_S

    def do_GET(self) -> None:
        if not self._list_page() and not self._precondition_failed():
            super().do_GET()

    def do_DELETE(self) -> None:
        if not self._precondition_failed():
            super().do_DELETE()

    def _precondition_failed(self) -> bool:
        """Answer and return True when a precondition of the request does not hold."""
        url = urllib.parse.urlsplit(self.path)
        query = urllib.parse.parse_qs(url.query)
        match = _OBJECT_PATH.match(url.path)
        asked = [p for p in _PRECONDITIONS if p[0] in query]
        if match is None or not asked:
            return False
        bucket, name = match["bucket"], urllib.parse.unquote(match["object"])
        try:
            current = self.storage.get_file_obj(bucket, name)
        except NotFound:
            return False  # the package answers 404, as Cloud Storage does
        for parameter, prop, must_match, status in asked:
            wanted = query[parameter][0]
            if not (wanted.isascii() and wanted.isdigit()):
                error = {"code": 400, "message": f"Invalid argument for {parameter}: {wanted}"}
                send_json(self, HTTPStatus.BAD_REQUEST, {"error": error})
                return True
            if (str(current.get(prop)) == str(int(wanted))) != must_match:
                if status is HTTPStatus.NOT_MODIFIED:
                    self.send_response(status)
                    self.send_header("Content-Length", "0")
                    self.end_headers()
                else:
                    error = {"code": int(status), "message": f"Precondition Failed: {parameter}"}
                    send_json(self, status, {"error": error})
                return True
        return False

    def _list_page(self) -> bool:
        """Answer an `objects.list` that pages (and return True), as Cloud Storage does.

        Items come in name order, filtered by `prefix` (and `delimiter` / `matchGlob`, the
        package's), then by `startOffset` (inclusive) and `endOffset` (exclusive); at most
        `maxResults` (1 to 1000, default 1000) per page, with `nextPageToken` when more are
        left. The token is opaque to the client; here it carries the last name returned.
        With a delimiter, `prefixes` come whole on the first page (Cloud Storage spreads them
        over the pages); soft-deleted listings stay the package's.
        """
        url = urllib.parse.urlsplit(self.path)
        match = _LIST_PATH.match(url.path)
        query = urllib.parse.parse_qs(url.query)
        if match is None or not any(p in query for p in _PAGING) or "softDeleted" in query:
            return False

        def one(name: str) -> str | None:
            return query[name][0] if name in query else None

        def refuse(message: str) -> bool:
            send_json(self, HTTPStatus.BAD_REQUEST, {"error": {"code": 400, "message": message}})
            return True

        limit = MAX_LIST_RESULTS
        if (raw := one("maxResults")) is not None:
            if not (raw.isascii() and raw.isdigit() and int(raw) >= 1):
                return refuse(f"Invalid argument for maxResults: {raw}")
            limit = min(int(raw), MAX_LIST_RESULTS)
        after = None
        if (token := one("pageToken")) is not None:
            try:
                raw_token = token.encode("ascii")
                after = base64.b64decode(raw_token, altchars=b"-_", validate=True).decode()
            except (ValueError, binascii.Error, UnicodeError):
                return refuse("Invalid page token")
        try:
            files, prefixes = self.storage.get_file_list(
                match["bucket"], one("prefix"), one("delimiter"), one("matchGlob")
            )
        except NotFound:
            send_json(self, HTTPStatus.NOT_FOUND, {"error": {"code": 404, "message": "Not Found"}})
            return True
        except BadRequest:
            return refuse("Bad list request")
        start, end = one("startOffset"), one("endOffset")
        items = [
            item
            for item in files
            if (start is None or item["name"] >= start)
            and (end is None or item["name"] < end)
            and (after is None or item["name"] > after)
        ]
        body: dict[str, object] = {"kind": "storage#objects", "items": items[:limit]}
        if prefixes and after is None:
            body["prefixes"] = prefixes
        if len(items) > limit:
            last = items[limit - 1]["name"]
            body["nextPageToken"] = base64.urlsafe_b64encode(last.encode("utf-8")).decode()
        send_json(self, HTTPStatus.OK, body)
        return True


class StorageEmulator(BackgroundHTTPServer):
    """A running emulator: `url` is the value for STORAGE_EMULATOR_HOST."""

    def __init__(self, httpd: ThreadingHTTPServer, storage: Storage) -> None:
        super().__init__(httpd, "storage-emulator")
        self._storage = storage

    def wipe(self, keep_buckets: bool = False) -> None:
        """Delete every object (and every bucket unless `keep_buckets`)."""
        self._storage.wipe(keep_buckets=keep_buckets)

    def stop(self) -> None:
        super().stop()
        if isinstance(self._storage, DurableStorage):
            self._storage.close()  # after the last request: one snapshot, an empty log


def start(
    host: str = "127.0.0.1",
    port: int = 0,
    *,
    default_bucket: str | None = None,
    data_dir: Path | None = None,
) -> StorageEmulator:
    """Serve a store on host:port (0 picks a free port); raises OSError.

    In memory and empty, or with ``data_dir`` loaded from there and every change on disk
    there before it is answered (`durable_store.DurableStorage`; SnapshotError, naming the
    file, when what is there cannot be read back).
    """
    if data_dir is None:
        storage: Storage = InMemoryStorage()
    else:
        storage = DurableStorage(data_dir)
    if default_bucket:
        buckets.create_bucket(default_bucket, storage)
    emulator = StorageEmulator(_serve(host, port, storage), storage)
    if isinstance(storage, DurableStorage):
        storage.rebase_links(emulator.url)
    return emulator.start()


def _serve(host: str, port: int, storage: Storage) -> ThreadingHTTPServer:
    """A thread per connection; the store itself changes one request at a time."""
    httpd = ThreadingHTTPServer((host, port), partial(serialized(_PreconditionHandler), storage))
    httpd.daemon_threads = True
    return httpd
