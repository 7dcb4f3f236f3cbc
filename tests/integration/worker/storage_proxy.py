"""A Cloud Storage outage on demand: an HTTP proxy in front of the storage emulator that answers
the next N object deletions with a status of the test's choosing, and forwards the rest."""

from __future__ import annotations

import threading
from collections import Counter
from collections.abc import Iterable, Iterator
from contextlib import contextmanager
from typing import TYPE_CHECKING

import google.cloud.storage as storage
import requests
from google.api_core.client_options import ClientOptions
from google.auth.credentials import AnonymousCredentials
from werkzeug.serving import make_server
from werkzeug.wrappers import Request, Response

if TYPE_CHECKING:
    from _typeshed.wsgi import StartResponse, WSGIEnvironment

_HOP_BY_HOP = {"connection", "keep-alive", "transfer-encoding", "content-encoding", "host"}


class FlakyStorage:
    def __init__(self, upstream: str) -> None:
        self.upstream = upstream.rstrip("/")
        self.url = ""  # where the proxy listens, once started
        self.fail_deletes = 0
        self.status = 503
        self.answered: Counter[int] = Counter()
        self._lock = threading.Lock()
        self._session = requests.Session()

    def _should_fail(self, request: Request) -> bool:
        with self._lock:
            if request.method == "DELETE" and self.fail_deletes > 0:
                self.fail_deletes -= 1
                return True
            return False

    def __call__(self, environ: WSGIEnvironment, start_response: StartResponse) -> Iterable[bytes]:
        return self._answer(Request(environ))(environ, start_response)

    def _answer(self, request: Request) -> Response:
        if self._should_fail(request):
            response = Response(
                f'{{"error": {{"code": {self.status}, "message": "injected outage"}}}}',
                self.status,
                content_type="application/json",
            )
        else:
            upstream = self._session.request(
                request.method,
                self.upstream + request.full_path.rstrip("?"),
                data=request.get_data(),
                headers={k: v for k, v in request.headers.items() if k.lower() not in _HOP_BY_HOP},
                timeout=30,
            )
            headers = [(k, v) for k, v in upstream.headers.items() if k.lower() not in _HOP_BY_HOP]
            response = Response(upstream.content, upstream.status_code, headers=headers)
        with self._lock:
            self.answered[response.status_code] += 1
        return response

    def client(self, url: str) -> storage.Client:
        return storage.Client(
            project="p",
            credentials=AnonymousCredentials(),
            client_options=ClientOptions(api_endpoint=url),
        )


@contextmanager
def flaky_storage(upstream: str) -> Iterator[tuple[FlakyStorage, storage.Client]]:
    proxy = FlakyStorage(upstream)
    server = make_server("127.0.0.1", 0, proxy, threaded=True)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    proxy.url = f"http://127.0.0.1:{server.server_port}"
    try:
        yield proxy, proxy.client(proxy.url)
    finally:
        server.shutdown()
        thread.join(timeout=5)
