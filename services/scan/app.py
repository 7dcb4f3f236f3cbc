"""The scan's HTTP surface: authenticate the trigger, parse its body, run one scan, answer JSON.

`create_app(settings, ...)` builds a Flask app (route `POST /`) around a `ScanHandler`; every
dependency can be injected, and those that are not are built here, never at import. The
functions-framework target in `main.py` hands its request to the same handler.

Status codes: 200 with the run summary; 400 for a body that is not empty or a small JSON
object of known options; 401 / 403 for a missing or invalid / disallowed token; 405 for a
method other than POST; 503 when Firestore, Pub/Sub or the token certs cannot be reached
(Cloud Scheduler retries per its retry config); 500 with event `store_rejected` when Firestore
refuses for a reason retrying cannot fix (permissions, index, database: a configuration error,
not an outage); 500, after one ERROR line with event `scan_crashed`, for anything unexpected.
The token never appears in a log line.

A run that answers 500 or 503 once authenticated is recorded here in `scan_runs` with its
`failure` (status, error kind, bounded message), so `jobsctl runs` lists it. Best effort: when
Firestore itself is down that write fails too, and the run's ERROR line is its only record
(a WARNING with event `scan_run_unrecorded` says so).
"""

from __future__ import annotations

import dataclasses
import logging
from collections.abc import Mapping
from datetime import datetime, timedelta
from http import HTTPStatus
from typing import TYPE_CHECKING, Any, Protocol

import flask

from services.edge.auth import AuthPolicy, Caller, RequestHeaders, TokenVerifier, allowed_emails
from services.edge.auth_errors import CertsUnavailable, Forbidden, Unauthenticated
from services.edge.monitoring import build_sink
from services.edge.publisher import Publisher
from services.edge.startup import json_response
from services.jobs.catalogue import load_catalogue
from services.jobs.clock import Clock, SystemClock
from services.jobs.http_request import target_rates
from services.jobs.lanes import claim_rates
from services.scan.dependencies import JobPublisher, LeaseKeeper, RunRecorder
from services.scan.errors import QueueUnreachable, ScanError, StoreRefused, StoreUnreachable
from services.scan.pacer import Sleep
from services.scan.queue_age import QueueAgeSource, build_queue_age
from services.scan.scanner import Scanner
from services.scan.settings import HTTP_TARGETS, ScanSettings
from services.scan.summary import log_fields, response_body
from services.scan.trigger import (
    MAX_BODY_BYTES,
    TriggerError,
    parse_trigger,
    scheduled_execution,
)
from services.store.partition_leases import PartitionLeases
from services.store.runs import RunFailure, RunLogError, ScanRun, ScanRunLog
from services.telemetry import log
from services.telemetry.metrics import EVENT_STORE_REJECTED, LOG_EVENT, MetricsSink

if TYPE_CHECKING:
    from services.store.job_store import FirestoreJobStore

logger = logging.getLogger(__name__)

EXTENSION_KEY = "deferred_jobs.scan"

# The event of the one ERROR line written before an unexpected 500.
EVENT_SCAN_CRASHED = "scan_crashed"
# The WARNING when a failed run's record could not be written: its log lines are the record.
EVENT_SCAN_RUN_UNRECORDED = "scan_run_unrecorded"

# The error kinds of a failed run's record, by the exception that failed it.
FAILURE_KINDS: tuple[tuple[type[Exception], HTTPStatus, str], ...] = (
    (StoreUnreachable, HTTPStatus.SERVICE_UNAVAILABLE, "firestore_unavailable"),
    (StoreRefused, HTTPStatus.INTERNAL_SERVER_ERROR, "firestore_refused"),
    (QueueUnreachable, HTTPStatus.SERVICE_UNAVAILABLE, "pubsub_unavailable"),
    (Exception, HTTPStatus.INTERNAL_SERVER_ERROR, "crashed"),
)


class Verifier(Protocol):
    """Checks a request's Authorization / X-Serverless-Authorization (auth.TokenVerifier)."""

    def verify_request(self, headers: RequestHeaders) -> Caller: ...


class ScanHandler:
    """Turns one HTTP request into at most one scan run and a JSON response."""

    def __init__(
        self,
        scanner: Scanner,
        verifier: Verifier,
        clock: Clock,
        project: str,
        runs: RunRecorder | None = None,
        partitions: int = 1,
    ):
        self.scanner = scanner
        self._verifier = verifier
        self._clock = clock
        self._project = project
        self._runs = runs
        self.partitions = partitions

    def handle(self, request: flask.Request) -> flask.Response:
        run_id = Scanner.new_run_id(self._clock.now())
        with log.bind_request(log.request_trace(request.headers), self._project, run_id=run_id):
            try:
                return self._handle(request, run_id)
            except Exception as exc:
                # Last resort: a bug, not an outage (those are 503s above). One structured
                # ERROR line an alert can match, with the traceback, then a JSON 500 so
                # Cloud Scheduler records the failure and retries per its retry config.
                logger.exception(
                    "scan request failed unexpectedly",
                    extra={
                        "fields": {
                            LOG_EVENT: EVENT_SCAN_CRASHED,
                            "error_type": type(exc).__qualname__,
                        }
                    },
                )
                return json_response(
                    HTTPStatus.INTERNAL_SERVER_ERROR, {"error": "internal error", "run_id": run_id}
                )

    def _handle(self, request: flask.Request, run_id: str) -> flask.Response:
        if request.method != "POST":
            return json_response(
                HTTPStatus.METHOD_NOT_ALLOWED, {"error": "use POST"}, {"Allow": "POST"}
            )
        refusal = self._authenticate(request)
        if refusal is not None:
            return refusal
        body = request.stream.read(MAX_BODY_BYTES + 1)
        try:
            trigger = parse_trigger(body, request.headers)
            if trigger.partition >= self.partitions:
                raise TriggerError(
                    f"'partition' must be from 0 to {self.partitions - 1} "
                    f"(the deployment has {self.partitions} partition(s))"
                )
        except TriggerError as exc:
            logger.warning("bad scan request: %s", exc)
            return json_response(
                HTTPStatus.BAD_REQUEST, {"error": "bad request", "detail": str(exc)}
            )
        started_at = self._clock.now()
        try:
            run = self.scanner.run(
                dry_run=trigger.dry_run,
                run_id=run_id,
                partition=trigger.partition,
                execution=scheduled_execution(trigger.execution, started_at),
            )
        except Exception as exc:
            # Recorded first, whatever the failure: a crash is re-raised below, to the last
            # resort in handle().
            self._record_failure(run_id, started_at, exc)
            return _failure_response(exc, run_id)
        return json_response(HTTPStatus.OK, response_body(run))

    def _record_failure(self, run_id: str, started_at: datetime, exc: Exception) -> None:
        """Best effort: write the failed run's record; its log lines stay the record if not."""
        if self._runs is None:
            return
        failed = failed_run(run_id, started_at, self._clock.now(), exc)
        try:
            self._runs.record(failed)
        except RunLogError as err:
            # Firestore is likely the cause of the failure too; never mask the run's answer.
            assert failed.failure is not None
            logger.warning(
                "could not record the failed scan run; its log lines are its record: %s",
                err,
                extra={
                    "fields": {
                        LOG_EVENT: EVENT_SCAN_RUN_UNRECORDED,
                        "run_id": run_id,
                        "status": failed.failure.status,
                        "error_kind": failed.failure.kind,
                    }
                },
            )

    def _authenticate(self, request: flask.Request) -> flask.Response | None:
        try:
            caller = self._verifier.verify_request(request.headers)
        except Unauthenticated as exc:
            logger.warning("scan request refused: %s", exc)
            return json_response(
                HTTPStatus.UNAUTHORIZED,
                {"error": "unauthenticated", "detail": str(exc)},
                {"WWW-Authenticate": "Bearer"},
            )
        except Forbidden as exc:
            logger.warning("scan request refused: %s", exc)
            return json_response(HTTPStatus.FORBIDDEN, {"error": "forbidden", "detail": str(exc)})
        except CertsUnavailable as exc:
            logger.error("cannot verify the scan trigger: %s", exc)
            return json_response(
                HTTPStatus.SERVICE_UNAVAILABLE, {"error": "token certs unavailable"}
            )
        logger.debug("scan triggered", extra={"fields": {"caller": caller.email}})
        return None


def failed_run(run_id: str, started_at: datetime, finished_at: datetime, exc: Exception) -> ScanRun:
    """The record of a run that failed with `exc`: what it did, when the scanner knew, and why."""
    status, kind = next((s, k) for t, s, k in FAILURE_KINDS if isinstance(exc, t))
    failure = RunFailure.of(int(status), kind, str(exc) or type(exc).__qualname__)
    known = exc.run if isinstance(exc, ScanError) else None
    if known is not None:
        return dataclasses.replace(known, failure=failure)
    # Failed before the scanner had a tally (the control read, or a crash): no counts.
    return ScanRun(run_id, started_at, finished_at, "unavailable", failure=failure)


def _failure_response(exc: Exception, run_id: str) -> flask.Response:
    """The answer to a run that failed with `exc` (its run ID always, so the answer and the
    run's record meet); re-raises what no status describes."""
    if isinstance(exc, StoreUnreachable):
        return _unavailable("firestore unavailable", exc, run_id)
    if isinstance(exc, QueueUnreachable):
        return _unavailable("pubsub unavailable", exc, run_id)
    if not isinstance(exc, StoreRefused):
        raise exc
    # A configuration error: 500, so Cloud Scheduler records a failure, with its own ERROR
    # event, never read as an outage.
    fields = {LOG_EVENT: EVENT_STORE_REJECTED, "error_type": type(exc.__cause__).__name__}
    if exc.run is not None:
        fields.update(log_fields(exc.run), **{LOG_EVENT: EVENT_STORE_REJECTED})
    logger.error("scan run stopped: Firestore refused: %s", exc, extra={"fields": fields})
    refused: dict[str, Any] = {"error": "firestore refused", "detail": str(exc), "run_id": run_id}
    if exc.run is not None:
        refused.update(response_body(exc.run))
    return json_response(HTTPStatus.INTERNAL_SERVER_ERROR, refused)


def _unavailable(
    error: str, exc: StoreUnreachable | QueueUnreachable, run_id: str
) -> flask.Response:
    logger.error("scan run failed: %s: %s", error, exc)
    body: dict[str, Any] = {"error": error, "detail": str(exc), "run_id": run_id}
    if exc.run is not None:
        body.update(response_body(exc.run))
    return json_response(HTTPStatus.SERVICE_UNAVAILABLE, body)


def create_app(
    settings: ScanSettings,
    *,
    clock: Clock | None = None,
    store: FirestoreJobStore | None = None,
    publisher: JobPublisher | None = None,
    metrics: MetricsSink | None = None,
    verifier: Verifier | None = None,
    runs: RunRecorder | None = None,
    firestore_client: Any = None,
    leases: LeaseKeeper | None = None,
    sleep: Sleep | None = None,
    queue_age: QueueAgeSource | None = None,
    rates: Mapping[str, float] | None = None,
) -> flask.Flask:
    """The scan app; builds each dependency that is not injected (clients are built here).
    `sleep` is how a paced run waits (time.sleep; a FakeClock's advance in tests);
    `queue_age` where the stale-enqueued rescue reads the backlog age (else built from
    JOBS_SUBSCRIPTION, none when unset)."""
    clock = clock or SystemClock()
    if store is None or runs is None:
        firestore_client = firestore_client or _firestore_client(settings.project)
    if leases is None and firestore_client is not None:
        # Whenever the app talks to Firestore itself (always, in production: main.py
        # injects only the publisher). Tests that inject a fake store and run log keep no
        # leases unless they pass some.
        leases = PartitionLeases(firestore_client, timeout_s=settings.firestore_timeout_s)
    if store is None:
        store = _store(firestore_client, clock, settings)
    if runs is None:
        runs = ScanRunLog(
            firestore_client,
            retention=timedelta(seconds=settings.run_retention_s),
            timeout_s=settings.firestore_timeout_s,
        )
    if publisher is None:
        publisher = Publisher.create(
            settings.project, settings.topic, timeout_s=settings.publish_timeout_s
        )
    verifier = verifier or TokenVerifier(
        AuthPolicy(
            audience=settings.audience,
            allowed_emails=allowed_emails(settings.allowed_invokers),
            certs_url=settings.certs_url,
            clock_skew_s=settings.auth_clock_skew_s,
            behind_cloud_run_iam=settings.behind_cloud_run_iam,
        )
    )
    scanner = Scanner(
        store,
        publisher,
        clock,
        settings.limits(),
        runs=runs,
        metrics=metrics or build_sink(settings.metrics, settings.project),
        leases=leases,
        sleep=sleep,
        queue_age=queue_age or build_queue_age(settings, clock),
        # Each lane's claim rate: the catalogue's budgets and each HTTP target's `rate`
        # (key http.request/<target>; services/jobs/lanes.py).
        rates=scan_rates(settings) if rates is None else rates,
    )
    handler = ScanHandler(
        scanner, verifier, clock, settings.project, runs, partitions=settings.partitions
    )
    app = flask.Flask(__name__)
    app.extensions[EXTENSION_KEY] = handler
    app.add_url_rule(
        "/", "scan", lambda: handler.handle(flask.request), methods=["POST", "GET", "PUT"]
    )
    return app


def scan_rates(settings: ScanSettings) -> dict[str, float]:
    """The claim rates of the scan's lanes: the catalogue's budgets and the targets' rates.
    Raises ValueError naming the lane keys beyond Firestore's not-in limit, and the key."""
    try:
        return claim_rates(load_catalogue(), target_rates(settings.http_targets))
    except ValueError as exc:
        raise ValueError(
            f"{exc} (the rated actions are the catalogue's budgets; the targets' rates are "
            f"{HTTP_TARGETS}'s `rate` fields)"
        ) from exc


def handler_of(app: flask.Flask) -> ScanHandler:
    """The handler inside an app built by create_app."""
    handler = app.extensions[EXTENSION_KEY]
    assert isinstance(handler, ScanHandler)
    return handler


def _firestore_client(project: str) -> Any:
    from google.cloud import firestore

    return firestore.Client(project=project)


def _store(client: Any, clock: Clock, settings: ScanSettings) -> FirestoreJobStore:
    from services.store.job_store import FirestoreJobStore

    # The retention matters here too: the reclaimer fails jobs whose last lease expired, and
    # a failed job's expire_at is set from it. The timeout bounds every Firestore call.
    store: FirestoreJobStore = FirestoreJobStore(
        client,
        clock,
        terminal_retention=timedelta(seconds=settings.terminal_retention_s),
        timeout_s=settings.firestore_timeout_s,
        shards=settings.shards,
        max_clock_skew=timedelta(seconds=settings.max_clock_skew_s),
    )
    return store
