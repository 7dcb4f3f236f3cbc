"""The worker's HTTP layer: Pub/Sub push semantics around the `Processor`.

The only place status codes are chosen. 2xx means "done, don't redeliver" — 204 for a
completed job, 200 with a small JSON body for every other acknowledged outcome. 429 and 503
are the only ways to ask for a redelivery: a live lease elsewhere (429), a transient failure,
an unreachable Firestore or a record written by a newer version (503). Bad input is never a
5xx: an oversize body, a malformed envelope or an unknown job ID is acknowledged, logged as
`event=push_rejected` (the metric) and recorded in the `rejected` collection for an operator.
"""

from __future__ import annotations

import logging
import os
import socket
from collections.abc import Mapping
from dataclasses import dataclass
from http import HTTPStatus
from typing import TYPE_CHECKING, Any, Protocol

import flask

from services.edge.auth import AuthPolicy, RequestHeaders, TokenVerifier
from services.edge.auth_errors import CertsUnavailable, Forbidden, Unauthenticated
from services.edge.startup import json_response
from services.jobs.catalogue import Catalogue, load_catalogue
from services.jobs.clock import Clock, SystemClock
from services.jobs.deployment import Deployment
from services.jobs.errors import StoreUnavailable
from services.store.rejections import PAYLOAD_LIMIT, RejectionStore, rejection_of
from services.telemetry import log, metrics
from services.worker import envelope
from services.worker.actions import ActionContext, ActionRegistry, bind
from services.worker.errors import MalformedDelivery
from services.worker.processor import Outcome, OutcomeKind, Processor
from services.worker.settings import WorkerSettings

if TYPE_CHECKING:
    from services.store.job_store import FirestoreJobStore

logger = logging.getLogger(__name__)

EXTENSION = "deferred_jobs_worker"

_STATUS: dict[OutcomeKind, HTTPStatus] = {
    OutcomeKind.COMPLETED: HTTPStatus.NO_CONTENT,
    OutcomeKind.LEASE_HELD: HTTPStatus.TOO_MANY_REQUESTS,
    OutcomeKind.RETRY: HTTPStatus.SERVICE_UNAVAILABLE,
    OutcomeKind.UNAVAILABLE: HTTPStatus.SERVICE_UNAVAILABLE,
    # A configuration error, not an outage: 500 (still redelivered, so nothing is lost while
    # it is fixed), with its own ERROR event (store_rejected).
    OutcomeKind.STORE_REJECTED: HTTPStatus.INTERNAL_SERVER_ERROR,
    # Written by a newer version: not bad input (never rejected), redelivered until a
    # revision that knows it (the newer one, or a roll forward) takes it.
    OutcomeKind.NEWER_RECORD: HTTPStatus.SERVICE_UNAVAILABLE,
}


class Verifier(Protocol):
    def verify_request(self, headers: RequestHeaders) -> Any: ...


class Rejections(Protocol):
    def record(self, rejection: Any) -> str: ...


class PushHandler:
    """One push request → one response."""

    def __init__(
        self,
        *,
        verifier: Verifier,
        processor: Processor,
        rejections: Rejections,
        clock: Clock,
        max_body_bytes: int,
        project: str | None = None,
    ) -> None:
        self._verifier = verifier
        self._processor = processor
        self._rejections = rejections
        self._clock = clock
        self._max_body_bytes = max_body_bytes
        self._project = project

    def handle(self, request: flask.Request) -> flask.Response:
        seen = _Seen()
        with log.bind_request(log.request_trace(request.headers), self._project):
            try:
                if request.method != "POST":
                    return json_response(HTTPStatus.METHOD_NOT_ALLOWED, {"error": "POST only"})
                refused = self._authenticate(request)
                if refused is not None:
                    return refused
                return self._handle_push(request, seen)
            except Exception as exc:  # the last resort: one line, then 500
                return _unexpected(exc, seen)

    def _authenticate(self, request: flask.Request) -> flask.Response | None:
        try:
            self._verifier.verify_request(request.headers)
        except Unauthenticated as exc:
            logger.warning("push refused: %s", exc)
            return json_response(HTTPStatus.UNAUTHORIZED, {"error": "unauthenticated"})
        except Forbidden as exc:
            logger.warning("push refused: %s", exc)
            return json_response(HTTPStatus.FORBIDDEN, {"error": "forbidden"})
        except CertsUnavailable as exc:
            logger.error("cannot verify push tokens: %s", exc)
            return json_response(HTTPStatus.SERVICE_UNAVAILABLE, {"error": "certs unavailable"})
        return None

    def _handle_push(self, request: flask.Request, seen: _Seen) -> flask.Response:
        headers = dict(request.headers.items())
        body, size, too_large = read_body(request, self._max_body_bytes)
        if too_large:
            detail = f"body of {size or 'more than ' + str(self._max_body_bytes)} bytes"
            self._log_unparsed("body_too_large")
            return self._reject("body_too_large", detail, body, headers, body_bytes=size)
        try:
            delivery = envelope.parse(body, headers)
        except MalformedDelivery as exc:
            self._log_unparsed(exc.reason)
            return self._reject(exc.reason, str(exc), body, headers)
        seen.job_id, seen.generation = delivery.job_id, delivery.generation
        with log.bound(job_id=delivery.job_id, run_id=delivery.run_id):
            outcome = self._processor.process(delivery)
            if outcome.kind in (OutcomeKind.UNKNOWN_JOB, OutcomeKind.INVALID_RECORD):
                # Nothing a redelivery could change: acknowledged, kept for an operator.
                return self._reject(
                    outcome.kind.value,
                    outcome.detail,
                    body,
                    headers,
                    job_id=delivery.job_id,
                    message_id=delivery.message_id,
                )
            return response_for(outcome)

    def _log_unparsed(self, reason: str) -> None:
        # The processor logs the outcome of every parsed delivery; this is the same one line
        # for a delivery that never got that far.
        logger.info(
            "push not parsed: %s",
            reason,
            extra={
                "fields": {
                    metrics.LOG_EVENT: metrics.EVENT_WORKER_OUTCOME,
                    metrics.LOG_OUTCOME: "rejected",
                    "reason": reason,
                }
            },
        )

    def _reject(
        self,
        reason: str,
        detail: str,
        body: bytes,
        headers: dict[str, str],
        *,
        body_bytes: int | None = None,
        job_id: str | None = None,
        message_id: str | None = None,
    ) -> flask.Response:
        rejection = rejection_of(
            reason,
            detail,
            body,
            headers,
            received_at=self._clock.now(),
            body_bytes=body_bytes,
            job_id=job_id,
            message_id=message_id,
        )
        logger.warning(
            "push rejected: %s",
            reason,
            extra={
                "fields": {
                    metrics.LOG_EVENT: metrics.EVENT_REJECTED,
                    "reason": reason,
                    "detail": rejection.detail,
                    "job_id": job_id,
                    "message_id": message_id,
                    "payload_bytes": rejection.payload_bytes,
                }
            },
        )
        rejection_id = None
        try:
            rejection_id = self._rejections.record(rejection)
        except StoreUnavailable as exc:
            # Still acknowledged: a redelivery could not be processed either, and the log
            # line above keeps the reason for the operator.
            logger.error("could not record the rejection: %s", exc)
        return json_response(
            HTTPStatus.OK,
            {"outcome": "rejected", "reason": reason, "rejection_id": rejection_id},
        )


@dataclass
class _Seen:
    """What one request has revealed so far, for the last-resort log line."""

    job_id: str | None = None
    generation: int | None = None


OUTCOME_INTERNAL_ERROR = "internal_error"


def _unexpected(exc: Exception, seen: _Seen) -> flask.Response:
    """A bug reached the HTTP layer: log one structured ERROR line (with the traceback) and
    answer 500. Nothing is acknowledged: a lease taken stays until the reclaimer ends it."""
    logger.exception(
        "job %s: unexpected %s",
        seen.job_id or "(not parsed)",
        type(exc).__name__,
        extra={
            "fields": {
                metrics.LOG_EVENT: metrics.EVENT_WORKER_OUTCOME,
                metrics.LOG_OUTCOME: OUTCOME_INTERNAL_ERROR,
                "job_id": seen.job_id,
                "generation": seen.generation,
                "error_type": type(exc).__name__,
            }
        },
    )
    return json_response(HTTPStatus.INTERNAL_SERVER_ERROR, {"outcome": OUTCOME_INTERNAL_ERROR})


def read_body(request: flask.Request, limit: int) -> tuple[bytes, int | None, bool]:
    """At most `limit` bytes of the body: (bytes, declared size or None, too large)."""
    declared = request.content_length
    if declared is not None and declared > limit:
        # Keep only what the rejection record stores; never read the rest.
        return request.stream.read(PAYLOAD_LIMIT), declared, True
    data = request.stream.read(limit + 1)
    if len(data) > limit:
        return data[:limit], declared, True
    return data, len(data), False


def response_for(outcome: Outcome) -> flask.Response:
    """The HTTP answer Pub/Sub gets for an outcome."""
    status = _STATUS.get(outcome.kind, HTTPStatus.OK)
    if status is HTTPStatus.NO_CONTENT:
        return flask.Response(status=status)
    response = json_response(status, {"outcome": outcome.kind.value, "job_id": outcome.job_id})
    if status is HTTPStatus.TOO_MANY_REQUESTS:
        response.headers["Retry-After"] = "10"
    return response


def default_worker_id() -> str:
    """This instance, for the lease owner's name: the Cloud Run revision and instance, or host
    and pid locally. The processor adds the delivery; the fence is the lease token."""
    revision = os.environ.get("K_REVISION", "local")
    return f"{revision}/{socket.gethostname()}/{os.getpid()}"


def create_app(
    settings: WorkerSettings,
    *,
    clock: Clock | None = None,
    store: FirestoreJobStore | None = None,
    actions: ActionRegistry | None = None,
    verifier: Verifier | None = None,
    rejections: Rejections | None = None,
    worker_id: str | None = None,
) -> flask.Flask:
    """The worker's Flask app; clients are built here (never at import) unless injected."""
    clock = clock or SystemClock()
    if store is None or rejections is None:
        from google.cloud import firestore

        from services.store.job_store import FirestoreJobStore

        client = firestore.Client(project=settings.project)
        store = store or FirestoreJobStore(
            client,
            clock,
            terminal_retention=settings.terminal_retention,
            timeout_s=settings.firestore_timeout_s,
            shards=settings.shards,
            max_clock_skew=settings.max_clock_skew,
        )
        rejections = rejections or RejectionStore(client, timeout_s=settings.firestore_timeout_s)
    if actions is None:
        actions = default_actions(settings)
    if verifier is None:
        verifier = TokenVerifier(
            AuthPolicy(
                audience=settings.audience,
                allowed_emails=settings.allowed_invokers,
                certs_url=settings.certs_url,
                clock_skew_s=settings.auth_clock_skew_s,
                behind_cloud_run_iam=settings.behind_cloud_run_iam,
            )
        )
    processor = Processor(
        store,
        actions,
        clock,
        lease=settings.lease,
        worker_id=worker_id or default_worker_id(),
        deadline_margin=settings.deadline_margin,
        max_delivery=settings.max_delivery,
    )
    handler = PushHandler(
        verifier=verifier,
        processor=processor,
        rejections=rejections,
        clock=clock,
        max_body_bytes=settings.max_body_bytes,
        project=settings.project,
    )
    app = flask.Flask("deferred_jobs_worker")
    app.extensions[EXTENSION] = handler

    # Any path, as under functions-framework: the push endpoint's path is the operator's.
    methods = ["POST", "GET", "PUT", "DELETE", "PATCH"]

    @app.route("/", methods=methods, defaults={"path": ""})
    @app.route("/<path:path>", methods=methods)
    def push(path: str) -> flask.Response:
        return handler.handle(flask.request)

    return app


def handler_of(app: flask.Flask) -> PushHandler:
    handler = app.extensions[EXTENSION]
    assert isinstance(handler, PushHandler)
    return handler


def default_actions(settings: WorkerSettings, catalogue: Catalogue | None = None) -> ActionRegistry:
    """Every action of the catalogue (default: the built-in ones, `http.request` over the
    settings' HTTP targets among them, and the installed plug-ins'), bound with the settings
    (real clients, the settings' retry policy for an action that declares none). A broken
    plug-in raises CatalogueError: the worker does not start."""
    if catalogue is None:
        catalogue = load_catalogue(deployment=Deployment(http_targets=settings.http_targets))
    return bind(catalogue, ActionContext(settings))


# What a requests session with `trust_env` reads from the environment on every request
# (https://requests.readthedocs.io/en/latest/api/#requests.Session.trust_env): proxies (any
# `*_proxy` variable, as urllib's getproxies_environment reads them), a CA bundle (the first
# of these set), and the netrc file's credentials.
_CA_BUNDLES = ("REQUESTS_CA_BUNDLE", "CURL_CA_BUNDLE")
_NETRC_FILES = ("~/.netrc", "~/_netrc")


def read_environment_once(session: Any, environ: Mapping[str, str] | None = None) -> bool:
    """Stop `session` (the storage client's requests session) from re-reading the environment
    on every request: an instance's environment does not change after start, and the
    per-request proxy and netrc look-ups were a tenth of the storage call's CPU. A CA bundle
    named there is set on the session, as each request would have taken it; with a proxy
    variable, NETRC or a netrc file nothing changes (the session keeps reading them). True
    when it stopped."""
    environ = os.environ if environ is None else environ
    proxies = any(name.lower().endswith("_proxy") and value for name, value in environ.items())
    netrc = environ.get("NETRC") or any(
        os.path.exists(os.path.expanduser(path)) for path in _NETRC_FILES
    )
    if proxies or netrc or not getattr(session, "trust_env", False):
        return False
    bundle = next((environ[name] for name in _CA_BUNDLES if environ.get(name)), None)
    if bundle is not None and session.verify is True:
        session.verify = bundle
    session.trust_env = False
    return True
