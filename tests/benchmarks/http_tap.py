"""The part every HTTP tap of the benchmarks shares: a threaded server on 127.0.0.1 that the
tap's WSGI `__call__` answers, and the forwarding of a request to the tap's upstream as it came
(the raw request URI, so an encoded %2F stays encoded; hop-by-hop headers left out).

Not a benchmark itself (no `bench_` prefix).
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Iterable
from typing import TYPE_CHECKING, Any

import requests
from werkzeug.serving import make_server
from werkzeug.wrappers import Request, Response

if TYPE_CHECKING:
    from _typeshed.wsgi import StartResponse, WSGIEnvironment

HOP_BY_HOP = {"connection", "keep-alive", "transfer-encoding", "content-encoding", "host"}


class HttpTap:
    """`start()` listens on 127.0.0.1 and returns the tap's URL; subclasses answer requests."""

    def __init__(self, upstream: str) -> None:
        self.upstream = upstream.rstrip("/")
        self.url = ""
        self._session = requests.Session()
        self._server: Any = None
        self._thread: threading.Thread | None = None

    def start(self) -> str:
        logging.getLogger("werkzeug").setLevel(logging.WARNING)
        self._server = make_server("127.0.0.1", 0, self, threaded=True)
        self._thread = threading.Thread(target=self._server.serve_forever, daemon=True)
        self._thread.start()
        self.url = f"http://127.0.0.1:{self._server.server_port}"
        return self.url

    def stop(self) -> None:
        if self._server is not None:
            self._server.shutdown()
            self._server.server_close()
        if self._thread is not None:
            self._thread.join(timeout=5)
        self._session.close()

    def __call__(self, environ: WSGIEnvironment, start_response: StartResponse) -> Iterable[bytes]:
        raise NotImplementedError  # each tap answers its own way

    def forward(self, request: Request, raw_uri: str, timeout_s: float) -> requests.Response:
        """`request` sent on to the upstream; raises requests.RequestException."""
        return self._session.request(
            request.method,
            self.upstream + raw_uri,
            data=request.get_data(),
            headers={k: v for k, v in request.headers.items() if k.lower() not in HOP_BY_HOP},
            timeout=timeout_s,
        )


def relayed(upstream: requests.Response) -> Response:
    """The upstream's answer, as the tap's."""
    headers = [(k, v) for k, v in upstream.headers.items() if k.lower() not in HOP_BY_HOP]
    return Response(upstream.content, upstream.status_code, headers=headers)
