"""The local Cloud Run front end: one service URL in front of one container.

For each request, in Cloud Run's order: the request line and headers within 64 KiB and the
body within 32 MiB (else 413); the IAM invoker check (`invoker.py`; skipped when the service is
deployed with `invoker_iam_disabled`); a free slot of the container concurrency (requests above
it wait); then the request goes to the container with the checked token's signature replaced by
`SIGNATURE_REMOVED_BY_GOOGLE` and `X-Cloud-Trace-Context` added when absent. A container slower
than the request timeout leaves the caller with 504 while its own thread runs on, as on Cloud
Run (https://cloud.google.com/run/docs/configuring/request-timeout).

One simplification: each connection carries one request (`Connection: close`), where Google's
front end keeps connections alive; callers reconnect, and what a service sees is the same.
"""

from __future__ import annotations

import contextlib
import http.client
import logging
import secrets
import socket
import threading
import time
import urllib.parse
from collections.abc import Callable
from dataclasses import dataclass, field
from http import HTTPStatus
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any, BinaryIO

from emulators.cloudrun.contract import (
    DEFAULT_CONCURRENCY,
    DEFAULT_TIMEOUT_S,
    MAX_HEADER_BYTES,
    MAX_REQUEST_BYTES,
    NO_INSTANCE_BODY,
    TIMEOUT_BODY,
    TRACE_HEADER,
    forbidden_page,
    too_large_page,
    unauthorized_page,
    unavailable_page,
)
from emulators.cloudrun.invoker import InvokerCheck, Refused, strip_signature
from emulators.http_server import BackgroundHTTPServer

logger = logging.getLogger(__name__)

# Not forwarded: they describe one connection, not the request (RFC 9110 section 7.6.1).
_HOP_BY_HOP = frozenset(
    {
        "connection",
        "keep-alive",
        "proxy-authenticate",
        "proxy-authorization",
        "proxy-connection",
        "te",
        "trailer",
        "transfer-encoding",
        "upgrade",
    }
)
_CHUNK_LINE_MAX = 1024
_CLIENT_READ_TIMEOUT_S = 30.0


@dataclass(frozen=True)
class ServiceConfig:
    """How one service is deployed: name, limits, and its invoker check (None: IAM disabled)."""

    name: str
    invoker_check: InvokerCheck | None
    timeout_s: float = DEFAULT_TIMEOUT_S
    concurrency: int = DEFAULT_CONCURRENCY
    max_header_bytes: int = MAX_HEADER_BYTES
    max_request_bytes: int = MAX_REQUEST_BYTES


@dataclass
class Counters:
    """What the front end did, for tests and the stop line."""

    forwarded: int = 0
    refused: dict[int, int] = field(default_factory=dict)
    timed_out: int = 0
    waited: int = 0
    _lock: threading.Lock = field(default_factory=threading.Lock, repr=False)

    def count(self, what: str, status: int | None = None) -> None:
        with self._lock:
            if what == "refused" and status is not None:
                self.refused[status] = self.refused.get(status, 0) + 1
            else:
                setattr(self, what, getattr(self, what) + 1)


class FrontEnd(BackgroundHTTPServer):
    """A running front end: `url` is the service URL callers use."""

    def __init__(self, httpd: ThreadingHTTPServer, config: ServiceConfig, upstream: str) -> None:
        super().__init__(httpd, f"cloudrun-{config.name}")
        # A short poll, so stopping (once per test in the integration tiers) takes no 0.5 s.
        self._thread = threading.Thread(
            target=httpd.serve_forever, args=(0.05,), name=f"cloudrun-{config.name}", daemon=True
        )
        self.config = config
        parts = urllib.parse.urlsplit(upstream)
        if parts.scheme != "http" or not parts.hostname or not parts.port:
            raise ValueError(f"upstream must be http://HOST:PORT; got {upstream!r}")
        self.upstream_host, self.upstream_port = parts.hostname, parts.port
        self.slots = threading.BoundedSemaphore(config.concurrency)
        self.counters = Counters()
        self._open: set[socket.socket] = set()
        self._open_lock = threading.Lock()

    def opened(self, connection: socket.socket) -> None:
        with self._open_lock:
            self._open.add(connection)

    def closed(self, connection: socket.socket) -> None:
        with self._open_lock:
            self._open.discard(connection)

    def stop(self) -> None:
        """Stop listening and end every open connection, as an instance going away does, so
        no handler thread is left waiting on a kept-alive connection."""
        super().stop()
        with self._open_lock:
            for connection in self._open:
                with contextlib.suppress(OSError):
                    connection.shutdown(socket.SHUT_RDWR)


def start(
    config: ServiceConfig | Callable[[str], ServiceConfig],
    upstream: str,
    host: str = "127.0.0.1",
    port: int = 0,
) -> FrontEnd:
    """Serve a front end on host:port (0: a free port) before `upstream`.

    `config` may be a function of the front end's own URL (known once bound), which the invoker
    check needs as its audience; it is built before the first request can arrive.
    """
    holder: list[FrontEnd] = []

    class Handler(_Handler):
        def front_end(self) -> FrontEnd:
            return holder[0]

    httpd = ThreadingHTTPServer((host, port), Handler)
    httpd.daemon_threads = True
    if callable(config):
        config = config(f"http://{host}:{httpd.server_address[1]}")
    front = FrontEnd(httpd, config, upstream)
    holder.append(front)
    return front.start()


class _HeaderBudget:
    """Reads header lines for `parse_headers`, ending them once `budget` bytes are spent."""

    def __init__(self, stream: BinaryIO, budget: int) -> None:
        self._stream = stream
        self.remaining = budget
        self.exceeded = False

    def readline(self, limit: int = -1) -> bytes:
        if self.exceeded:
            return b"\r\n"
        wanted = self.remaining + 1 if limit < 0 else min(limit, self.remaining + 1)
        line = self._stream.readline(wanted)
        self.remaining -= len(line)
        if self.remaining < 0:
            self.exceeded = True
            return b"\r\n"
        return line


class _TooLarge(Exception):
    pass


class _Handler(BaseHTTPRequestHandler):
    server_version = "Google Frontend"
    sys_version = ""
    protocol_version = "HTTP/1.1"
    # A client that stalls while sending its request is dropped, never waited on for ever.
    timeout = _CLIENT_READ_TIMEOUT_S

    def front_end(self) -> FrontEnd:
        raise NotImplementedError

    # -- parsing -----------------------------------------------------------------------------

    def parse_request(self) -> bool:
        line: bytes = getattr(self, "raw_requestline", b"")
        budget = _HeaderBudget(
            self.rfile,  # type: ignore[arg-type]
            self.front_end().config.max_header_bytes - len(line),
        )
        stream, self.rfile = self.rfile, budget  # type: ignore[assignment]
        try:
            parsed = super().parse_request()
        finally:
            self.rfile = stream
        if parsed and budget.exceeded:
            self._refuse_too_large("request line and headers over the limit")
            return False
        return parsed

    def setup(self) -> None:
        super().setup()
        self.front_end().opened(self.connection)

    def finish(self) -> None:
        self.front_end().closed(self.connection)
        super().finish()

    def handle_one_request(self) -> None:
        try:
            super().handle_one_request()
        except (ConnectionError, TimeoutError):
            self.close_connection = True

    def do_GET(self) -> None:
        self._answered = False
        try:
            self._serve()
        except (ConnectionError, TimeoutError):
            self.close_connection = True  # the caller went away; nothing to answer
        except Exception:
            # A bug here must cost one request, never the front end: one line, then a 500.
            logger.exception(
                "%s: unexpected error serving %s", self.front_end().config.name, self.path
            )
            if not self._answered:
                self._answer(
                    HTTPStatus.INTERNAL_SERVER_ERROR, b"Internal Server Error", "front end error"
                )

    do_POST = do_PUT = do_DELETE = do_PATCH = do_HEAD = do_OPTIONS = do_GET

    # -- the request path ----------------------------------------------------------------------

    def _serve(self) -> None:
        front = self.front_end()
        started = time.monotonic()
        try:
            body = self._read_body(front.config.max_request_bytes)
        except _TooLarge as exc:
            self._refuse_too_large(str(exc))
            return
        except ValueError as exc:
            self.close_connection = True
            self._answer(HTTPStatus.BAD_REQUEST, b"Bad Request", f"malformed body: {exc}")
            return
        headers = self._forwarded_headers(front)
        if headers is None:
            return
        deadline = started + front.config.timeout_s
        if not front.slots.acquire(blocking=False):
            front.counters.count("waited")
            if not front.slots.acquire(timeout=max(0.0, deadline - time.monotonic())):
                self._answer(
                    HTTPStatus.TOO_MANY_REQUESTS,
                    NO_INSTANCE_BODY,
                    "The request was aborted because there was no available instance.",
                )
                return
        try:
            self._forward(front, headers, body, deadline)
        finally:
            front.slots.release()

    def _read_body(self, limit: int) -> bytes:
        if "chunked" in self.headers.get("Transfer-Encoding", "").lower():
            return self._read_chunked(limit)
        raw = self.headers.get("Content-Length")
        if raw is None:
            return b""
        if not raw.strip().isdigit():
            raise ValueError("Content-Length is not a number")
        length = int(raw)
        if length > limit:
            raise _TooLarge(f"body of {length} bytes over the {limit}-byte limit")
        return self.rfile.read(length)

    def _read_chunked(self, limit: int) -> bytes:
        chunks: list[bytes] = []
        size = 0
        while True:
            line = self.rfile.readline(_CHUNK_LINE_MAX)
            length = int(line.split(b";", 1)[0].strip() or b"x", 16)
            if length == 0:
                while self.rfile.readline(_CHUNK_LINE_MAX) not in (b"\r\n", b"\n", b""):
                    pass  # trailers are dropped, as hop-by-hop
                return b"".join(chunks)
            size += length
            if size > limit:
                raise _TooLarge(f"chunked body over the {limit}-byte limit")
            chunks.append(self.rfile.read(length))
            self.rfile.readline(_CHUNK_LINE_MAX)

    def _forwarded_headers(self, front: FrontEnd) -> list[tuple[str, str]] | None:
        """What the container receives, or None once the invoker check has answered."""
        stripped: str | None = None
        check = front.config.invoker_check
        if check is not None:
            try:
                stripped, email = check.check(self.headers)  # type: ignore[arg-type]
            except Refused as refused:
                page = (unauthorized_page if refused.status == 401 else forbidden_page)(
                    self.path.split("?", 1)[0]
                )
                front.counters.count("refused", refused.status)
                self._answer(refused.status, page, refused.reason, html=True)
                return None
            logger.debug("%s invoked %s", email, front.config.name)
        headers: list[tuple[str, str]] = []
        for name, value in self.headers.items():
            lowered = name.lower()
            if lowered in _HOP_BY_HOP or lowered == "content-length":
                continue
            if stripped is not None and lowered == stripped.lower():
                value = strip_signature(value)
            headers.append((name, value))
        if self.headers.get(TRACE_HEADER) is None:
            headers.append((TRACE_HEADER, _new_trace_context()))
        return headers

    def _forward(
        self, front: FrontEnd, headers: list[tuple[str, str]], body: bytes, deadline: float
    ) -> None:
        remaining = deadline - time.monotonic()
        if remaining <= 0:
            self._timed_out(front)
            return
        connection = http.client.HTTPConnection(
            front.upstream_host, front.upstream_port, timeout=remaining
        )
        try:
            connection.putrequest(
                self.command, self.path, skip_host=True, skip_accept_encoding=True
            )
            for name, value in headers:
                connection.putheader(name, value)
            connection.putheader("Content-Length", str(len(body)))
            connection.endheaders(body)
            response = connection.getresponse()
            data = response.read()
        except TimeoutError:
            # The container's thread is not interrupted: it finishes, unseen by the caller.
            self._timed_out(front)
            return
        except (ConnectionError, http.client.HTTPException, OSError) as exc:
            self._answer(
                HTTPStatus.SERVICE_UNAVAILABLE, unavailable_page(), f"container: {exc}", html=True
            )
            return
        finally:
            connection.close()
        front.counters.count("forwarded")
        self._relay(response, data)

    def _relay(self, response: http.client.HTTPResponse, data: bytes) -> None:
        self.close_connection = True
        self._answered = True
        self.send_response_only(response.status, response.reason)
        for name, value in response.getheaders():
            if name.lower() not in _HOP_BY_HOP and name.lower() != "content-length":
                self.send_header(name, value)
        self.send_header("Content-Length", str(len(data)))
        self.send_header("Connection", "close")
        self.end_headers()
        if self.command != "HEAD":
            self.wfile.write(data)

    # -- answers of the front end itself ----------------------------------------------------

    def _timed_out(self, front: FrontEnd) -> None:
        front.counters.count("timed_out")
        self._answer(
            HTTPStatus.GATEWAY_TIMEOUT,
            TIMEOUT_BODY,
            f"The request has been terminated because it has reached the maximum request "
            f"timeout ({front.config.timeout_s:g} s).",
        )

    def _refuse_too_large(self, why: str) -> None:
        self.front_end().counters.count("refused", HTTPStatus.REQUEST_ENTITY_TOO_LARGE)
        self.close_connection = True
        self._answer(HTTPStatus.REQUEST_ENTITY_TOO_LARGE, too_large_page(), why, html=True)

    def _answer(self, status: int, body: bytes, why: str, *, html: bool = False) -> None:
        logger.warning(
            "%s %s %s → %d: %s", self.front_end().config.name, self.command, self.path, status, why
        )
        self._answered = True
        self.send_response_only(status)
        self.send_header("Content-Type", "text/html; charset=UTF-8" if html else "text/plain")
        self.send_header("Content-Length", str(len(body)))
        self.send_header("Date", self.date_time_string())
        self.close_connection = True
        self.send_header("Connection", "close")
        self.end_headers()
        if self.command != "HEAD":
            self.wfile.write(body)

    def log_message(self, format: str, *args: Any) -> None:
        logger.debug("%s %s", self.address_string(), format % args)


def _new_trace_context() -> str:
    """A fresh `TRACE_ID/SPAN_ID;o=1`, the shape Cloud Run adds."""
    return f"{secrets.token_hex(16)}/{secrets.randbits(63)};o=1"


def wait_until_listening(
    host: str, port: int, timeout_s: float, alive: Callable[[], bool] = lambda: True
) -> bool:
    """Whether host:port accepts a connection within `timeout_s` (Cloud Run's startup probe)."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline and alive():
        try:
            with socket.create_connection((host, port), timeout=1):
                return True
        except OSError:
            time.sleep(0.1)
    return False
