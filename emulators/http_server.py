"""An HTTP server already bound, served from a daemon thread until stopped; JSON answers."""

from __future__ import annotations

import json
import threading
from collections.abc import Mapping
from http.server import BaseHTTPRequestHandler, HTTPServer
from types import TracebackType
from typing import Self


class BackgroundHTTPServer:
    """Serves a bound `HTTPServer` on a daemon thread named `name`; `stop()` closes the socket.

    Binding is the caller's job (constructing the `HTTPServer`), so that a port in use is an
    `OSError` in the caller's thread rather than a dead serving thread.
    """

    def __init__(self, httpd: HTTPServer, name: str) -> None:
        self._httpd = httpd
        self._thread = threading.Thread(target=httpd.serve_forever, name=name, daemon=True)

    @property
    def host(self) -> str:
        return str(self._httpd.server_address[0])

    @property
    def port(self) -> int:
        return int(self._httpd.server_address[1])

    @property
    def url(self) -> str:
        return f"http://{self.host}:{self.port}"

    def start(self) -> Self:
        self._thread.start()
        return self

    def stop(self) -> None:
        self._httpd.shutdown()
        self._httpd.server_close()
        self._thread.join(timeout=5)

    def __enter__(self) -> Self:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.stop()


def send_json(
    handler: BaseHTTPRequestHandler,
    status: int,
    body: object,
    *,
    content_type: str = "application/json",
    headers: Mapping[str, str] | None = None,
) -> None:
    """Answer `handler`'s request with `body` as JSON, its length stated."""
    data = json.dumps(body).encode("utf-8")
    handler.send_response(status)
    handler.send_header("Content-Type", content_type)
    handler.send_header("Content-Length", str(len(data)))
    for name, value in (headers or {}).items():
        handler.send_header(name, value)
    handler.end_headers()
    handler.wfile.write(data)
