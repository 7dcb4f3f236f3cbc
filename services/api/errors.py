"""The API's refusals, in Google's error model, and the mapping from the store's domain errors.

Every answer that is not a success has the body Google's APIs use
(https://cloud.google.com/apis/design/errors):

    {"error": {"code": 400, "message": "...", "status": "INVALID_ARGUMENT",
               "details": [{"@type": "type.googleapis.com/google.rpc.BadRequest",
                            "fieldViolations": [{"field": "due_at", "description": "..."}]}]}}

`code` is the HTTP status; `status` the canonical `google.rpc.Code` name with Google's HTTP
mapping (https://cloud.google.com/apis/design/errors#handling_errors); the field a refusal is
about is named in `fieldViolations` (google.rpc.BadRequest) and at the start of `message`.
"""

from __future__ import annotations

import logging
import re
from collections.abc import Sequence
from dataclasses import dataclass
from http import HTTPStatus
from typing import Any

from services.jobs.errors import (
    AlreadyTerminal,
    InvalidRecord,
    InvalidTransition,
    JobNotFound,
    JobsError,
    LostRace,
    NewerRecord,
    ScheduleConflict,
    StoreRejected,
    StoreUnavailable,
    ValidationError,
)
from services.telemetry import metrics

logger = logging.getLogger(__name__)

BAD_REQUEST_TYPE = "type.googleapis.com/google.rpc.BadRequest"


@dataclass(frozen=True)
class FieldViolation:
    field: str
    description: str


class ApiError(Exception):
    """The request was refused."""

    def __init__(
        self,
        http: HTTPStatus,
        status: str,
        message: str,
        violations: Sequence[FieldViolation] = (),
        headers: dict[str, str] | None = None,
    ) -> None:
        super().__init__(message)
        self.http = http
        self.status = status
        self.message = message
        self.violations = tuple(violations)
        self.headers = dict(headers or {})

    def body(self) -> dict[str, Any]:
        error: dict[str, Any] = {
            "code": int(self.http),
            "message": self.message,
            "status": self.status,
        }
        if self.violations:
            error["details"] = [
                {
                    "@type": BAD_REQUEST_TYPE,
                    "fieldViolations": [
                        {"field": v.field, "description": v.description} for v in self.violations
                    ],
                }
            ]
        return {"error": error}


def invalid(field: str, description: str) -> ApiError:
    """400 INVALID_ARGUMENT about one field of the request."""
    return invalid_fields([FieldViolation(field, description)])


def invalid_fields(violations: Sequence[FieldViolation]) -> ApiError:
    """400 INVALID_ARGUMENT naming every field in `violations`."""
    message = "; ".join(f"{v.field}: {v.description}" for v in violations)
    return ApiError(HTTPStatus.BAD_REQUEST, "INVALID_ARGUMENT", message, violations)


def too_large(size: int | None, limit: int) -> ApiError:
    what = f"{size} bytes" if size is not None else f"more than {limit} bytes"
    return ApiError(
        HTTPStatus.REQUEST_ENTITY_TOO_LARGE,
        "INVALID_ARGUMENT",
        f"body: the request body is {what}; the limit is {limit}",
        [FieldViolation("body", f"at most {limit} bytes")],
    )


def not_found(message: str) -> ApiError:
    return ApiError(HTTPStatus.NOT_FOUND, "NOT_FOUND", message)


def method_not_allowed(method: str, allowed: Sequence[str]) -> ApiError:
    # google.rpc.Code has no "method not allowed"; the HTTP status says it, and `Allow` lists
    # what would work.
    return ApiError(
        HTTPStatus.METHOD_NOT_ALLOWED,
        "INVALID_ARGUMENT",
        f"method {method} is not allowed here; use {', '.join(allowed)}",
        headers={"Allow": ", ".join(allowed)},
    )


# The names the store's problems use, mapped to the API's field names (None: the matched text
# itself, so a params path such as `params.objects[0]` is the field). The earliest mention in
# a problem wins: "job ID 'x' contains ..." is about job_id even when the ID says "params".
_FIELD_PATTERNS: tuple[tuple[re.Pattern[str], str | None], ...] = (
    (re.compile(r"\bparams(?:\.[^\s:=\[\]]+|\[\d+\])*"), None),
    (re.compile(r"\bidempotency[ _]key\b", re.IGNORECASE), "idempotency_key"),
    (re.compile(r"\bjob[ _]ID\b", re.IGNORECASE), "job_id"),
    (re.compile(r"\baction\b"), "action"),
    (re.compile(r"\bsubject\b"), "subject"),
    (re.compile(r"\bdue_at\b"), "due_at"),
    (re.compile(r"\bmax_attempts\b"), "max_attempts"),
    (re.compile(r"\breason\b"), "reason"),
)

# The store's field names where the API calls them something else.
_STORE_FIELDS = {"scheduled_due_at": "due_at"}


def field_of(problem: str, default: str = "body") -> str:
    """The request field a store problem is about (its text names it), or `default`."""
    found: list[tuple[int, str]] = []
    for pattern, field in _FIELD_PATTERNS:
        match = pattern.search(problem)
        if match:
            found.append((match.start(), field or match.group(0)))
    return min(found)[1] if found else default


def from_store(exc: JobsError) -> ApiError:
    """The answer for a domain error raised by the store."""
    if isinstance(exc, ValidationError):
        problems = exc.problems or (str(exc),)
        return invalid_fields([FieldViolation(field_of(p), p) for p in problems])
    if isinstance(exc, ScheduleConflict):
        fields = [_STORE_FIELDS.get(f, f) for f in exc.fields]
        return ApiError(
            HTTPStatus.CONFLICT,
            "ALREADY_EXISTS",
            f"{', '.join(fields)}: {exc}",
            [FieldViolation(f, "differs from the existing job's") for f in fields],
        )
    if isinstance(exc, JobNotFound):
        return not_found(str(exc))
    if isinstance(exc, InvalidTransition | AlreadyTerminal):
        return ApiError(
            HTTPStatus.BAD_REQUEST,
            "FAILED_PRECONDITION",
            f"state: {exc}",
            [FieldViolation("state", f"the job is {exc.current.value}")],
        )
    if isinstance(exc, LostRace):
        return ApiError(HTTPStatus.CONFLICT, "ABORTED", f"{exc}; retry the request")
    if isinstance(exc, StoreUnavailable):
        return unavailable("the job store is unavailable; retry with backoff")
    if isinstance(exc, StoreRejected):
        # A deployment fault (a missing permission, index or database) or another refusal
        # retrying the same request cannot fix: the operator must act, so an ERROR line with
        # the detail, and to the caller a generic 503 (the request itself was fine and will
        # succeed once the deployment is fixed) without internal hints.
        logger.error(
            "the job store refused the request: %s",
            exc,
            extra={
                "fields": {
                    metrics.LOG_EVENT: metrics.EVENT_STORE_REJECTED,
                    "error_type": type(exc).__name__,
                }
            },
        )
        return unavailable("the job store is not available; retry later", retry_after_s=30)
    if isinstance(exc, NewerRecord):
        # Written by a newer revision of the service (a rollout or rollback in progress).
        logger.error("job record from a newer version: %s", exc)
        return unavailable("this job was written by a newer version of the service; retry later")
    if isinstance(exc, InvalidRecord):
        logger.error("job record cannot be decoded: %s", exc)
        return ApiError(
            HTTPStatus.INTERNAL_SERVER_ERROR,
            "INTERNAL",
            f"job {exc.job_id!r}: the stored record cannot be read; it is moved aside when "
            "the scan or worker meets it",
        )
    logger.error("unexpected store error: %s: %s", type(exc).__name__, exc)
    return internal()


def unavailable(message: str, *, retry_after_s: int = 5) -> ApiError:
    return ApiError(
        HTTPStatus.SERVICE_UNAVAILABLE,
        "UNAVAILABLE",
        message,
        headers={"Retry-After": str(retry_after_s)},
    )


def internal() -> ApiError:
    return ApiError(HTTPStatus.INTERNAL_SERVER_ERROR, "INTERNAL", "internal error")
