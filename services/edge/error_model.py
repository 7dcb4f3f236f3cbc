"""Google's error model for every refusal a service's process answers, whoever answers it.

Google's APIs answer an error with one JSON shape (https://cloud.google.com/apis/design/errors):

    {"error": {"code": 404, "message": "...", "status": "NOT_FOUND", "details": [...]}}

`code` is the HTTP status and `status` the canonical `google.rpc.Code` name Google maps to it
(https://cloud.google.com/apis/design/errors#handling_errors). The API builds these itself
(services/api/errors.py); this module gives the same shape to what answers before or around
the services' own code: functions-framework's routing, werkzeug, gunicorn's parser
(services/edge/server.py), and the scan's and worker's own refusals at the process edge
(services/edge/startup.py).

It also holds the one rule on request paths every service applies before anything else: a path
whose percent-decoded bytes are not UTF-8 is refused, never read with U+FFFD in place of the
bad bytes (two different paths would then address one resource).
"""

from __future__ import annotations

import json
import urllib.parse
from collections.abc import Mapping, Sequence
from http import HTTPStatus
from typing import Any

ERROR_INFO_TYPE = "type.googleapis.com/google.rpc.ErrorInfo"
BAD_REQUEST_TYPE = "type.googleapis.com/google.rpc.BadRequest"
# The `domain` of the ErrorInfo details this system adds (google.rpc.ErrorInfo: "the logical
# grouping to which the reason belongs").
DOMAIN = "deferred-jobs"

# google.rpc.Code for each HTTP status, as Google's mapping table reads from the HTTP side;
# statuses it does not list take the code of their class.
_CODES = {
    400: "INVALID_ARGUMENT",
    401: "UNAUTHENTICATED",
    403: "PERMISSION_DENIED",
    404: "NOT_FOUND",
    405: "INVALID_ARGUMENT",  # as the API answers it (services/api/errors.py)
    408: "DEADLINE_EXCEEDED",
    409: "ABORTED",
    411: "INVALID_ARGUMENT",
    413: "INVALID_ARGUMENT",
    414: "INVALID_ARGUMENT",
    415: "INVALID_ARGUMENT",
    417: "FAILED_PRECONDITION",
    429: "RESOURCE_EXHAUSTED",
    431: "INVALID_ARGUMENT",
    499: "CANCELLED",
    500: "INTERNAL",
    501: "UNIMPLEMENTED",
    503: "UNAVAILABLE",
    504: "DEADLINE_EXCEEDED",
}


def status_name(code: int) -> str:
    """The canonical google.rpc.Code name Google pairs with HTTP status `code`."""
    if code in _CODES:
        return _CODES[code]
    return "FAILED_PRECONDITION" if 400 <= code < 500 else "UNKNOWN"


def error_body(
    code: int, message: str, details: Sequence[Mapping[str, Any]] = ()
) -> dict[str, Any]:
    """`{"error": {"code", "message", "status"[, "details"]}}`."""
    error: dict[str, Any] = {"code": int(code), "message": message, "status": status_name(code)}
    if details:
        error["details"] = [dict(d) for d in details]
    return {"error": error}


def error_bytes(code: int, message: str, details: Sequence[Mapping[str, Any]] = ()) -> bytes:
    return (json.dumps(error_body(code, message, details)) + "\n").encode()


def error_info(reason: str, metadata: Mapping[str, Any]) -> dict[str, Any]:
    """A google.rpc.ErrorInfo detail: `reason` UPPER_SNAKE_CASE, `metadata` string values
    (what is not a string is kept as its JSON text)."""
    return {
        "@type": ERROR_INFO_TYPE,
        "reason": reason,
        "domain": DOMAIN,
        "metadata": {
            str(k): v if isinstance(v, str) else json.dumps(v, default=str)
            for k, v in metadata.items()
        },
    }


def is_error_body(body: object) -> bool:
    """Whether `body` already has Google's error shape."""
    if not isinstance(body, dict) or set(body) != {"error"}:
        return False
    error = body["error"]
    return (
        isinstance(error, dict)
        and isinstance(error.get("code"), int)
        and isinstance(error.get("message"), str)
        and isinstance(error.get("status"), str)
    )


def as_error_body(code: int, body: object) -> dict[str, Any]:
    """`body` (a service's own JSON answer to a refusal) in Google's error model: kept when it
    has the shape already; else its `error` / `detail` text is the message and every field is
    kept in one ErrorInfo detail, so nothing an operator read before is lost."""
    if is_error_body(body):
        assert isinstance(body, dict)
        return body
    fields = body if isinstance(body, dict) else {"body": body}
    words = [str(fields[k]) for k in ("error", "detail", "outcome") if k in fields]
    message = ": ".join(words) or HTTPStatus(code).phrase.lower()
    reason = status_name(code)
    return error_body(code, message, [error_info(reason, fields)] if fields else ())


def target_problem(environ: Mapping[str, Any]) -> str | None:
    """Why a WSGI request's target cannot be read, or None: its path and query, percent-decoded,
    must be UTF-8. Read from the target as sent (`RAW_URI`, gunicorn's, or `REQUEST_URI`,
    werkzeug's), since a server may already have replaced bad bytes in PATH_INFO; else from
    PATH_INFO and QUERY_STRING."""
    raw = environ.get("RAW_URI") or environ.get("REQUEST_URI")
    if isinstance(raw, str) and raw:
        path, _, query = raw.partition("?")
        return _percent_problem(path, "request path") or _percent_problem(query, "query string")
    return path_problem(str(environ.get("PATH_INFO", ""))) or query_problem(
        str(environ.get("QUERY_STRING", ""))
    )


def _percent_problem(text: str, what: str) -> str | None:
    try:
        urllib.parse.unquote_to_bytes(text.encode("latin-1")).decode("utf-8")
    except (UnicodeEncodeError, UnicodeDecodeError):
        return f"the {what} is not UTF-8 once percent-decoded"
    return None


def path_problem(raw_path: str) -> str | None:
    """Why a WSGI `PATH_INFO` (the request path's bytes, decoded as latin-1 as PEP 3333 says)
    cannot be read, or None: its bytes must be UTF-8."""
    try:
        raw_path.encode("latin-1").decode("utf-8")
    except (UnicodeEncodeError, UnicodeDecodeError):
        return "the request path is not UTF-8 once percent-decoded"
    return None


def query_problem(query: str) -> str | None:
    """The same rule for a query string (still percent-encoded in WSGI's QUERY_STRING)."""
    try:
        urllib.parse.unquote_to_bytes(query.encode("latin-1")).decode("utf-8")
    except (UnicodeEncodeError, UnicodeDecodeError):
        return "the query string is not UTF-8 once percent-decoded"
    return None
