"""A tiny push endpoint for tests: records every request and answers as the test scripts it."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from types import TracebackType
from typing import Any


@dataclass(frozen=True)
class PushRequest:
    """One request as the endpoint saw it; `at` is the endpoint's monotonic arrival time."""

    at: float
    path: str
    headers: dict[str, str]
    body: bytes


# Given the 1-based number of the request, return (status, seconds to wait before answering).
Script = Callable[[int], tuple[int, float]]


def always(status: int, delay_s: float = 0.0) -> Script:
    return lambda _n: (status, delay_s)


class RecordingEndpoint:
    """An HTTP server on 127.0.0.1 with a free port; use as a context manager."""

    def __init__(self, script: Script | None = None) -> None:
        self.script: Script = script or always(204)
        self.requests: list[PushRequest] = []
        self.max_concurrent = 0
        self._active = 0
        self._lock = threading.Lock()
        handler = type("_Handler", (_Handler,), {"endpoint": self})
        self._server = ThreadingHTTPServer(("127.0.0.1", 0), handler)
        self._server.daemon_threads = True
        self._thread = threading.Thread(target=self._server.serve_forever, daemon=True)

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self._server.server_address[1]}/push"

    def count(self) -> int:
        with self._lock:
            return len(self.requests)

    def __enter__(self) -> RecordingEndpoint:
        self._thread.start()
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        traceback: TracebackType | None,
    ) -> None:
        self._server.shutdown()
        self._server.server_close()
        self._thread.join(timeout=5)

    def _record(self, request: PushRequest) -> tuple[int, float]:
        with self._lock:
            self.requests.append(request)
            number = len(self.requests)
            self._active += 1
            self.max_concurrent = max(self.max_concurrent, self._active)
        return self.script(number)

    def _done(self) -> None:
        with self._lock:
            self._active -= 1


class _Handler(BaseHTTPRequestHandler):
    endpoint: RecordingEndpoint

    def do_POST(self) -> None:
        length = int(self.headers.get("Content-Length") or 0)
        body = self.rfile.read(length)
        request = PushRequest(time.monotonic(), self.path, dict(self.headers.items()), body)
        status, delay_s = self.endpoint._record(request)
        try:
            if delay_s:
                time.sleep(delay_s)
            self.send_response(status)
            self.send_header("Content-Length", "0")
            self.end_headers()
        except OSError:
            pass  # the pusher gave up waiting; that is what the test wanted to see
        finally:
            self.endpoint._done()

    def log_message(self, format: str, *args: Any) -> None:
        pass
