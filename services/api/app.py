"""The API's HTTP layer: authenticate, route, parse, call the store, answer JSON.

`create_app(settings, ...)` builds a Flask app whose every path goes to one `ApiHandler`, as
under functions-framework (`main.py`), where the target function receives every request.
This is the only place status codes are chosen; the store returns domain results or raises
domain errors (`errors.from_store` maps them).

Status codes: 201 a new job, 200 an existing one or a read/cancel/reschedule; 400 a bad
field, 401 / 403 a missing or invalid / disallowed token, 404 an unknown job or path, 405 a
wrong method, 409 a conflicting job under the same ID (ALREADY_EXISTS) or a lost race
(ABORTED, retry), 413 an oversized body, 415 a body that is not JSON; 503 when Firestore or
the token certs cannot be reached (retry with backoff); 500, after one ERROR line with event
`api_crashed`, only for a bug. The token never appears in a log line.
"""

from __future__ import annotations

import logging
import re
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass
from http import HTTPStatus
from typing import TYPE_CHECKING, Any, Protocol
from urllib.parse import quote

import flask

from services.api import document, errors, payload, routes
from services.api.errors import ApiError
from services.api.ownership import Ownership, denied
from services.api.representation import job_resource
from services.api.settings import ApiSettings
from services.edge.auth import AuthPolicy, Caller, RequestHeaders, TokenVerifier, allowed_emails
from services.edge.auth_errors import CertsUnavailable, Forbidden, Unauthenticated
from services.edge.error_model import target_problem
from services.edge.startup import json_response
from services.jobs.catalogue import Catalogue, built_in, load_catalogue
from services.jobs.clock import Clock, SystemClock
from services.jobs.deployment import Deployment
from services.jobs.errors import AlreadyTerminal, JobsError, ScheduleConflict
from services.jobs.ids import job_id_problems
from services.jobs.record import Job
from services.jobs.state import State
from services.telemetry import log
from services.telemetry.metrics import LOG_EVENT

if TYPE_CHECKING:
    from services.store.job_store import FirestoreJobStore

logger = logging.getLogger(__name__)

EXTENSION = "deferred_jobs_api"
EVENT_API_REQUEST = "api_request"
EVENT_API_CRASHED = "api_crashed"
REQUEST_ID_HEADER = "X-Request-Id"
_REQUEST_ID = re.compile(r"^[A-Za-z0-9._:-]{1,128}\Z")
_JSON_TYPES = ("application/json",)
DEFAULT_CANCEL_REASON = "cancelled through the API"
DEFAULT_RESCHEDULE_REASON = "rescheduled through the API"


class Verifier(Protocol):
    """Checks a request's Authorization / X-Serverless-Authorization (auth.TokenVerifier)."""

    def verify_request(self, headers: RequestHeaders) -> Caller: ...


@dataclass
class _Seen:
    """What the request turned out to be, for its one log line."""

    operation: str | None = None
    job_id: str | None = None
    caller: str | None = None


class _Answer:
    """A success: status, JSON body, extra headers."""

    def __init__(
        self, status: HTTPStatus, body: Any, headers: dict[str, str] | None = None
    ) -> None:
        self.status = status
        self.body = body
        self.headers = headers or {}


class ApiHandler:
    """One HTTP request → one response, never an exception."""

    def __init__(
        self,
        store: FirestoreJobStore,
        verifier: Verifier,
        clock: Clock,
        *,
        max_body_bytes: int,
        project: str | None = None,
        ownership: Ownership | None = None,
        catalogue: Catalogue | None = None,
    ) -> None:
        self._store = store
        self._document = document.for_catalogue(built_in() if catalogue is None else catalogue)
        self._ownership = ownership or Ownership()
        self._verifier = verifier
        self._clock = clock
        self._max_body_bytes = max_body_bytes
        self._project = project
        self._operations: dict[str, Callable[[flask.Request, Caller, str | None], _Answer]] = {
            "schedule": self._schedule,
            "get": self._get,
            "cancel": self._cancel,
            "reschedule": self._reschedule,
            "openapi": self._openapi,
        }

    def handle(self, request: flask.Request) -> flask.Response:
        request_id = _request_id(request.headers.get(REQUEST_ID_HEADER))
        started = time.monotonic()
        seen = _Seen()
        with log.bind_request(
            log.request_trace(request.headers), self._project, request_id=request_id
        ):
            response = self._respond(request, seen)
            response.headers[REQUEST_ID_HEADER] = request_id
            logger.info(
                "%s %s → %d",
                request.method,
                seen.operation or request.path[:200],
                response.status_code,
                extra={
                    "fields": {
                        LOG_EVENT: EVENT_API_REQUEST,
                        "operation": seen.operation,
                        "job_id": seen.job_id,
                        "caller": seen.caller,
                        "status": response.status_code,
                        "latency_ms": round((time.monotonic() - started) * 1000, 1),
                    }
                },
            )
            return response

    def _respond(self, request: flask.Request, seen: _Seen) -> flask.Response:
        try:
            # Before anything else, as under functions-framework (services/edge/startup.py):
            # a path read with U+FFFD for its bad bytes would name another job.
            problem = target_problem(request.environ)
            if problem is not None:
                raise errors.invalid("path", problem)
            caller = self._authenticate(request)
            seen.caller = caller.email
            found = routes.match(request.method, request.path)
            seen.operation, seen.job_id = found.route.operation, found.job_id
            with log.bound(job_id=found.job_id, caller=caller.email):
                answer = self._operations[found.route.operation](request, caller, found.job_id)
            return _json(answer.status, answer.body, answer.headers)
        except ApiError as exc:
            if exc.http >= HTTPStatus.INTERNAL_SERVER_ERROR:
                logger.error("request failed: %s", exc.message)
            return _json(exc.http, exc.body(), exc.headers)
        except Exception as exc:
            # Last resort: a bug. One structured ERROR line an alert can match, then a JSON 500.
            logger.exception(
                "api request failed unexpectedly",
                extra={
                    "fields": {LOG_EVENT: EVENT_API_CRASHED, "error_type": type(exc).__qualname__}
                },
            )
            return _json(HTTPStatus.INTERNAL_SERVER_ERROR, errors.internal().body())

    # -- authentication -------------------------------------------------------------------

    def _authenticate(self, request: flask.Request) -> Caller:
        try:
            # Read as Cloud Run reads them: X-Serverless-Authorization when present (then
            # Authorization is the caller's own), else Authorization (auth.py cites the doc).
            return self._verifier.verify_request(request.headers)
        except Unauthenticated as exc:
            logger.warning("api request refused: %s", exc)
            raise ApiError(
                HTTPStatus.UNAUTHORIZED,
                "UNAUTHENTICATED",
                f"a valid Google-signed ID token is required: {exc}",
                headers={"WWW-Authenticate": "Bearer"},
            ) from exc
        except Forbidden as exc:
            logger.warning("api request refused: %s", exc)
            raise ApiError(HTTPStatus.FORBIDDEN, "PERMISSION_DENIED", str(exc)) from exc
        except CertsUnavailable as exc:
            logger.error("cannot verify api tokens: %s", exc)
            raise errors.unavailable("cannot verify the token now; retry with backoff") from exc

    # -- operations -----------------------------------------------------------------------

    def _schedule(self, request: flask.Request, caller: Caller, _: str | None) -> _Answer:
        new_job = payload.parse_schedule(self._body(request), self._clock.now())
        try:
            result = self._store.schedule(new_job, by=_by(caller), producer=caller.email)
        except ScheduleConflict as exc:
            # Ownership before content (issue 33, finding 4): a 409 naming the fields that
            # differ would tell a foreign caller what another producer's job holds (and,
            # by elimination, a right guess from its 403). Only a caller who may act on the
            # existing job learns how it differs; any other gets the one 403.
            self._readable(caller, new_job.job_id)
            raise errors.from_store(exc) from exc
        except JobsError as exc:
            raise errors.from_store(exc) from exc
        if not result.created and not self._ownership.may_act(caller.email, result.job):
            # The same decision, scheduled first by another producer (services/api/ownership.py).
            raise denied(result.job.job_id)
        status = HTTPStatus.CREATED if result.created else HTTPStatus.OK
        # Percent-encoded: a header is Latin-1, and a job ID may be any Unicode.
        headers = {"Location": f"{routes.COLLECTION}/{quote(result.job.job_id, safe='')}"}
        return _Answer(status, job_resource(result.job), headers)

    def _get(self, request: flask.Request, caller: Caller, job_id: str | None) -> _Answer:
        valid_id = _path_id(job_id)
        job = self._readable(caller, valid_id)
        if job is None:
            raise errors.not_found(f"job {valid_id!r} not found")
        return _Answer(HTTPStatus.OK, job_resource(job))

    def _readable(self, caller: Caller, job_id: str) -> Job | None:
        """The job when `caller` may act on it (None: it does not exist and the caller is
        trusted); else 403 whether or not it exists (AIP-211, services/api/ownership.py)."""
        job: Job | None = self._call(lambda: self._store.get(job_id))
        if not self._ownership.may_act(caller.email, job):
            raise denied(job_id)
        return job

    def _cancel(self, request: flask.Request, caller: Caller, job_id: str | None) -> _Answer:
        valid_id = _path_id(job_id)
        self._readable(caller, valid_id)  # ownership first; the producer never changes
        body = payload.parse_cancel(self._body(request, empty_ok=True))
        reason = body.reason or DEFAULT_CANCEL_REASON
        try:
            job = self._store.cancel(valid_id, reason, _by(caller))
        except AlreadyTerminal as exc:
            if exc.current is not State.CANCELLED:
                raise errors.from_store(exc) from exc
            # Cancelling a cancelled job is what a retried cancel looks like: the same answer.
            job = self._call(lambda: self._store.get(valid_id)) or _gone(valid_id)
        except JobsError as exc:
            raise errors.from_store(exc) from exc
        return _Answer(HTTPStatus.OK, job_resource(job))

    def _reschedule(self, request: flask.Request, caller: Caller, job_id: str | None) -> _Answer:
        valid_id = _path_id(job_id)
        self._readable(caller, valid_id)  # ownership first; the producer never changes
        body = payload.parse_reschedule(self._body(request), self._clock.now())
        reason = body.reason or DEFAULT_RESCHEDULE_REASON
        job = self._call(lambda: self._store.reschedule(valid_id, body.due_at, reason, _by(caller)))
        return _Answer(HTTPStatus.OK, job_resource(job))

    def _openapi(self, request: flask.Request, caller: Caller, _: str | None) -> _Answer:
        return _Answer(HTTPStatus.OK, self._document)

    # -- helpers --------------------------------------------------------------------------

    def _call(self, operation: Callable[[], Any]) -> Any:
        try:
            return operation()
        except JobsError as exc:
            raise errors.from_store(exc) from exc

    def _body(self, request: flask.Request, *, empty_ok: bool = False) -> bytes:
        """The body, at most max_body_bytes, declared as JSON when not empty."""
        limit = self._max_body_bytes
        declared = request.content_length
        if declared is not None and declared > limit:
            raise errors.too_large(declared, limit)  # never read what we will refuse
        data = request.stream.read(limit + 1)
        if len(data) > limit:
            raise errors.too_large(None, limit)
        if data.strip() or not empty_ok:
            _require_json(request.mimetype)
        return data


def _require_json(mimetype: str) -> None:
    if mimetype not in _JSON_TYPES:
        raise ApiError(
            HTTPStatus.UNSUPPORTED_MEDIA_TYPE,
            "INVALID_ARGUMENT",
            f"Content-Type: must be application/json, not {mimetype[:80] or 'absent'!r}",
            [errors.FieldViolation("Content-Type", "must be application/json")],
        )


def _path_id(job_id: str | None) -> str:
    problems = job_id_problems(job_id)
    if problems or job_id is None:
        raise errors.invalid_fields([errors.FieldViolation("job_id", p) for p in problems])
    return job_id


def _gone(job_id: str) -> Job:
    raise errors.not_found(f"job {job_id!r} not found")


def _by(caller: Caller) -> str:
    return f"api:{caller.email}"


def _request_id(header: str | None) -> str:
    """The caller's request ID when it is a sane token (it lands in logs), else a new one."""
    if header and _REQUEST_ID.match(header):
        return header
    return uuid.uuid4().hex


def _json(status: int, body: Any, headers: dict[str, str] | None = None) -> flask.Response:
    # Non-ASCII stays UTF-8 in the API's answers (subjects and reasons come from producers).
    return json_response(status, body, headers, ensure_ascii=False)


def create_app(
    settings: ApiSettings,
    *,
    clock: Clock | None = None,
    store: FirestoreJobStore | None = None,
    verifier: Verifier | None = None,
    firestore_client: Any = None,
    catalogue: Catalogue | None = None,
) -> flask.Flask:
    """The API's Flask app; clients are built here (never at import) unless injected.
    `catalogue`: the actions it schedules (default: the built-in ones and the installed
    plug-ins', checking an http.request job's target against the settings' HTTP targets; a
    broken plug-in raises CatalogueError, so the API does not start)."""
    clock = clock or SystemClock()
    if catalogue is None:
        catalogue = load_catalogue(deployment=Deployment(http_targets=settings.http_targets))
    if store is None:
        from google.cloud import firestore

        from services.store.job_store import FirestoreJobStore

        client = firestore_client or firestore.Client(project=settings.project)
        store = FirestoreJobStore(
            client,
            clock,
            terminal_retention=settings.terminal_retention,
            timeout_s=settings.firestore_timeout_s,
            shards=settings.shards,
            known_actions=catalogue,
        )
    if verifier is None:
        verifier = TokenVerifier(
            AuthPolicy(
                audience=settings.audience,
                allowed_emails=allowed_emails(settings.allowed_callers),
                certs_url=settings.certs_url,
                clock_skew_s=settings.auth_clock_skew_s,
                behind_cloud_run_iam=settings.behind_cloud_run_iam,
            )
        )
    handler = ApiHandler(
        store,
        verifier,
        clock,
        max_body_bytes=settings.max_body_bytes,
        project=settings.project,
        ownership=Ownership(frozenset(settings.trusted_callers)),
        catalogue=catalogue,
    )
    app = flask.Flask("deferred_jobs_api")
    app.extensions[EXTENSION] = handler
    methods = ["GET", "POST", "PUT", "PATCH", "DELETE", "HEAD", "OPTIONS"]

    # Every path, as under functions-framework: the handler routes and answers unknown ones.
    @app.route("/", methods=methods, defaults={"path": ""})
    @app.route("/<path:path>", methods=methods)
    def api(path: str) -> flask.Response:
        return handler.handle(flask.request)

    return app


def handler_of(app: flask.Flask) -> ApiHandler:
    handler = app.extensions[EXTENSION]
    assert isinstance(handler, ApiHandler)
    return handler
