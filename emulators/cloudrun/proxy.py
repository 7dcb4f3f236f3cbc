"""The local Cloud Run front end: one service URL in front of one container.

For each request, in Cloud Run's order: the request line and headers within 64 KiB and the
body within 32 MiB (else 413), framed strictly by RFC 9112 (`framing.py`: anything ambiguous is
400 and reaches nothing); the IAM invoker check (`invoker.py`; skipped when the service is
deployed with `invoker_iam_disabled`); a free slot of the container concurrency, waited for at
most Cloud Run's pending time (10 s, or 3.5 times the container's start-up time if longer;
then 429: https://cloud.google.com/run/docs/about-instance-autoscaling); then the request goes
to the container with the checked token's signature replaced by `SIGNATURE_REMOVED_BY_GOOGLE`,
both trace headers (`traceparent`, `X-Cloud-Trace-Context`: `tracecontext.py`), and without
the hop-by-hop fields, including every field its `Connection` header names (RFC 9110 §7.6.1;
the same is done to the container's answer). A container slower than the request timeout
leaves the caller with 504 while its own thread runs on, as on Cloud Run
(https://cloud.google.com/run/docs/configuring/request-timeout).

Connections queue in a listen backlog of `ACCEPT_BACKLOG` (Python's default of 5 reset bursts
that Google's front end takes), and each gets its own thread, so a burst waits for a slot in
the concurrency queue above, where Cloud Run's rule applies, not in the kernel.

The request target must be origin-form (`/path?query`, RFC 9112 §3.2.1) of visible ASCII with
well-formed percent-encodings; absolute-form (`http://host/path`) is accepted and forwarded as
its path (§3.2.2); asterisk-form (`*`) and anything else is 400. The path is forwarded exactly
as sent (Python's server would fold a leading `//` into `/`; Google's front end does not).
Refusals of the front end itself are Google's HTML error pages.

One simplification: each connection carries one request (`Connection: close`), where Google's
front end keeps connections alive; callers reconnect, and what a service sees is the same.
"""

from __future__ import annotations

import contextlib
import http.client
import logging
import re
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
    ACCEPT_BACKLOG,
    DEFAULT_CONCURRENCY,
    DEFAULT_TIMEOUT_S,
    MAX_HEADER_BYTES,
    MAX_REQUEST_BYTES,
    NO_INSTANCE_BODY,
    PENDING_WAIT_FLOOR_S,
    TIMEOUT_BODY,
    bad_request_page,
    error_page,
    forbidden_page,
    request_timeout_page,
    too_large_page,
    unauthorized_page,
    unavailable_page,
)
from emulators.cloudrun.framing import Malformed, TooLarge, read_body
from emulators.cloudrun.invoker import InvokerCheck, Refused, strip_signature
from emulators.cloudrun.tracecontext import completed as trace_headers
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
_CLIENT_READ_TIMEOUT_S = 30.0
# RFC 9110 §5.1: a field name is a token; §5.5: a value has no CR, LF or NUL (nor other
# controls but HTAB, which obs-text aside is what field-vchar allows).
_FIELD_NAME = re.compile(r"[!#$%&'*+\-.^_`|~0-9A-Za-z]+")
_FIELD_VALUE_BAD = re.compile(r"[\x00-\x08\x0a-\x1f\x7f]")
# origin-form: absolute-path [ "?" query ] of pchars, "/" and "?" (RFC 9112 §3.2.1, RFC 3986).
_ORIGIN_FORM = re.compile(r"/[A-Za-z0-9\-._~!$&'()*+,;=:@/?%]*")
_BAD_PERCENT = re.compile(r"%(?![0-9A-Fa-f]{2})")


@dataclass(frozen=True)
class ServiceConfig:
    """How one service is deployed: name, limits, and its invoker check (None: IAM disabled)."""

    name: str
    invoker_check: InvokerCheck | None
    timeout_s: float = DEFAULT_TIMEOUT_S
    concurrency: int = DEFAULT_CONCURRENCY
    max_header_bytes: int = MAX_HEADER_BYTES
    max_request_bytes: int = MAX_REQUEST_BYTES
    # How long a request waits for a free concurrency slot before 429 (contract.pending_wait_s).
    max_pending_s: float = PENDING_WAIT_FLOOR_S


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

    httpd = _Server((host, port), Handler)
    httpd.daemon_threads = True
    if callable(config):
        config = config(f"http://{host}:{httpd.server_address[1]}")
    front = FrontEnd(httpd, config, upstream)
    holder.append(front)
    return front.start()


class _Server(ThreadingHTTPServer):
    request_queue_size = ACCEPT_BACKLOG


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
        self._header_budget = budget
        stream, self.rfile = self.rfile, budget  # type: ignore[assignment]
        try:
            parsed = super().parse_request()
        finally:
            self.rfile = stream
        if parsed and budget.exceeded:
            self._refuse_too_large("request line and headers over the limit")
            return False
        if not parsed:
            return False
        problem = self._method_problem() or self._target_problem() or self._field_problem()
        if problem is not None:
            self._refuse(HTTPStatus.BAD_REQUEST, problem)
            return False
        return True

    def __getattr__(self, name: str) -> Any:
        # Any method that is a token reaches the container, which answers what it does not
        # serve (405 from the services); Python's server would answer 501 itself.
        if name.startswith("do_") and _FIELD_NAME.fullmatch(name[3:]):
            return self.do_GET
        raise AttributeError(name)

    def _target_problem(self) -> str | None:
        """Why the request target cannot be forwarded, or None; sets `self.path` to it as sent
        (origin-form), undoing Python's folding of a leading `//`."""
        words = self.requestline.split()
        target = words[1] if len(words) >= 2 else ""
        if re.match(r"(?i)https?://", target):
            # absolute-form: the path (and query) is what the container sees.
            parts = urllib.parse.urlsplit(target)
            target = (parts.path or "/") + (f"?{parts.query}" if parts.query else "")
        if not target.startswith("/"):
            return f"request target {target[:60]!r} is not origin-form"
        if not _ORIGIN_FORM.fullmatch(target) or _BAD_PERCENT.search(target):
            return "request target has characters outside RFC 3986 or a bad %-encoding"
        self.path = target
        return None

    def _method_problem(self) -> str | None:
        if self.request_version == "HTTP/0.9":
            return "HTTP/0.9 request line"
        if not _FIELD_NAME.fullmatch(self.command or ""):
            return "the method is not a token (RFC 9110 §9.1)"
        return None

    def _field_problem(self) -> str | None:
        if self.headers.defects:
            return "malformed header section"
        for name, value in self.headers.items():
            if not _FIELD_NAME.fullmatch(name):
                return f"header field name {name[:40]!r} is not a token"
            if _FIELD_VALUE_BAD.search(value):
                return f"header field {name[:40]!r} has a control character"
        return None

    def send_error(self, code: int, message: str | None = None, explain: str | None = None) -> None:
        """Python's own refusals (a bad request line, too many fields), as Google's page. A
        request line of another HTTP version (505 in Python) is a request this HTTP/1.1 front
        end cannot read: 400, as for any other malformed request line."""
        status = HTTPStatus(code)
        if status >= HTTPStatus.INTERNAL_SERVER_ERROR:
            status = HTTPStatus.BAD_REQUEST
        if status == HTTPStatus.REQUEST_URI_TOO_LONG:
            # A request line over 64 KiB: over Cloud Run's request line + headers limit.
            status = HTTPStatus.REQUEST_ENTITY_TOO_LARGE
        self._refuse(status, message or status.phrase)

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
            body = read_body(
                self.rfile,  # type: ignore[arg-type]
                self.headers.get_all("Transfer-Encoding") or [],
                self.headers.get_all("Content-Length") or [],
                front.config.max_request_bytes,
                max(0, self._header_budget.remaining),
            )
        except TooLarge as exc:
            self._refuse_too_large(str(exc))
            return
        except Malformed as exc:
            self._refuse(exc.status, f"malformed body: {exc}")
            return
        except TimeoutError:
            self._refuse(HTTPStatus.REQUEST_TIMEOUT, "the client stopped sending its body")
            return
        headers = self._forwarded_headers(front)
        if headers is None:
            return
        deadline = started + front.config.timeout_s
        if not front.slots.acquire(blocking=False):
            front.counters.count("waited")
            wait = min(front.config.max_pending_s, deadline - time.monotonic())
            if not front.slots.acquire(timeout=max(0.0, wait)):
                front.counters.count("refused", HTTPStatus.TOO_MANY_REQUESTS)
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
        dropped = _connection_fields(self.headers.get_all("Connection") or [])
        headers: list[tuple[str, str]] = []
        for name, value in self.headers.items():
            lowered = name.lower()
            if lowered in dropped or lowered == "content-length":
                continue
            if stripped is not None and lowered == stripped.lower():
                value = strip_signature(value)
            headers.append((name, value))
        traces = trace_headers(dict(headers))
        replaced = {name.lower() for name in traces}
        return [(n, v) for n, v in headers if n.lower() not in replaced] + list(traces.items())

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
        dropped = _connection_fields(response.headers.get_all("Connection") or [])
        for name, value in response.getheaders():
            if name.lower() not in dropped and name.lower() != "content-length":
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

    def _refuse(self, status: HTTPStatus, why: str) -> None:
        """A request the front end cannot read as HTTP/1.1: Google's page, connection closed
        (what follows on it cannot be trusted to start a request)."""
        pages = {
            HTTPStatus.BAD_REQUEST: bad_request_page,
            HTTPStatus.REQUEST_TIMEOUT: request_timeout_page,
            HTTPStatus.REQUEST_ENTITY_TOO_LARGE: too_large_page,
        }
        page = pages.get(status)
        body = page() if page else error_page(status, status.phrase, status.description)
        self.front_end().counters.count("refused", status)
        self.close_connection = True
        self._answer(status, body, why, html=True)

    def _refuse_too_large(self, why: str) -> None:
        self.front_end().counters.count("refused", HTTPStatus.REQUEST_ENTITY_TOO_LARGE)
        self.close_connection = True
        self._answer(HTTPStatus.REQUEST_ENTITY_TOO_LARGE, too_large_page(), why, html=True)

    def _answer(self, status: int, body: bytes, why: str, *, html: bool = False) -> None:
        logger.warning(
            "%s %s %s → %d: %s",
            self.front_end().config.name,
            self.command,
            getattr(self, "path", ""),
            status,
            why,
        )
        self._answered = True
        if not hasattr(self, "command") or self.command is None:
            self.command = "GET"  # refused before the request line was read
        if getattr(self, "request_version", "HTTP/1.1") == "HTTP/0.9":
            # Google's front end does not speak HTTP/0.9: its refusal is an HTTP/1.1 answer.
            self.request_version = "HTTP/1.1"
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


def _connection_fields(connection: list[str]) -> frozenset[str]:
    """The fields a message's sender meant for this hop only: the fixed hop-by-hop set and
    every field its `Connection` header names (RFC 9110 §7.6.1), lowercased."""
    named = {token.strip().lower() for value in connection for token in value.split(",")}
    return _HOP_BY_HOP | {name for name in named if name}


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
