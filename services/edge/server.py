"""The process that serves one target: functions-framework's app under gunicorn, with gunicorn's
limits set to Cloud Run's and its own error answers in Google's error model.

    python -m services.edge.server --target=api --source=services/api/main.py --port=8080

It is `functions-framework --target ... --source ... --port ...` (same options, same
FUNCTION_TARGET / FUNCTION_SOURCE / HOST / PORT environment, the app built by
functions-framework's public `create_app`, served by gunicorn in one process of THREADS threads
with CLOUD_RUN_TIMEOUT_SECONDS as gunicorn's `timeout`, as functions-framework serves it) with
three differences:

- gunicorn's header limits. By default gunicorn refuses a header field over 8,190 bytes or more
  than 100 fields with its own 431/400 HTML page, before the service's code runs; the service's
  own limits (the 16 KiB token limit in services/edge/auth.py) could never answer. Cloud Run's
  front end passes a request line and headers of up to 64 KiB in total
  (https://cloud.google.com/run/quotas, "HTTP/1 ... request headers"); so gunicorn here takes
  any field of up to that size and as many fields as fit in it, and what Cloud Run passes
  reaches the service.
- gunicorn's own refusals (a malformed request line or header, which only a client that
  reaches the container without Cloud Run's front end can send) are answered in Google's error
  model (services/edge/error_model.py) instead of gunicorn's HTML page.
- the gunicorn application is our own, on gunicorn's public `BaseApplication`, not
  functions-framework's private `_http` package; so THREADED_TIMEOUT_ENABLED is not read:
  functions-framework's timeout worker closes every kept-alive connection after one request
  (tests/infra/test_server.py shows it), and the stack leaves it off (infra/env.py).

No work at import: `main()` reads the options and builds the app.
"""

from __future__ import annotations

import argparse
import os
import socket
from collections.abc import Mapping
from typing import Any

import functions_framework
import gunicorn.app.base
import gunicorn.util
from gunicorn.workers.gthread import ThreadWorker

from services.edge.error_model import error_bytes

# Cloud Run's HTTP/1 limit on the request line and headers together
# (https://cloud.google.com/run/quotas); emulators/cloudrun/contract.py holds the same figure
# for the local front end (a test proves they agree).
MAX_HEADER_BYTES = 64 * 1024
# The most fields that fit in it: a field is at least "a:" and CRLF.
MAX_HEADER_FIELDS = MAX_HEADER_BYTES // 4


def gunicorn_limits() -> dict[str, Any]:
    """gunicorn's request limits, Cloud Run's rather than gunicorn's defaults."""
    return {
        "limit_request_line": 0,  # unlimited, as functions-framework sets it
        "limit_request_field_size": MAX_HEADER_BYTES,
        "limit_request_fields": MAX_HEADER_FIELDS,
    }


def write_error(sock: socket.socket, status_int: int, reason: str, mesg: str) -> None:
    """gunicorn's `util.write_error`, answering Google's error body instead of HTML."""
    body = error_bytes(status_int, mesg or reason)
    head = (
        f"HTTP/1.1 {status_int} {reason}\r\nConnection: close\r\n"
        f"Content-Type: application/json\r\nContent-Length: {len(body)}\r\n\r\n"
    )
    gunicorn.util.write_nonblock(sock, head.encode("latin-1") + body)


class _GoogleErrors:
    def init_process(self) -> None:
        # gunicorn has no hook for its error page; every worker module calls
        # `gunicorn.util.write_error`, so this worker process (which serves only this app)
        # points that at the Google-shaped one before it serves anything.
        gunicorn.util.write_error = write_error
        super().init_process()  # type: ignore[misc]


class GoogleErrorsThreadWorker(_GoogleErrors, ThreadWorker):
    """gunicorn's threaded worker (functions-framework's default), Google-shaped errors."""


def server_options(environ: Mapping[str, str], host: str, port: int) -> dict[str, Any]:
    """gunicorn's settings as functions-framework derives them from the environment (one
    process of THREADS threads, default 4 x CPUs; CLOUD_RUN_TIMEOUT_SECONDS as `timeout`, 0 for
    none; GUNICORN_LOG_LEVEL), with Cloud Run's limits and our worker."""
    return {
        "bind": f"{host}:{port}",
        "workers": int(environ.get("WORKERS", 1)),
        "threads": int(environ.get("THREADS", (os.cpu_count() or 1) * 4)),
        "timeout": int(environ.get("CLOUD_RUN_TIMEOUT_SECONDS", 0)),
        "loglevel": environ.get("GUNICORN_LOG_LEVEL", "error"),
        **gunicorn_limits(),
        "worker_class": f"{__name__}.{GoogleErrorsThreadWorker.__name__}",
    }


class ServiceServer(gunicorn.app.base.BaseApplication):
    """gunicorn serving one WSGI app with the given settings (gunicorn's documented way to
    embed it: https://docs.gunicorn.org/en/stable/custom.html)."""

    def __init__(self, app: Any, options: Mapping[str, Any]) -> None:
        self._app = app
        self._options = dict(options)
        super().__init__()

    def load_config(self) -> None:
        for key, value in self._options.items():
            self.cfg.set(key, value)

    def load(self) -> Any:
        return self._app


def parse_args(argv: list[str] | None, environ: Any) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="python -m services.edge.server", description=__doc__)
    parser.add_argument("--target", default=environ.get("FUNCTION_TARGET"))
    parser.add_argument("--source", default=environ.get("FUNCTION_SOURCE"))
    # functions-framework's default host: every interface of the container.
    parser.add_argument("--host", default=environ.get("HOST", "0.0.0.0"))
    parser.add_argument("--port", type=int, default=int(environ.get("PORT", 8080)))
    args = parser.parse_args(argv)
    if not args.target or not args.source:
        parser.error("--target and --source (or FUNCTION_TARGET and FUNCTION_SOURCE) are required")
    return args


def main(argv: list[str] | None = None) -> None:
    args = parse_args(argv, os.environ)
    app = functions_framework.create_app(args.target, args.source)
    ServiceServer(app, server_options(os.environ, args.host, args.port)).run()


if __name__ == "__main__":
    main()
