"""The console's HTTP layer: who is asking, route, read the store, render a page.

`create_app(settings, ...)` builds a Flask app whose every path goes to one `ConsoleHandler`,
as under functions-framework (`main.py`), where the target function receives every request.
Status codes: 200 a page, 303 after a change (back to the page that shows it), 400 a bad field
(the page names it), 401 no or an invalid IAP assertion, 403 a user with no role, a viewer's
POST or a failed CSRF check, 404 an unknown path or job, 405 a wrong method, 503 when Firestore
or IAP's keys cannot be reached. The assertion never appears in a log line.

Writes are POSTs from the console's own forms, each carrying a CSRF token equal to the
`console_csrf` cookie (SameSite=Strict, HttpOnly): a page of another site can neither read the
cookie nor make the browser send it (the double-submit pattern,
https://cheatsheetseries.owasp.org/cheatsheets/Cross-Site_Request_Forgery_Prevention_Cheat_Sheet.html);
a POST whose Origin header names another site is refused too.
"""

from __future__ import annotations

import hmac
import json
import logging
import secrets
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from http import HTTPStatus
from typing import TYPE_CHECKING, Any
from urllib.parse import quote, urlencode, urlsplit

import flask
from werkzeug.exceptions import HTTPException, MethodNotAllowed, NotFound
from werkzeug.routing import Map, Rule

from services.console import pages
from services.console.identity import IapVerifier, Principal, Role, Roles
from services.console.settings import ConsoleSettings
from services.edge.auth_errors import CertsUnavailable, Forbidden, Unauthenticated
from services.jobs.bulk import (
    DEFAULT_BATCH,
    DEFAULT_CONFIRM_OVER,
    FILTER_FIELDS,
    KIND_STATES,
    BulkKind,
    Change,
    JobFilter,
    Progress,
    check_preview,
    examples,
    operation_id,
    parse_instant,
    parse_kind,
    require_kind_state,
    run_batch,
)
from services.jobs.catalogue import Catalogue, load_catalogue
from services.jobs.clock import Clock, SystemClock
from services.jobs.deployment import Deployment
from services.jobs.durations import DurationError, parse_duration
from services.jobs.errors import JobsError, StoreUnavailable, ValidationError
from services.jobs.forecast import STEPS
from services.jobs.lanes import claim_rates
from services.jobs.plan import PlanError, describe, plan_drain
from services.jobs.ramp import Ramp
from services.jobs.state import State
from services.store.rejections import RejectionStore
from services.store.runs import RunLogError, ScanRun, ScanRunLog
from services.telemetry.metrics import LOG_EVENT

if TYPE_CHECKING:
    from services.store.job_store import FirestoreJobStore

logger = logging.getLogger(__name__)

EXTENSION = "deferred_jobs_console"
EVENT_CONSOLE_REQUEST = "console_request"
CSRF_COOKIE = "console_csrf"
CSRF_FIELD = "csrf"
PAGE_SIZE = 50
RECENT_RUNS = 30
DEFAULT_HORIZON = "7d"
_HIDDEN_PROGRESS = ("operation", "read_time", "count", "cursor", "changed", "skipped", "batches")

ROUTES = Map(
    [
        Rule("/", endpoint="overview", methods=["GET"]),
        Rule("/calendar", endpoint="calendar", methods=["GET"]),
        Rule("/jobs", endpoint="jobs", methods=["GET"]),
        Rule("/jobs/<path:job_id>", endpoint="job", methods=["GET"]),
        Rule("/bulk", endpoint="bulk_preview", methods=["GET"]),
        Rule("/bulk", endpoint="bulk_run", methods=["POST"]),
        Rule("/dead-letters", endpoint="dead", methods=["GET"]),
        Rule("/control", endpoint="control", methods=["GET"]),
        Rule("/control", endpoint="control_change", methods=["POST"]),
        Rule("/static/console.css", endpoint="css", methods=["GET"]),
        Rule("/static/console.js", endpoint="js", methods=["GET"]),
    ],
    strict_slashes=False,
)


class PageError(Exception):
    """A request the console answers with an error page."""

    def __init__(self, status: HTTPStatus, message: str) -> None:
        super().__init__(message)
        self.status = status
        self.message = message


@dataclass
class _Request:
    """One request's context: who, its CSRF token, and whether that token is new."""

    who: Principal
    csrf: str
    new_csrf: bool
    here: str


class ConsoleHandler:
    """One HTTP request → one response, never an exception."""

    def __init__(
        self,
        store: FirestoreJobStore,
        runs: ScanRunLog,
        rejections: RejectionStore,
        clock: Clock,
        *,
        roles: Roles,
        verifier: IapVerifier | None,
        stand_in: str | None,
        catalogue: Catalogue,
    ) -> None:
        self._store = store
        self._runs = runs
        self._rejections = rejections
        self._clock = clock
        self._roles = roles
        self._verifier = verifier
        self._stand_in = stand_in
        self._catalogue = catalogue
        self._env = pages.environment()
        self._pages: dict[str, Callable[[flask.Request, _Request, Mapping[str, Any]], Any]] = {
            "overview": self._overview,
            "calendar": self._calendar,
            "jobs": self._jobs,
            "job": self._job,
            "bulk_preview": self._bulk_preview,
            "bulk_run": self._bulk_run,
            "dead": self._dead,
            "control": self._control,
            "control_change": self._control_change,
        }

    # -- the request ------------------------------------------------------------------------

    def handle(self, request: flask.Request) -> flask.Response:
        started = time.monotonic()
        who: Principal | None = None
        try:
            adapter = ROUTES.bind_to_environ(request.environ)
            endpoint, values = adapter.match()
            if endpoint == "css":
                return _static(pages.STYLE, "text/css")
            if endpoint == "js":
                return _static(pages.SCRIPT, "text/javascript")
            who = self._identify(request)
            context = self._context(request, who)
            if request.method == "POST":
                self._check_post(request, context)
            answer = self._pages[endpoint](request, context, values)
            if isinstance(answer, flask.Response):
                response = answer
            else:
                template, title, page_values = answer
                response = self._page(template, title, page_values, context)
            if context.new_csrf:
                _set_csrf(response, context.csrf, request)
        except PageError as exc:
            response = self._error(exc.status, exc.message, who, request)
        except (NotFound, MethodNotAllowed) as exc:
            response = self._error(HTTPStatus(exc.code or 404), exc.description or "", who, request)
        except HTTPException as exc:
            response = self._error(HTTPStatus(exc.code or 400), exc.description or "", who, request)
        except Exception:
            logger.exception("console request failed unexpectedly")
            response = self._error(
                HTTPStatus.INTERNAL_SERVER_ERROR, "the console failed; see its log", who, request
            )
        response.headers["Content-Security-Policy"] = (
            "default-src 'self'; img-src 'self' data:; frame-ancestors 'none'"
        )
        response.headers["X-Content-Type-Options"] = "nosniff"
        response.headers["Cache-Control"] = "no-store"
        logger.info(
            "%s %s → %d",
            request.method,
            request.path[:200],
            response.status_code,
            extra={
                "fields": {
                    LOG_EVENT: EVENT_CONSOLE_REQUEST,
                    "user": who.email if who else None,
                    "status": response.status_code,
                    "latency_ms": round((time.monotonic() - started) * 1000, 1),
                }
            },
        )
        return response

    def _identify(self, request: flask.Request) -> Principal:
        try:
            if self._stand_in is not None:
                try:
                    role = self._roles.of(self._stand_in)
                except Forbidden:
                    role = Role.OPERATOR  # locally the stand-in acts unless listed as a viewer
                return Principal(self._stand_in, role, stand_in=True)
            assert self._verifier is not None
            email = self._verifier.verify(request.headers)
            return Principal(email, self._roles.of(email))
        except Unauthenticated as exc:
            logger.warning("console request refused: %s", exc)
            raise PageError(HTTPStatus.UNAUTHORIZED, str(exc)) from exc
        except Forbidden as exc:
            raise PageError(HTTPStatus.FORBIDDEN, str(exc)) from exc
        except CertsUnavailable as exc:
            raise PageError(
                HTTPStatus.SERVICE_UNAVAILABLE, f"cannot verify IAP now: {exc}"
            ) from exc

    def _context(self, request: flask.Request, who: Principal) -> _Request:
        token = request.cookies.get(CSRF_COOKIE, "")
        new = len(token) < 32
        if new:
            token = secrets.token_urlsafe(32)
        return _Request(who, token, new, request.path)

    def _check_post(self, request: flask.Request, context: _Request) -> None:
        if not context.who.may_act:
            raise PageError(
                HTTPStatus.FORBIDDEN,
                f"{context.who.email} is a viewer: changes need the operator role",
            )
        origin = request.headers.get("Origin")
        if origin and urlsplit(origin).netloc != request.host:
            raise PageError(HTTPStatus.FORBIDDEN, "the form was sent from another site")
        sent = request.form.get(CSRF_FIELD, "")
        cookie = request.cookies.get(CSRF_COOKIE, "")
        if not cookie or not hmac.compare_digest(sent.encode(), cookie.encode()):
            raise PageError(
                HTTPStatus.FORBIDDEN,
                "the form's CSRF token does not match: reload the page and try again",
            )

    def _page(
        self, template: str, title: str, values: Mapping[str, Any], context: _Request
    ) -> flask.Response:
        html = self._env.get_template(f"{template}.html").render(
            title=title, who=context.who, here=context.here, csrf=context.csrf, **values
        )
        return flask.Response(html, status=200, mimetype="text/html")

    def _error(
        self, status: HTTPStatus, message: str, who: Principal | None, request: flask.Request
    ) -> flask.Response:
        title = f"{int(status)} {status.phrase}"
        if who is None:
            html = self._env.get_template("bare_error.html").render(title=title, message=message)
        else:
            html = self._env.get_template("error.html").render(
                title=title, message=message, who=who, here=request.path, csrf=""
            )
        return flask.Response(html, status=int(status), mimetype="text/html")

    def _read(self, operation: Callable[[], Any]) -> Any:
        try:
            return operation()
        except ValidationError as exc:
            raise PageError(HTTPStatus.BAD_REQUEST, str(exc)) from exc
        except StoreUnavailable as exc:
            raise PageError(
                HTTPStatus.SERVICE_UNAVAILABLE, f"Firestore is unavailable: {exc}"
            ) from exc
        except RunLogError as exc:
            raise PageError(
                HTTPStatus.SERVICE_UNAVAILABLE, f"Firestore is unavailable: {exc}"
            ) from exc

    # -- pages ------------------------------------------------------------------------------

    def _overview(self, request: flask.Request, c: _Request, _: Mapping[str, Any]) -> Any:
        now = self._clock.now()
        control = self._read(self._store.get_control)
        stats = self._read(
            lambda: self._store.stats(now, control.claim_timeout, shard_census=False)
        )
        runs: list[ScanRun] = self._read(lambda: self._runs.recent(RECENT_RUNS))
        oldest_first = list(reversed(runs))
        drain = _drain_rate(runs)
        eta = "-"
        if stats.due_count:
            try:
                eta = pages.age(plan_drain(stats.due_count, control.rate_at(now)).seconds)
            except PlanError:
                eta = "-"
        values = {
            "now": now,
            "control": control,
            "stats": stats,
            "runs": runs,
            "drain": drain,
            "eta": eta,
            "stale": f"{runs[0].stale_enqueued:,}" if runs else "-",
            "age_chart": pages.line_chart([r.oldest_overdue_age_s for r in oldest_first]),
            "rate_chart": pages.line_chart(
                [r.drain_rate_per_s for r in oldest_first], reference=control.rate_at(now)
            ),
        }
        return "overview", "Overview", values

    def _calendar(self, request: flask.Request, c: _Request, _: Mapping[str, Any]) -> Any:
        horizon_text = request.args.get("horizon", DEFAULT_HORIZON)
        step = request.args.get("step", "hour")
        try:
            horizon = parse_duration(horizon_text)
        except DurationError as exc:
            raise PageError(HTTPStatus.BAD_REQUEST, f"horizon: {exc}") from exc
        control = self._read(self._store.get_control)
        calendar = self._read(
            lambda: self._store.calendar(
                self._clock.now(),
                horizon,
                step,
                actions=self._catalogue.names(),
                rates=claim_rates(self._catalogue),
                catch_up_rate=control.catch_up_rate,
            )
        )
        over = [
            any(r.over[i] for r in calendar.rows if r.over) for i in range(len(calendar.windows))
        ]
        values = {
            "cal": calendar,
            "horizon": horizon_text,
            "steps": sorted(STEPS),
            "peak": calendar.peak(),
            "chart": pages.bar_chart(calendar.totals, over),
            "shown": [i for i, n in enumerate(calendar.totals) if n],
        }
        return "calendar", "Calendar", values

    def _filter(self, args: Mapping[str, str], default_state: str = "deferred") -> JobFilter:
        fields = {k: args.get(k, "") for k in FILTER_FIELDS}
        fields["state"] = fields["state"] or default_state
        try:
            return JobFilter.parse(fields)
        except ValidationError as exc:
            raise PageError(HTTPStatus.BAD_REQUEST, str(exc)) from exc

    def _jobs(self, request: flask.Request, c: _Request, _: Mapping[str, Any]) -> Any:
        job_filter = self._filter(request.args)
        cursor = request.args.get("cursor") or None
        page = self._read(
            lambda: self._store.matching_page(
                job_filter, read_time=None, cursor=cursor, limit=PAGE_SIZE
            )
        )
        values = {
            "page": page,
            "fields": job_filter.as_fields(),
            "query": urlencode(job_filter.as_fields()),
            "states": [s.value for s in State],
            "actions": self._catalogue.names(),
            "kinds": [k.value for k in BulkKind if job_filter.state in KIND_STATES[k]],
            "job_url": _job_url,
        }
        return "jobs", f"Jobs: {job_filter.describe()}", values

    def _job(self, request: flask.Request, c: _Request, values: Mapping[str, Any]) -> Any:
        job_id = values["job_id"]
        job = self._read(lambda: self._store.get(job_id))
        if job is None:
            raise PageError(HTTPStatus.NOT_FOUND, f"job {job_id!r} not found")
        record = [
            ("job ID", job.job_id),
            ("state", job.state.value),
            ("action", job.action),
            ("subject", job.subject),
            ("params", json.dumps(dict(job.params), sort_keys=True)),
            ("due at (UTC)", pages.when(job.due_at)),
            ("first due at (UTC)", pages.when(job.scheduled_due_at)),
            ("attempt", f"{job.attempt} of {job.max_attempts}"),
            ("producer", job.producer or "-"),
            ("created (UTC)", pages.when(job.created_at)),
            ("updated (UTC)", pages.when(job.updated_at)),
            (
                "claim",
                f"generation {job.claim.generation} by {job.claim.run_id}" if job.claim else "-",
            ),
            ("cancel requested", job.cancel_requested.by if job.cancel_requested else "-"),
        ]
        result = (
            json.dumps(job.result.to_document(), sort_keys=True, indent=2, default=str)
            if job.result
            else ""
        )
        return "job", f"Job {job.job_id}", {"job": job, "record": record, "result": result}

    def _bulk_preview(self, request: flask.Request, c: _Request, _: Mapping[str, Any]) -> Any:
        if not c.who.may_act:
            raise PageError(
                HTTPStatus.FORBIDDEN,
                f"{c.who.email} is a viewer: bulk actions need the operator role",
            )
        kind = request.args.get("kind", "")
        job_filter = self._filter(request.args, default_state="")
        self._call(lambda: require_kind_state(parse_kind(kind), job_filter.state))
        count, read_time = self._read(lambda: self._store.count_matching(job_filter))
        hidden = {
            "kind": kind,
            **job_filter.as_fields(),
            "read_time": read_time.isoformat(),
            "count": count,
        }
        values = {
            "kind": kind,
            "describe": job_filter.describe(),
            "count": count,
            "read_time": read_time,
            "hidden": hidden,
            "threshold": DEFAULT_CONFIRM_OVER,
        }
        return "bulk_preview", f"Bulk {kind}: preview", values

    def _bulk_run(self, request: flask.Request, c: _Request, _: Mapping[str, Any]) -> Any:
        form = request.form
        job_filter = self._filter(form, default_state="")
        change = self._change(
            form.get("kind", ""), form.get("reason", ""), form.get("to", ""), form.get("offset", "")
        )
        try:
            read_time = parse_instant(form.get("read_time", ""))
            count = int(form.get("count", ""))
            done_so_far = [int(form.get(k) or 0) for k in ("changed", "skipped", "batches")]
        except ValueError as exc:
            raise PageError(
                HTTPStatus.BAD_REQUEST, f"the form's progress fields are not valid: {exc}"
            ) from exc
        by = f"console:{c.who.email}"
        operation = form.get("operation", "")
        if not operation:  # the first batch: the confirmation, once
            self._call(lambda: check_preview(count, form.get("confirm", ""), DEFAULT_CONFIRM_OVER))
            operation = operation_id(by, read_time, job_filter.as_fields(), change)
        changed, skipped, batches = done_so_far
        progress = Progress(count, changed=changed, skipped=skipped, batches=batches)
        cursor = form.get("cursor") or None
        stopped = form.get("stop") == "1"
        done = False
        if not stopped:
            batch = self._call(
                lambda: run_batch(
                    self._store,
                    job_filter,
                    change,
                    by=by,
                    operation=operation,
                    read_time=read_time,
                    cursor=cursor,
                    limit=DEFAULT_BATCH,
                    now=self._clock.now(),
                )
            )
            progress.add(batch)
            cursor, done = batch.next_cursor, batch.done
            logger.info(
                "bulk %s batch %d: %d changed, %d skipped",
                change.kind.value,
                progress.batches,
                len(batch.changed),
                len(batch.skipped),
                extra={"fields": {"operation": operation, "user": c.who.email}},
            )
        hidden = {
            "kind": change.kind.value,
            **job_filter.as_fields(),
            "reason": change.reason,
            "to": change.to.isoformat() if change.to else "",
            "offset": form.get("offset", ""),
            "operation": operation,
            "read_time": read_time.isoformat(),
            "count": count,
            "cursor": cursor or "",
            "changed": progress.changed,
            "skipped": progress.skipped,
            "batches": progress.batches,
        }
        values = {
            "describe": job_filter.describe(),
            "operation": operation,
            "count": count,
            "handled": progress.handled,
            "changed": progress.changed,
            "skipped": progress.skipped,
            "batches": progress.batches,
            "examples": examples(progress.skipped_examples),
            "done": done,
            "stopped": stopped,
            "hidden": hidden,
            "query": urlencode(job_filter.as_fields()),
        }
        return "bulk_progress", f"Bulk {change.kind.value}", values

    def _change(self, kind: str, reason: str, to: str = "", offset: str = "") -> Change:
        return self._call(lambda: Change.parse(kind, reason, to, offset))

    def _call(self, operation: Callable[[], Any]) -> Any:
        try:
            return self._read(operation)
        except JobsError as exc:
            raise PageError(HTTPStatus.CONFLICT, str(exc)) from exc

    def _dead(self, request: flask.Request, c: _Request, _: Mapping[str, Any]) -> Any:
        failed_filter = JobFilter(State.FAILED)
        count, _at = self._read(lambda: self._store.count_matching(failed_filter))
        page = self._read(
            lambda: self._store.matching_page(
                failed_filter, read_time=None, cursor=None, limit=PAGE_SIZE
            )
        )
        rejected = self._read(lambda: self._rejections.recent(PAGE_SIZE))
        values = {
            "failed_count": count,
            "failed": page.jobs,
            "rejected": rejected,
            "job_url": _job_url,
        }
        return "dead", "Dead letters and rejected messages", values

    def _control(self, request: flask.Request, c: _Request, _: Mapping[str, Any]) -> Any:
        now = self._clock.now()
        control = self._read(self._store.get_control)
        stats = self._read(
            lambda: self._store.stats(now, control.claim_timeout, shard_census=False)
        )
        try:
            plan = describe(plan_drain(stats.due_count, control.catch_up_rate))
        except PlanError as exc:
            plan = str(exc)
        return "control", "Control", {"control": control, "now": now, "plan": plan}

    def _control_change(self, request: flask.Request, c: _Request, _: Mapping[str, Any]) -> Any:
        form = request.form
        op = form.get("op", "")
        reason = form.get("reason", "")
        by = f"console:{c.who.email}"
        changes: dict[str, Any]
        if op == "pause":
            changes = {"paused": True}
        elif op == "resume":
            changes = {"paused": False}
            current = self._read(self._store.get_control)
            if form.get("ramp") == "1":
                changes["ramp"] = Ramp(started_at=self._clock.now())
            elif current.ramp is not None:
                changes["ramp"] = None  # a resume without a ramp: the set rate applies at once
        elif op == "rate":
            try:
                changes = {"catch_up_rate": float(form.get("rate", ""))}
            except ValueError:
                raise PageError(
                    HTTPStatus.BAD_REQUEST, "rate: must be a number of jobs per second"
                ) from None
        else:
            raise PageError(HTTPStatus.BAD_REQUEST, f"op: {op[:20]!r} is not pause, resume or rate")
        self._call(lambda: self._store.update_control(by, reason, **changes))
        return flask.redirect("/control", code=HTTPStatus.SEE_OTHER)


def _job_url(job_id: str) -> str:
    return "/jobs/" + quote(job_id, safe="")


def _drain_rate(runs: list[ScanRun]) -> float | None:
    """Jobs published per second over the span of the recent runs (newest first)."""
    if len(runs) < 2:
        return None
    span = (runs[0].finished_at - runs[-1].started_at).total_seconds()
    return sum(r.published for r in runs) / span if span > 0 else None


def _static(body: str, mimetype: str) -> flask.Response:
    response = flask.Response(body, mimetype=mimetype)
    response.headers["Cache-Control"] = "public, max-age=300"
    return response


def _set_csrf(response: flask.Response, token: str, request: flask.Request) -> None:
    response.set_cookie(
        CSRF_COOKIE,
        token,
        httponly=True,
        samesite="Strict",
        secure=request.scheme == "https",
        path="/",
    )


def create_app(
    settings: ConsoleSettings,
    *,
    clock: Clock | None = None,
    firestore_client: Any = None,
    catalogue: Catalogue | None = None,
    keys_request: Any = None,
) -> flask.Flask:
    """The console's Flask app; clients are built here (never at import) unless injected."""
    from google.cloud import firestore

    from services.store.job_store import FirestoreJobStore

    clock = clock or SystemClock()
    if catalogue is None:
        catalogue = load_catalogue(deployment=Deployment(http_targets=settings.http_targets))
    client = firestore_client or firestore.Client(project=settings.project)
    store = FirestoreJobStore(
        client,
        clock,
        terminal_retention=settings.terminal_retention,
        timeout_s=settings.firestore_timeout_s,
        shards=settings.shards,
        known_actions=catalogue,
    )
    # The run log only reads here; its retention matters only to writes.
    runs = ScanRunLog(
        client, retention=settings.terminal_retention, timeout_s=settings.firestore_timeout_s
    )
    verifier = None
    if settings.stand_in_identity is None:
        verifier = IapVerifier(
            settings.iap_audience,
            settings.iap_keys_url,
            clock_skew_s=settings.auth_clock_skew_s,
            request=keys_request,
        )
    handler = ConsoleHandler(
        store,
        runs,
        RejectionStore(client, timeout_s=settings.firestore_timeout_s),
        clock,
        roles=Roles(settings.viewers, settings.operators),
        verifier=verifier,
        stand_in=settings.stand_in_identity,
        catalogue=catalogue,
    )
    app = flask.Flask("deferred_jobs_console")
    app.extensions[EXTENSION] = handler
    methods = ["GET", "POST", "PUT", "PATCH", "DELETE", "HEAD", "OPTIONS"]

    @app.route("/", methods=methods, defaults={"path": ""})
    @app.route("/<path:path>", methods=methods)
    def console(path: str) -> flask.Response:
        return handler.handle(flask.request)

    return app


def handler_of(app: flask.Flask) -> ConsoleHandler:
    handler = app.extensions[EXTENSION]
    assert isinstance(handler, ConsoleHandler)
    return handler
