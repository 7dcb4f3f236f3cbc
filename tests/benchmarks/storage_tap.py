"""What one worker instance asks of Cloud Storage: an HTTP proxy before the storage emulator.

The instance's STORAGE_EMULATOR_HOST points here. Everything is forwarded as it came (the raw
request URI, so an object name's %2F stays encoded); the tap records each object read (the
generation answered) and each object delete (the `ifGenerationMatch` it carried, the status it
got), and can catch its instance in the middle of an action: armed (`hold_next_delete`), the
next object delete calls `on_hold(name)` (which sends the instance SIGSTOP) and is held until
`release()`, then forwarded. That is the window of issue 24's finding 8: the action checked its
deadline, read the generation and sent the delete, and the delete reaches Cloud Storage only
after the instance lost its lease (a process frozen just before the send, or a request slow on
its way, look the same to the bucket). While the storage emulator is down (SIGKILL, restart)
the tap answers 503, as a Cloud Storage outage would; `Outages` answers 503 to the deletes of the
first deliveries of chosen objects (a transient failure the action sees).

Not a benchmark itself (no `bench_` prefix).
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING
from urllib.parse import parse_qs, unquote, urlsplit

import requests
from werkzeug.wrappers import Request, Response

from tests.benchmarks.http_tap import HttpTap, relayed

if TYPE_CHECKING:
    from _typeshed.wsgi import StartResponse, WSGIEnvironment


@dataclass(frozen=True)
class Delete:
    name: str
    if_generation_match: str | None
    status: int
    at: float  # time.monotonic() when answered


@dataclass
class TapLog:
    reads: list[tuple[str, str]] = field(default_factory=list)  # (object, generation)
    deletes: list[Delete] = field(default_factory=list)
    in_flight: int = 0
    unreachable: int = 0  # requests answered 503 because the emulator was down


# The action's storage client retries a call for at most min(20 s, lease / 2)
# (services/worker/media.py `storage_for`): 5 s at the drain's test lease. A delete after a
# longer quiet spell, with no read since, comes from another delivery.
DELIVERY_GAP_S = 6.0


class Outages:
    """Every delete of a named object answers 503 during its first `deliveries` deliveries,
    so the action's own client retries give up and the delivery ends in a transient error;
    shared by the taps. A delivery is counted at its read of the generation, or, when it read
    none (the generation was written ahead by an earlier delivery: issue 33 finding 1), at its
    first delete after DELIVERY_GAP_S of quiet: counted by reads alone, such an object would
    answer 503 for ever."""

    def __init__(self, plan: dict[str, int]) -> None:
        self._plan = dict(plan)
        self._deliveries: dict[str, int] = {}
        self._read_since: set[str] = set()  # objects read since their last delete
        self._last_delete: dict[str, float] = {}
        self._lock = threading.Lock()
        self.answered = 0

    def planned(self, name: str) -> bool:
        return name in self._plan

    def note_read(self, name: str) -> None:
        with self._lock:
            self._deliveries[name] = self._deliveries.get(name, 0) + 1
            self._read_since.add(name)

    def take(self, name: str) -> bool:
        with self._lock:
            if name not in self._plan:
                return False
            now = time.monotonic()
            last = self._last_delete.get(name)
            if last is not None and now - last > DELIVERY_GAP_S and name not in self._read_since:
                self._deliveries[name] = self._deliveries.get(name, 0) + 1
            self._read_since.discard(name)
            self._last_delete[name] = now
            if self._deliveries.get(name, 0) > self._plan[name]:
                return False
            self.answered += 1
            return True


class StorageTap(HttpTap):
    def __init__(self, upstream: str, label: str, outages: Outages | None = None) -> None:
        super().__init__(upstream)
        self.label = label
        self.outages = outages or Outages({})
        self.log = TapLog()
        self._lock = threading.Lock()
        self._on_hold: Callable[[str], None] | None = None
        self._released = threading.Event()
        self.held: str | None = None  # the object of the delete held, once one was

    def hold_next_delete(self, on_hold: Callable[[str], None]) -> None:
        """At the next object delete (of an object without planned outages): `on_hold(object)`,
        then hold it until `release()`."""
        with self._lock:
            self._on_hold = on_hold

    def release(self) -> None:
        self._released.set()

    def __call__(self, environ: WSGIEnvironment, start_response: StartResponse) -> Iterable[bytes]:
        with self._lock:
            self.log.in_flight += 1
        try:
            return self._answer(environ)(environ, start_response)
        finally:
            with self._lock:
                self.log.in_flight -= 1

    def _answer(self, environ: WSGIEnvironment) -> Response:
        request = Request(environ)
        raw = str(environ.get("RAW_URI") or environ.get("REQUEST_URI") or request.full_path)
        name = _object_of(raw)
        if (
            name is not None
            and request.method == "DELETE"
            and self._on_hold is not None
            and not self.outages.planned(name)  # held, then forwarded: it must reach the bucket
        ):
            with self._lock:
                on_hold, self._on_hold = self._on_hold, None
            if on_hold is not None:
                self.held = name
                on_hold(name)
                self._released.wait(timeout=900)
        if name is not None and request.method == "DELETE" and self.outages.take(name):
            with self._lock:
                self.log.deletes.append(Delete(name, None, 503, time.monotonic()))
            return _unavailable("injected: storage unavailable")
        try:
            upstream = self.forward(request, raw, timeout_s=30)
        except requests.RequestException:
            with self._lock:
                self.log.unreachable += 1
            return _unavailable("storage emulator unreachable")
        response = relayed(upstream)
        if name is None:
            return response
        if request.method == "DELETE":
            match = parse_qs(urlsplit(raw).query).get("ifGenerationMatch", [None])[0]
            with self._lock:
                self.log.deletes.append(Delete(name, match, upstream.status_code, time.monotonic()))
        elif request.method == "GET" and upstream.status_code == 200:
            generation = str(upstream.json().get("generation", ""))
            with self._lock:
                self.log.reads.append((name, generation))
            self.outages.note_read(name)
        return response


def _object_of(raw_uri: str) -> str | None:
    """The object name of a JSON API object request (`/storage/v1/b/B/o/NAME`), else None."""
    path = urlsplit(raw_uri).path
    marker = "/o/"
    if not path.startswith("/storage/v1/b/") or marker not in path:
        return None
    return unquote(path.split(marker, 1)[1])


def _unavailable(message: str) -> Response:
    body = f'{{"error": {{"code": 503, "message": "{message}"}}}}'
    return Response(body, 503, content_type="application/json")
