"""The process edge of both functions-framework entry points: the settings check at start, and
JSON for every error answer.

At start. The image runs `python -m services.<target>.main` before functions-framework opens
the port (Dockerfile). `check_settings` reads the service's Settings once; if any JOBS_* value
is bad it writes one CRITICAL JSON line naming every bad key (event `settings_invalid`) and
the process exits 2, so the port never opens, Cloud Run's startup probe fails and the revision
never takes traffic (infra/cloudrun.py). A bad value fails the deploy, not the first request.

At the HTTP edge. functions-framework answers an exception that escapes the function, and a
path it reserves (/robots.txt, /favicon.ico), with text or HTML. `install_json_errors`
registers one handler on functions-framework's app (its documented `errorhandler` hook) that
answers JSON instead; `settings_failure` is the answer when the settings cannot be read on a
request after all (a process started without the check).
"""

from __future__ import annotations

import json
import logging
import sys
import threading
from collections.abc import Callable, Mapping
from http import HTTPStatus
from typing import IO, Any, Generic, Protocol, TypeVar

import flask
from werkzeug.exceptions import HTTPException

from services.jobs import log
from services.jobs.metrics import LOG_EVENT
from services.jobs.settings import SettingsError

logger = logging.getLogger(__name__)

EVENT_SETTINGS_INVALID = "settings_invalid"
EVENT_UNHANDLED = "unhandled_error"
# The exit status of a failed settings check (2: bad configuration, as for a usage error).
EXIT_BAD_SETTINGS = 2


def bad_keys(error: SettingsError) -> list[str]:
    """The JOBS_* keys a SettingsError names (each problem reads "KEY: what is wrong")."""
    return sorted({problem.split(":", 1)[0].strip() for problem in error.problems})


def check_settings(
    service: str,
    read: Callable[[Mapping[str, str]], object],
    environ: Mapping[str, str],
    stream: IO[str] | None = None,
) -> int:
    """0 if `read(environ)` builds the Settings; else one JSON line on `stream` (stderr) and 2."""
    try:
        read(environ)
    except SettingsError as exc:
        # Formatted directly, not through the root logger: nothing is configured yet, and
        # this process exits right after.
        record = logger.makeRecord(
            logger.name,
            logging.CRITICAL,
            __file__,
            0,
            "%s: invalid settings, not starting: %s",
            (service, "; ".join(exc.problems)),
            None,
            extra={
                "fields": {
                    LOG_EVENT: EVENT_SETTINGS_INVALID,
                    "service": service,
                    "keys": bad_keys(exc),
                    "problems": list(exc.problems),
                }
            },
        )
        out = stream or sys.stderr
        out.write(log.JsonFormatter().format(record) + "\n")
        out.flush()
        return EXIT_BAD_SETTINGS
    return 0


def json_response(
    status: int,
    body: Mapping[str, Any],
    headers: Mapping[str, str] | None = None,
    *,
    ensure_ascii: bool = True,
) -> flask.Response:
    """A JSON answer. A plain Response, not jsonify: functions-framework calls the target
    outside any app context of ours."""
    return flask.Response(
        json.dumps(dict(body), ensure_ascii=ensure_ascii) + "\n",
        status=int(status),
        mimetype="application/json",
        headers=dict(headers) if headers else None,
    )


def settings_failure(service: str, error: SettingsError) -> flask.Response:
    """The answer (500, JSON) when a request finds the settings invalid; logged once per call."""
    logger.critical(
        "%s: invalid settings: %s",
        service,
        "; ".join(error.problems),
        extra={
            "fields": {
                LOG_EVENT: EVENT_SETTINGS_INVALID,
                "service": service,
                "keys": bad_keys(error),
            }
        },
    )
    return json_response(
        HTTPStatus.INTERNAL_SERVER_ERROR, {"error": "invalid settings", "keys": bad_keys(error)}
    )


class Handler(Protocol):
    def handle(self, request: flask.Request) -> flask.Response: ...


def answer(service: str, shared: Callable[[], Handler], request: flask.Request) -> flask.Response:
    """`request` answered by the instance's handler (`shared()` builds it on first use)."""
    try:
        handler = shared()
    except SettingsError as exc:
        return settings_failure(service, exc)
    return handler.handle(request)


def json_error(exc: Exception) -> flask.Response:
    """Flask error handler: an HTTP error keeps its status, anything else is a logged 500."""
    if isinstance(exc, HTTPException):
        status = exc.code or HTTPStatus.INTERNAL_SERVER_ERROR
        return json_response(status, {"error": HTTPStatus(status).phrase.lower()})
    logger.error(
        "unhandled %s",
        type(exc).__name__,
        exc_info=exc,
        extra={"fields": {LOG_EVENT: EVENT_UNHANDLED, "error_type": type(exc).__name__}},
    )
    return json_response(HTTPStatus.INTERNAL_SERVER_ERROR, {"error": "internal error"})


def install_json_errors(register: Callable[[type[Exception]], Any]) -> None:
    """Register `json_error` for every exception with `register` (functions_framework's
    `errorhandler`, which outside functions-framework is a no-op)."""
    register(Exception)(json_error)


H = TypeVar("H")


class SharedHandler(Generic[H]):
    """The instance's one handler, built by `build` on the first request and then shared by
    every request thread: importing an entry point builds no client and reads no setting."""

    def __init__(self, build: Callable[[], H]) -> None:
        self._build = build
        self._lock = threading.Lock()
        self._handler: H | None = None

    @property
    def built(self) -> bool:
        return self._handler is not None

    def __call__(self) -> H:
        with self._lock:
            if self._handler is None:
                self._handler = self._build()
            return self._handler
