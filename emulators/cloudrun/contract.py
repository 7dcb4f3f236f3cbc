"""What Cloud Run promises callers and containers, as the local front end reproduces it.

Every value here is Cloud Run's, with the page it comes from; the front end (`proxy.py`) and the
container runner (`container.py`) read them from this one place.
"""

from __future__ import annotations

import html

# After its IAM invoker check, Cloud Run forwards the caller's ID token with the JWT's signature
# segment replaced by this literal, so the token cannot be replayed
# (https://cloud.google.com/run/docs/troubleshooting#signature-removed).
SIGNATURE_REMOVED = "SIGNATURE_REMOVED_BY_GOOGLE"
AUTHORIZATION = "Authorization"
# When present, Cloud Run checks this header instead of Authorization (and forwards it with the
# signature removed), passing Authorization through untouched
# (https://cloud.google.com/run/docs/authenticating/service-to-service).
SERVERLESS_AUTHORIZATION = "X-Serverless-Authorization"
# Added by Cloud Run to every request: TRACE_ID/SPAN_ID;o=OPTIONS
# (https://cloud.google.com/run/docs/trace).
TRACE_HEADER = "X-Cloud-Trace-Context"
# Its W3C form, added alongside (https://cloud.google.com/trace/docs/trace-context).
TRACEPARENT_HEADER = "traceparent"
# The ID tokens Cloud Run accepts are Google's.
GOOGLE_ISSUERS = frozenset({"accounts.google.com", "https://accounts.google.com"})

# The environment Cloud Run gives every container
# (https://cloud.google.com/run/docs/container-contract#env-vars).
ENV_PORT = "PORT"
ENV_SERVICE = "K_SERVICE"
ENV_REVISION = "K_REVISION"
ENV_CONFIGURATION = "K_CONFIGURATION"

# Request timeout: 300 s by default, at most 3600 s; the caller gets 504 when it passes, while
# the container's thread keeps running (https://cloud.google.com/run/docs/configuring/request-timeout).
DEFAULT_TIMEOUT_S = 300.0
MAX_TIMEOUT_S = 3600.0
# Concurrent requests per instance: 80 by default, at most 1000
# (https://cloud.google.com/run/docs/about-concurrency). Requests above it wait.
DEFAULT_CONCURRENCY = 80
MAX_CONCURRENCY = 1000
# A request that finds no free slot is queued, "for up to 3.5 times average startup time of
# container instances of this service, or 10 seconds, whichever is greater", then fails with 429
# (https://cloud.google.com/run/docs/about-instance-autoscaling, "Exceeding maximum instances").
PENDING_WAIT_FLOOR_S = 10.0
PENDING_WAIT_STARTUP_FACTOR = 3.5
# Connections waiting to be accepted. Google's front end takes any burst; the local one holds
# this many in the kernel's queue (capped by net.core.somaxconn) rather than Python's 5, which
# turned a burst of connects into resets and 1 s SYN retries.
ACCEPT_BACKLOG = 4096
# A container must listen on PORT within 4 minutes (https://cloud.google.com/run/quotas).
STARTUP_TIMEOUT_S = 240.0
# HTTP/1 request limits (https://cloud.google.com/run/quotas): the request (body included) at
# most 32 MiB; the request line and headers together at most 64 KiB.
MAX_REQUEST_BYTES = 32 * 1024 * 1024
MAX_HEADER_BYTES = 64 * 1024

# Log lines of Cloud Run's refusals (https://cloud.google.com/run/docs/troubleshooting).
NOT_AUTHENTICATED = (
    "The request was not authenticated. Either allow unauthenticated invocations or set the "
    "proper Authorization header."
)
NOT_AUTHORIZED = "The request was not authorized to invoke this service."


def error_page(status: int, title: str, message: str) -> bytes:
    """The HTML page Google's front end answers its own errors with."""
    return (
        '<html><head>\n<meta http-equiv="content-type" content="text/html;charset=utf-8">\n'
        f"<title>{status} {title}</title>\n</head>\n<body text=#000000 bgcolor=#ffffff>\n"
        f"<h1>Error: {title}</h1>\n<h2>{message}</h2>\n<h2></h2>\n</body></html>\n"
    ).encode()


def unauthorized_page(path: str) -> bytes:
    """401: a token that is not a valid Google ID token for this service."""
    where = html.escape(path)
    return error_page(
        401,
        "Unauthorized",
        f"Your client does not have permission to the requested URL <code>{where}</code>.",
    )


def forbidden_page(path: str) -> bytes:
    """403: no token, or a caller without the invoker role
    (e.g. https://github.com/datacommonsorg/docsite/pull/463 quotes it)."""
    where = html.escape(path)
    return error_page(
        403,
        "Forbidden",
        f"Your client does not have permission to get URL <code>{where}</code> from this server.",
    )


def too_large_page() -> bytes:
    """413: a request over the size limits (the page quoted in
    https://github.com/zhaofengli/attic/issues/220, without its cookie-clearing script)."""
    return error_page(
        413, "Request Entity Too Large", "Your client issued a request that was too large."
    )


def bad_request_page() -> bytes:
    """400: a request the front end cannot read as HTTP/1.1 (Google's front end page)."""
    return error_page(400, "Bad Request", "Your client has issued a malformed or illegal request.")


def request_timeout_page() -> bytes:
    """408: the client stopped sending its request."""
    return error_page(408, "Request Timeout", "Your client did not send the whole request.")


def pending_wait_s(average_startup_s: float = 0.0) -> float:
    """How long a request may wait for a free slot before Cloud Run answers 429."""
    return max(PENDING_WAIT_FLOOR_S, PENDING_WAIT_STARTUP_FACTOR * average_startup_s)


def unavailable_page() -> bytes:
    """503: the container is not serving."""
    return error_page(
        503,
        "Service Unavailable",
        "The service you requested is not available yet. Please try again in 30 seconds.",
    )


# Plain-text answers of Cloud Run's proxy (https://cloud.google.com/run/docs/troubleshooting).
TIMEOUT_BODY = b"upstream request timeout"
NO_INSTANCE_BODY = b"Rate exceeded."
