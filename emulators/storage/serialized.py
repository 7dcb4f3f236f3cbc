"""Concurrent connections, one storage change at a time: the package's handler, made thread-safe.

`gcp-storage-emulator`'s `Storage` keeps buckets and objects in plain dicts and its handlers
read-modify-write them (generation numbers, soft-delete copies) with no lock, so a threaded
server cannot call it from two threads at once. `SerializedHandler` lets every connection be
accepted, parsed, read and answered in its own thread, and runs only the package's handler
(which touches `Storage`) under one lock: the request body is read in full before the lock is
taken and the answer is buffered and sent after it is released, so a slow client never holds
the store. The semantics are the package's, unchanged: every request still sees the store as
the previous one left it.

`InMemoryStorage` also drops the package's rewrite of its whole metadata index (`.meta`, JSON
of every bucket and object) after each change: in memory nobody ever reads it back, and that
rewrite made each upload and delete cost time in proportion to the number of objects stored.
"""

from __future__ import annotations

import io
import threading
from http import HTTPStatus
from typing import Any

from gcp_storage_emulator.server import RequestHandler
from gcp_storage_emulator.storage import Storage

from emulators.cloudrun.framing import Malformed, TooLarge, read_body
from emulators.http_server import send_json
from emulators.journal import JournalError

# Cloud Storage's largest object (https://cloud.google.com/storage/quotas#objects): the bound a
# request body is read to, so a length or chunk size is taken as sent only within it.
MAX_OBJECT_BYTES = 5 * 1024**4
# What the trailer fields of a chunked body may add (http.server's own header line limit).
_TRAILER_BYTES = 64 * 1024


class InMemoryStorage(Storage):
    """The package's in-memory store without the per-change `.meta` rewrite."""

    def __init__(self) -> None:
        super().__init__(use_memory_fs=True)

    def _write_config_to_file(self) -> None:
        """In memory the index lives in `self.buckets` / `self.objects` already."""

    def check_durable(self) -> None:
        """In memory there is no disk to fail (`DurableStorage` raises once it has)."""


class SerializedHandler(RequestHandler):
    """The package's handler under a per-storage lock, with its I/O outside the lock.

    Put it first among the bases of a handler class (so every `do_*` of the classes after it
    runs under the lock) and give that class its own `store_lock` with `serialized`.
    """

    store_lock: threading.Lock
    rfile: Any  # set per connection by StreamRequestHandler
    wfile: Any

    def _serialized(self, method: Any) -> None:
        try:
            body = self._read_body()
        except (Malformed, TooLarge) as exc:
            # Refused before anything is read to the end of the stream: a chunk size of -1 or
            # a Content-Length of -1 was read as "until EOF" (issue 33, finding 7).
            self.close_connection = True
            status = (
                HTTPStatus.REQUEST_ENTITY_TOO_LARGE
                if isinstance(exc, TooLarge)
                else HTTPStatus.BAD_REQUEST
            )
            send_json(self, status, {"error": {"code": int(status), "message": str(exc)}})
            return
        wire_in, wire_out = self.rfile, self.wfile
        self.rfile = io.BytesIO(body)
        answer = io.BytesIO()
        self.wfile = answer
        unsaved: JournalError | None = None
        try:
            with self.store_lock:
                if isinstance(self.storage, InMemoryStorage):  # not the package's own Storage
                    self.storage.check_durable()
                method()
        except JournalError as exc:
            unsaved = exc
        finally:
            # The connection's own streams again: a kept-alive connection reads its next
            # request from the socket, not from this request's buffered body.
            self.rfile, self.wfile = wire_in, wire_out
        if unsaved is not None:
            # Not acknowledged (the data directory could not take it), nor anything after it.
            error = {"code": 503, "message": f"storage emulator: {unsaved}"}
            send_json(self, HTTPStatus.SERVICE_UNAVAILABLE, {"error": error})
            return
        self.wfile.write(answer.getvalue())

    def _read_body(self) -> bytes:
        """Read the body now (Content-Length or chunked, framed strictly as RFC 9112 says:
        `emulators/cloudrun/framing.py`) so the handler reads it from memory."""
        chunked = self.headers.get_all("Transfer-Encoding") or []
        body = read_body(
            self.rfile,
            chunked,
            self.headers.get_all("Content-Length") or [],
            MAX_OBJECT_BYTES,
            _TRAILER_BYTES,
        )
        if chunked:
            # The package decodes chunks itself; hand it the plain body with its length.
            del self.headers["Transfer-Encoding"]
            self.headers["Content-Length"] = str(len(body))
        return body

    def do_GET(self) -> None:
        self._serialized(super().do_GET)

    def do_POST(self) -> None:
        self._serialized(super().do_POST)

    def do_PUT(self) -> None:
        self._serialized(super().do_PUT)

    def do_PATCH(self) -> None:
        self._serialized(super().do_PATCH)

    def do_DELETE(self) -> None:
        self._serialized(super().do_DELETE)


def serialized(handler: type[RequestHandler]) -> type[SerializedHandler]:
    """`handler` with every request's storage work under one new lock."""
    bases = (SerializedHandler, handler) if handler is not RequestHandler else (SerializedHandler,)
    return type(f"Serialized{handler.__name__}", bases, {"store_lock": threading.Lock()})
