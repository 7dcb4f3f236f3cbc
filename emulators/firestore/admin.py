"""The emulator's admin HTTP API: reset, billing-style stats, fault injection."""

from __future__ import annotations

import json
import logging
import re
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import TYPE_CHECKING, Any
from urllib.parse import parse_qs, unquote, urlparse

from emulators.firestore.errors import EmulatorError
from emulators.firestore.indexes import IndexDefinitionError, from_entry
from emulators.http_server import BackgroundHTTPServer, send_json

if TYPE_CHECKING:
    from emulators.firestore.server import Emulator

logger = logging.getLogger(__name__)

_RESET = re.compile(r"^/emulator/v1/projects/([^/]+)/databases/([^/]+)/documents/?$")


class AdminServer(BackgroundHTTPServer):
    """A small threaded HTTP server bound to one emulator."""

    def __init__(self, emulator: Emulator, host: str, port: int) -> None:
        handler = type("BoundAdminHandler", (AdminHandler,), {"emulator": emulator})
        httpd = ThreadingHTTPServer((host, port), handler)
        httpd.daemon_threads = True
        super().__init__(httpd, "firestore-admin")


class AdminHandler(BaseHTTPRequestHandler):
    emulator: Emulator

    def log_message(self, format: str, *args: Any) -> None:
        logger.debug("admin: " + format, *args)

    def _send(self, status: int, body: Any) -> None:
        send_json(self, status, body)

    def _project(self) -> str | None:
        values = parse_qs(urlparse(self.path).query).get("project")
        return values[0] if values else None

    def _body(self) -> Any:
        length = int(self.headers.get("Content-Length") or 0)
        raw = self.rfile.read(length) if length else b"{}"
        return json.loads(raw or b"{}")

    def do_GET(self) -> None:
        path = urlparse(self.path).path
        if path == "/stats":
            self._send(200, self.emulator.stats(self._project()))
        elif path == "/":
            self._send(200, {"status": "ok"})
        else:
            self._send(404, {"error": f"no route {path}"})

    def do_DELETE(self) -> None:
        path = unquote(urlparse(self.path).path)  # "(default)" may arrive as %28default%29
        match = _RESET.match(path)
        if match:
            self.emulator.reset(match.group(1), match.group(2))
            self._send(200, {})
        elif path == "/stats":
            self.emulator.reset_stats(self._project())
            self._send(200, {})
        elif path == "/faults":
            self.emulator.clear_faults()
            self._send(200, {})
        else:
            self._send(404, {"error": f"no route {path}"})

    def do_POST(self) -> None:
        path = urlparse(self.path).path
        if path == "/indexes":
            self._add_index()
            return
        if path != "/faults":
            self._send(404, {"error": f"no route {path}"})
            return
        try:
            body = self._body()
            self.emulator.inject_fault(
                method=str(body["method"]),
                status=body.get("status"),
                count=int(body.get("count", 1)),
                delay_s=float(body.get("delay_s", 0.0)),
                message=body.get("message"),
            )
        except (KeyError, ValueError, TypeError, EmulatorError) as exc:
            self._send(400, {"error": str(exc)})
            return
        self._send(200, {})

    def _add_index(self) -> None:
        """``{"project": P, "database": "(default)", <a firestore.indexes.json entry>}``."""
        try:
            body = self._body()
            if not isinstance(body, dict) or not isinstance(body.get("project"), str):
                raise IndexDefinitionError("the body needs a project")
            database = body.get("database", "(default)")
            if not isinstance(database, str):
                raise IndexDefinitionError("database must be a string")
            self.emulator.add_index(body["project"], from_entry(body), database)
        except (ValueError, EmulatorError) as exc:
            self._send(400, {"error": str(exc)})
            return
        self._send(200, {})
