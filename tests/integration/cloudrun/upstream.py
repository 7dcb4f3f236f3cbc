"""A stand-in container for the front-end tests: records what reaches it, answers JSON.

`POST /slow?s=N` sleeps N seconds before answering (and counts the completion afterwards), and
`/hold` blocks until `release()`: both let tests see the timeout and the concurrency limit.
`/hop` answers with a field its own `Connection` header names.
"""

from __future__ import annotations

import json
import threading
import time
import urllib.parse
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

from emulators.http_server import BackgroundHTTPServer


@dataclass
class Seen:
    requests: list[dict[str, Any]] = field(default_factory=list)
    completed: int = 0
    in_flight: int = 0
    max_in_flight: int = 0
    held: threading.Event = field(default_factory=threading.Event)
    lock: threading.Lock = field(default_factory=threading.Lock)


class _Server(ThreadingHTTPServer):
    request_queue_size = 1024  # a container behind the front end takes its bursts too


class Upstream(BackgroundHTTPServer):
    def __init__(self) -> None:
        seen = Seen()

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def do_POST(self) -> None:
                body = self.rfile.read(int(self.headers.get("Content-Length") or 0))
                with seen.lock:
                    seen.requests.append(
                        {
                            "path": self.requestline.split()[1],
                            "headers": dict(self.headers.items()),
                            "body": body,
                        }
                    )
                    seen.in_flight += 1
                    seen.max_in_flight = max(seen.max_in_flight, seen.in_flight)
                try:
                    extra = self._work()
                finally:
                    with seen.lock:
                        seen.in_flight -= 1
                        seen.completed += 1
                data = json.dumps({"ok": True}).encode()
                try:
                    self.send_response(200)
                    self.send_header("Content-Type", "application/json")
                    self.send_header("Content-Length", str(len(data)))
                    for name, value in extra:
                        self.send_header(name, value)
                    self.end_headers()
                    self.wfile.write(data)
                except OSError:
                    pass  # the front end stopped waiting (a timeout); the work is done anyway

            do_GET = do_POST

            def _work(self) -> list[tuple[str, str]]:
                """Extra response headers (`/hop`: one its `Connection` names)."""
                parts = urllib.parse.urlsplit(self.path)
                if parts.path == "/slow":
                    time.sleep(float(urllib.parse.parse_qs(parts.query)["s"][0]))
                elif parts.path == "/hold":
                    seen.held.wait(30)
                elif parts.path == "/hop":
                    return [("Connection", "X-Internal"), ("X-Internal", "1"), ("X-Kept", "1")]
                return []

            def log_message(self, format: str, *args: Any) -> None:
                pass

        httpd = _Server(("127.0.0.1", 0), Handler)
        httpd.daemon_threads = True
        super().__init__(httpd, "upstream")
        self.seen = seen

    def release(self) -> None:
        self.seen.held.set()

    def last_headers(self) -> dict[str, str]:
        with self.seen.lock:
            return dict(self.seen.requests[-1]["headers"])
