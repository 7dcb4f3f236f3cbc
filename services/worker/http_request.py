"""`http.request`: call a named HTTP target (a service in any language) for a job.

The job's params name a target from the deployment's `JOBS_HTTP_TARGETS`, a path under it, a
method (POST by default) and optionally a JSON body (checked at schedule time by
`services.jobs.http_targets.request_params_problems`; checked again here, since a target may
have left the configuration meanwhile). The call carries:

- `Authorization: Bearer <ID token>`: a Google-signed ID token of the worker's own service
  account for the target's audience, from the metadata server in Cloud Run
  (`google.oauth2.id_token.fetch_id_token`,
  https://cloud.google.com/docs/authentication/get-id-token#metadata-server), or from the local
  OIDC issuer under `make run`; a Cloud Run target with IAM on checks it itself;
- `Idempotency-Key`: the job's idempotency key, the same in every delivery and attempt, so the
  target can make a repeated call harmless (the worker's delivery is at least once);
- `X-Deferred-Job-Id`, `X-Deferred-Job-Attempt`, `X-Deferred-Job-Deadline` (RFC 3339: when the
  worker stops waiting).

Redirects are never followed (a 3xx is permanent): the worker calls exactly the target's URL.
What the answer means is `services.jobs.http_targets.judge`.
"""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Callable, Mapping
from datetime import UTC, datetime, timedelta
from typing import TYPE_CHECKING, Protocol

import google.auth.exceptions
import google.auth.transport.requests
import google.oauth2.id_token
import requests

from services.jobs.actions import Action, ActionFn, ActionRequest, ActionResult, RetryPolicy
from services.jobs.errors import PermanentError, RetryAfter, TransientError
from services.jobs.http_request import ACTION_NAME
from services.jobs.http_targets import (
    DEFAULT_METHOD,
    HttpTarget,
    excerpt,
    judge,
    request_params_problems,
)

if TYPE_CHECKING:
    from services.worker.actions import ActionContext

# An ID token lives an hour; take a new one this long before it ends.
TOKEN_REFRESH_MARGIN_S = 300.0
TOKEN_LIFETIME_S = 3600.0


class IdTokens(Protocol):
    """Google-signed ID tokens of the worker's account, per audience."""

    def token(self, audience: str) -> str: ...


class MetadataIdTokens:
    """From the metadata server (Cloud Run), cached per audience until near their end."""

    def __init__(self, fetch: Callable[[str], str] | None = None) -> None:
        self._fetch = fetch or self._from_metadata
        self._lock = threading.Lock()
        self._cache: dict[str, tuple[str, float]] = {}

    @staticmethod
    def _from_metadata(audience: str) -> str:
        request = google.auth.transport.requests.Request()
        return str(google.oauth2.id_token.fetch_id_token(request, audience))

    def token(self, audience: str) -> str:
        now = time.monotonic()
        with self._lock:
            cached = self._cache.get(audience)
            if cached and cached[1] > now:
                return cached[0]
        fresh = self._fetch(audience)
        with self._lock:
            self._cache[audience] = (fresh, now + TOKEN_LIFETIME_S - TOKEN_REFRESH_MARGIN_S)
        return fresh


class IssuerIdTokens(MetadataIdTokens):
    """From the local OIDC issuer's token endpoint (`make run`), for the worker's email."""

    def __init__(self, token_url: str, email: str, session: requests.Session) -> None:
        def fetch(audience: str) -> str:
            answer = session.post(
                token_url, json={"audience": audience, "email": email}, timeout=10
            )
            answer.raise_for_status()
            return str(answer.json()["token"])

        super().__init__(fetch)


def build_http_request(context: ActionContext) -> ActionFn:
    """The declaration's `build` (services/jobs/http_request.py): the call over the worker's
    configured targets, with ID tokens from the metadata server (Cloud Run) or, when the
    settings name one, the local OIDC issuer (make run); called once at the worker's start."""
    settings = context.settings
    session = requests.Session()
    tokens: IdTokens
    if settings.id_token_url and settings.id_token_email:
        tokens = IssuerIdTokens(settings.id_token_url, settings.id_token_email, session)
    else:
        tokens = MetadataIdTokens()
    return http_request_call(settings.http_targets, tokens, session)


def http_request_action(
    targets: Mapping[str, HttpTarget],
    tokens: IdTokens,
    session: requests.Session,
    *,
    now: Callable[[], datetime] = lambda: datetime.now(UTC),
    policy: RetryPolicy | None = None,
) -> Action:
    """The `http.request` action over these targets, bound (for a registry of its own)."""
    return Action(
        ACTION_NAME, http_request_call(targets, tokens, session, now=now), policy or RetryPolicy()
    )


def http_request_call(
    targets: Mapping[str, HttpTarget],
    tokens: IdTokens,
    session: requests.Session,
    *,
    now: Callable[[], datetime] = lambda: datetime.now(UTC),
) -> ActionFn:
    """The callable that performs `http.request` over these targets."""
    limits = {
        name: threading.BoundedSemaphore(target.concurrency)
        for name, target in targets.items()
        if target.concurrency
    }

    def run(request: ActionRequest) -> ActionResult:
        params = request.params
        problems = request_params_problems(params, targets)
        if problems:
            raise PermanentError("; ".join(problems))
        target = targets[params["target"]]
        slot = limits.get(target.name)
        if slot is not None and not slot.acquire(timeout=target.timeout_s):
            raise TransientError(f"target {target.name!r}: its concurrency is in use")
        try:
            return call(target, request)
        finally:
            if slot is not None:
                slot.release()

    def call(target: HttpTarget, request: ActionRequest) -> ActionResult:
        params = request.params
        method = params.get("method", DEFAULT_METHOD)
        timeout_s = target.timeout_s
        deadline = now() + timedelta(seconds=timeout_s)
        try:
            headers = {
                "Authorization": f"Bearer {tokens.token(target.audience)}",
                "Idempotency-Key": request.idempotency_key,
                "X-Deferred-Job-Id": request.job_id,
                "X-Deferred-Job-Attempt": str(request.attempt),
                "X-Deferred-Job-Deadline": deadline.isoformat().replace("+00:00", "Z"),
            }
        except (google.auth.exceptions.GoogleAuthError, requests.RequestException) as exc:
            raise TransientError(f"no ID token for {target.audience}: {exc}") from exc
        data = None
        if "body" in params:
            headers["Content-Type"] = "application/json"
            data = json.dumps(params["body"]).encode()
        url = target.url_for(params["path"])
        try:
            answer = session.request(
                method,
                url,
                data=data,
                headers=headers,
                timeout=timeout_s,
                allow_redirects=False,
                stream=True,
            )
        except requests.RequestException as exc:  # timeouts and connection errors among them
            raise TransientError(f"{method} {target.name}{params['path']}: {exc}") from exc
        with answer:
            body = answer.raw.read(4096, decode_content=True) or b""
        verdict = judge(answer.status_code, answer.headers.get("Retry-After"), now())
        where = f"{method} {target.name}{params['path']} answered {answer.status_code}"
        if verdict.verdict == "done":
            return ActionResult("called", {"status": answer.status_code, "body": excerpt(body)})
        if verdict.verdict == "retry_after":
            assert verdict.retry_after_s is not None
            # The pause is this target's (http.request/<target>), not every target's.
            raise RetryAfter(
                verdict.retry_after_s,
                f"{where}; Retry-After {verdict.retry_after_s:g} s",
                target=target.name,
            )
        if verdict.verdict == "transient":
            raise TransientError(f"{where}: {excerpt(body[:200])}")
        raise PermanentError(f"{where}: {excerpt(body[:200])}")

    return run
