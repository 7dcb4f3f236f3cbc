"""What a worker instance answers Pub/Sub: an HTTP proxy between the push and its front end.

The push subscription delivers here; each request is forwarded as it came, and the status the
instance (behind its local Cloud Run front end) answered is counted. Pub/Sub push treats 102,
200, 201, 202 and 204 as an acknowledgement and anything else as a nack
(https://cloud.google.com/pubsub/docs/push#receive_push); the worker's contract is narrower:
2xx when done, 429 or 503 only to ask for a redelivery (docs/worker.md). A request that gets no
answer within the push deadline (a frozen instance) is counted as `no answer`, not as a status.

Not a benchmark itself (no `bench_` prefix).
"""

from __future__ import annotations

import threading
from collections import Counter
from collections.abc import Iterable
from typing import TYPE_CHECKING

import requests
from werkzeug.wrappers import Request, Response

from tests.benchmarks.http_tap import HttpTap, relayed

if TYPE_CHECKING:
    from _typeshed.wsgi import StartResponse, WSGIEnvironment

NO_ANSWER = "no answer"


def within_contract(status: int | str) -> bool:
    """2xx (done), 429 or 503 (redeliver): the only answers the worker may give."""
    return isinstance(status, int) and (200 <= status < 300 or status in (429, 503))


class AnswerTap(HttpTap):
    """`start()` listens on 127.0.0.1 and returns its URL; `answers` counts each status."""

    def __init__(self, upstream: str, timeout_s: float) -> None:
        super().__init__(upstream)
        self.timeout_s = timeout_s
        self.answers: Counter[int | str] = Counter()
        self._lock = threading.Lock()

    def __call__(self, environ: WSGIEnvironment, start_response: StartResponse) -> Iterable[bytes]:
        request = Request(environ)
        raw = str(environ.get("RAW_URI") or environ.get("REQUEST_URI") or request.full_path)
        try:
            upstream = self.forward(request, raw, self.timeout_s)
        except requests.RequestException:
            with self._lock:
                self.answers[NO_ANSWER] += 1
            return Response(b"", 504)(environ, start_response)
        with self._lock:
            self.answers[upstream.status_code] += 1
        return relayed(upstream)(environ, start_response)
