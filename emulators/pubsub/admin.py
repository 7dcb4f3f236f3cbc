"""The admin HTTP endpoint: reset, stats, fault injection, the issuer's signing certs, and the
subscriptions' oldest unacked publish times (for the Monitoring emulator)."""

from __future__ import annotations

import json
import logging
import socket
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any, Protocol

from emulators.http_server import BackgroundHTTPServer, send_json
from emulators.pubsub.exceptions import PubsubEmulatorError

logger = logging.getLogger(__name__)

# Subscription path -> the publish time (epoch seconds) of its oldest unacked message, or null:
# what emulators/monitoring samples for `subscription/oldest_unacked_message_age`.
OLDEST_UNACKED_PATH = "/subscriptions/oldest-unacked"


class AdminTarget(Protocol):
    def stats(self) -> dict[str, Any]: ...
    def clear_stats(self) -> None: ...
    def reset(self) -> None: ...
    def inject_fault(
        self, method: str, status: str | None = None, count: int = 1, delay_s: float = 0.0
    ) -> None: ...
    def clear_faults(self) -> None: ...
    def faults(self) -> list[dict[str, object]]: ...
    def certs(self) -> dict[str, str]: ...
    def oldest_unacked_publish_times(self) -> dict[str, float | None]: ...


class AdminServer(BackgroundHTTPServer):
    """A small threaded HTTP server on its own port, serving one `AdminTarget`."""

    def __init__(self, host: str, port: int, target: AdminTarget) -> None:
        handler = type("_BoundAdminHandler", (_AdminHandler,), {"target": target})
        server_class = _IPv6Server if ":" in host else ThreadingHTTPServer
        httpd = server_class((host, port), handler)
        httpd.daemon_threads = True
        super().__init__(httpd, "pubsub-admin")


class _IPv6Server(ThreadingHTTPServer):
    address_family = socket.AF_INET6


class _AdminHandler(BaseHTTPRequestHandler):
    target: AdminTarget

    def do_GET(self) -> None:
        if self.path == "/stats":
            self._send(200, self.target.stats())
        elif self.path == "/faults":
            self._send(200, {"faults": self.target.faults()})
        elif self.path == OLDEST_UNACKED_PATH:
            self._send(200, {"subscriptions": self.target.oldest_unacked_publish_times()})
        elif self.path == "/oauth2/v1/certs":
            self._send(200, self.target.certs())
        elif self.path in ("/", "/healthz"):
            self._send(200, {"status": "ok"})
        else:
            self._send(404, {"error": f"no such admin path: {self.path}"})

    def do_POST(self) -> None:
        if self.path == "/reset":
            self.target.reset()
            self._send(200, {"reset": True})
        elif self.path == "/faults":
            self._add_fault()
        else:
            self._send(404, {"error": f"no such admin path: {self.path}"})

    def do_DELETE(self) -> None:
        if self.path == "/reset":
            self.target.reset()
            self._send(200, {"reset": True})
        elif self.path == "/stats":
            self.target.clear_stats()
            self._send(200, {"cleared": True})
        elif self.path == "/faults":
            self.target.clear_faults()
            self._send(200, {"cleared": True})
        else:
            self._send(404, {"error": f"no such admin path: {self.path}"})

    def _add_fault(self) -> None:
        try:
            length = int(self.headers.get("Content-Length") or 0)
            body = json.loads(self.rfile.read(length) or b"{}")
            if not isinstance(body, dict):
                raise ValueError("the body must be a JSON object")
            self.target.inject_fault(
                method=str(body.get("method", "")),
                status=body.get("status"),
                count=int(body.get("count", 1)),
                delay_s=float(body.get("delay_s", 0.0)),
            )
        except (ValueError, TypeError, PubsubEmulatorError) as exc:
            self._send(400, {"error": str(exc)})
            return
        self._send(200, {"faults": self.target.faults()})

    def _send(self, status: int, payload: object) -> None:
        send_json(self, status, payload)

    def log_message(self, format: str, *args: Any) -> None:
        logger.debug("admin: " + format, *args)
