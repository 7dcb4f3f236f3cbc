"""The API's routes, as one table that the dispatcher, the OpenAPI test and the docs share.

Paths follow Google's resource-oriented design: a collection (`/v1/jobs`), a resource
(`/v1/jobs/{job_id}`) and custom methods as a `:verb` suffix taken with POST
(https://cloud.google.com/apis/design/custom_methods). A job ID may itself contain `:` (derived
IDs do), so on a POST the verb is what follows the *last* colon; a GET names the whole segment.
Paths arrive percent-decoded, so an ID with `/` (which Firestore forbids) cannot be addressed.
"""

from __future__ import annotations

from dataclasses import dataclass

from services.api.errors import method_not_allowed, not_found

PREFIX = "/v1"
COLLECTION = f"{PREFIX}/jobs"
OPENAPI_PATH = f"{PREFIX}/openapi.json"


@dataclass(frozen=True)
class Route:
    method: str
    path: str  # as in openapi.json's `paths`
    operation: str  # its operationId


ROUTES: tuple[Route, ...] = (
    Route("POST", COLLECTION, "schedule"),
    Route("GET", COLLECTION + "/{job_id}", "get"),
    Route("POST", COLLECTION + "/{job_id}:cancel", "cancel"),
    Route("POST", COLLECTION + "/{job_id}:reschedule", "reschedule"),
    Route("GET", OPENAPI_PATH, "openapi"),
)

VERBS = ("cancel", "reschedule")


@dataclass(frozen=True)
class Match:
    route: Route
    job_id: str | None = None


def match(method: str, path: str) -> Match:
    """The route for `method path`; ApiError 404 (no such path) or 405 (not that method)."""
    if path == COLLECTION:
        return _only(method, "POST", Match(_route("schedule")))
    if path == OPENAPI_PATH:
        return _only(method, "GET", Match(_route("openapi")))
    rest = path.removeprefix(COLLECTION + "/")
    if rest == path or not rest or "/" in rest:
        raise not_found(f"no route for {path[:200]!r}; see {OPENAPI_PATH}")
    if method == "GET":
        return Match(_route("get"), rest)
    if method != "POST":
        raise method_not_allowed(method, ["GET", "POST"])
    job_id, colon, verb = rest.rpartition(":")
    if not colon or not job_id:
        raise method_not_allowed(method, ["GET"])
    if verb not in VERBS:
        known = ", ".join(f":{v}" for v in VERBS)
        raise not_found(f"unknown custom method :{verb[:80]}; known: {known}")
    return Match(_route(verb), job_id)


def _only(method: str, allowed: str, found: Match) -> Match:
    if method != allowed:
        raise method_not_allowed(method, [allowed])
    return found


def _route(operation: str) -> Route:
    return next(r for r in ROUTES if r.operation == operation)
