"""The process edge of both functions-framework entry points: the settings check at start, and
JSON for every error answer.

At start. The image runs `python -m services.<target>.main` before functions-framework opens
the port (Dockerfile). `check_settings` reads the service's Settings once; if any JOBS_* value
is bad it writes one CRITICAL JSON line naming every bad key (event `settings_invalid`) and
the process exits 2, so the port never opens, Cloud Run's startup probe fails and the revision
never takes traffic (infra/cloudrun.py). A bad value fails the deploy, not the first request.

At the HTTP edge, every error answer is in Google's error model (services/edge/error_model.py,
https://cloud.google.com/apis/design/errors). functions-framework answers an exception that
escapes the function, and the paths it keeps for itself (/robots.txt, /favicon.ico) or cannot
route (a path with a newline), with HTML. `install_json_errors` registers one handler on
functions-framework's app (its documented `errorhandler` hook) that answers Google's error body
instead, and on that app (the hook's owner) routes every path to the target function, so the
service's own checks (the API's authentication first) answer them, and refuses a path or query
that is not UTF-8 once percent-decoded before any routing. `answer` gives the scan's and
worker's own refusals the same shape (their fields kept in a google.rpc.ErrorInfo detail);
`settings_failure` is the answer when the settings cannot be read on a request after all (a
process started without the check).
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
import werkzeug.routing
from werkzeug.exceptions import HTTPException

from services.edge.error_model import (
    as_error_body,
    error_body,
    error_bytes,
    error_info,
    target_problem,
)
from services.edge.settings import SettingsError
from services.jobs.catalogue import load_catalogue
from services.jobs.errors import CatalogueError
from services.telemetry import log
from services.telemetry.metrics import LOG_EVENT

logger = logging.getLogger(__name__)

EVENT_SETTINGS_INVALID = "settings_invalid"
EVENT_CATALOGUE_INVALID = "catalogue_invalid"
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


def check_catalogue(
    service: str,
    load: Callable[[], object] | None = None,
    stream: IO[str] | None = None,
) -> int:
    """0 if the action catalogue loads (`load`, default `load_catalogue`); else one CRITICAL
    JSON line naming the broken or conflicting plug-in's distribution and entry point, and 2:
    a revision with a bad plug-in never takes traffic, as with a bad setting."""
    try:
        (load or load_catalogue)()
    except CatalogueError as exc:
        record = logger.makeRecord(
            logger.name,
            logging.CRITICAL,
            __file__,
            0,
            "%s: action catalogue invalid, not starting: %s",
            (service, str(exc)),
            None,
            None,
            extra={"fields": {LOG_EVENT: EVENT_CATALOGUE_INVALID, "service": service}},
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
    keys = bad_keys(error)
    return json_response(
        HTTPStatus.INTERNAL_SERVER_ERROR,
        error_body(
            HTTPStatus.INTERNAL_SERVER_ERROR,
            f"invalid settings: {', '.join(keys)}",
            [error_info("INVALID_SETTINGS", {"keys": keys})],
        ),
    )


class Handler(Protocol):
    def handle(self, request: flask.Request) -> flask.Response: ...


def answer(service: str, shared: Callable[[], Handler], request: flask.Request) -> flask.Response:
    """`request` answered by the instance's handler (`shared()` builds it on first use)."""
    try:
        handler = shared()
    except SettingsError as exc:
        return settings_failure(service, exc)
    return google_errors(handler.handle(request))


def google_errors(response: flask.Response) -> flask.Response:
    """`response` with an error answer's body in Google's error model (see `as_error_body`);
    successes and bodies already in that shape pass unchanged."""
    if response.status_code < HTTPStatus.BAD_REQUEST:
        return response
    try:
        body: object = json.loads(response.get_data())
    except ValueError:
        body = {"detail": response.get_data(as_text=True)[:500]}
    converted = as_error_body(response.status_code, body)
    if converted is body and response.mimetype == "application/json":
        return response
    response.set_data(json.dumps(converted) + "\n")
    response.mimetype = "application/json"
    return response


def json_error(exc: Exception) -> flask.Response:
    """Flask error handler: an HTTP error keeps its status, anything else is a logged 500;
    both in Google's error model."""
    if isinstance(exc, HTTPException):
        status = exc.code or HTTPStatus.INTERNAL_SERVER_ERROR
        try:
            phrase = HTTPStatus(status).phrase
        except ValueError:  # a status http.HTTPStatus does not name
            phrase = ""
        return json_response(status, error_body(status, phrase.lower() or "error"))
    logger.error(
        "unhandled %s",
        type(exc).__name__,
        exc_info=exc,
        extra={"fields": {LOG_EVENT: EVENT_UNHANDLED, "error_type": type(exc).__name__}},
    )
    return json_response(
        HTTPStatus.INTERNAL_SERVER_ERROR,
        error_body(HTTPStatus.INTERNAL_SERVER_ERROR, "internal error"),
    )


def install_json_errors(register: Callable[[type[Exception]], Any]) -> None:
    """Register `json_error` for every exception with `register` (functions_framework's
    `errorhandler`, which outside functions-framework is a no-op); when `register` belongs to
    a Flask app (functions-framework's, building this target), route every path of it to the
    target and refuse paths that are not UTF-8 (`serve_every_path`)."""
    register(Exception)(json_error)
    app = getattr(register, "__self__", None)
    if isinstance(app, flask.Flask):
        serve_every_path(app)


class _AnyPath(werkzeug.routing.BaseConverter):
    """Any path at all, newlines included (werkzeug's `path` stops at one)."""

    regex = r"(?s:.+)"
    part_isolating = False


def serve_every_path(app: flask.Flask) -> None:
    """Send every path of functions-framework's `app` to its target function.

    functions-framework answers /robots.txt and /favicon.ico itself (404) and cannot route a
    path containing a newline (`%0A`): those answers came before the service's own code, its
    authentication included. Here the target answers them like any other path. Every request
    whose path or query is not UTF-8 once percent-decoded is refused first (400,
    error_model.path_problem).

    Called while functions-framework imports the target's module, before it adds its routes;
    so the routes are replaced on the first request, by the WSGI wrapper installed now.
    """
    inner = app.wsgi_app
    routed = threading.Event()
    lock = threading.Lock()

    def every_path_utf8_only(environ: dict[str, Any], start_response: Callable[..., Any]) -> Any:
        if not routed.is_set():
            with lock:
                if not routed.is_set():
                    _route_everything_to_run(app)
                    routed.set()
        problem = target_problem(environ)
        if problem is None:
            return inner(environ, start_response)
        data = error_bytes(HTTPStatus.BAD_REQUEST, problem)
        start_response(
            "400 Bad Request",
            [("Content-Type", "application/json"), ("Content-Length", str(len(data)))],
        )
        return [data]

    app.wsgi_app = every_path_utf8_only  # type: ignore[method-assign]


def _route_everything_to_run(app: flask.Flask) -> None:
    if "run" not in app.view_functions:
        return  # not an HTTP-signature target: nothing of ours to route
    app.url_map = werkzeug.routing.Map(
        [
            werkzeug.routing.Rule("/", defaults={"path": ""}, endpoint="run"),
            werkzeug.routing.Rule("/<anypath:path>", endpoint="run"),
        ],
        converters={"anypath": _AnyPath},
        merge_slashes=False,
        strict_slashes=False,
    )


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
