"""An HTTP server already bound, served from a daemon thread until stopped."""

from __future__ import annotations

import threading
from http.server import HTTPServer
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
