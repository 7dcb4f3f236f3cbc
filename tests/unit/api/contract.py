"""The OpenAPI document as a test oracle: its operations, example requests, and a
check that an answer's body fits the schema the document gives for its status. Shared by the
unit test (in-memory store) and the integration test (Firestore emulator)."""

from __future__ import annotations

from typing import Any

import jsonschema

from services.api import document, routes
from services.api.errors import ApiError

ACTION = "media.delete_source"
DUE = "2026-07-01T12:00:00Z"
PARAMS = {"bucket": "media-src", "objects": ["media-1/source.mp4"]}  # fits the action's schema


def schedule_body(**overrides: Any) -> dict[str, Any]:
    """A valid `POST /v1/jobs` body; an override of `...` removes that field."""
    body: dict[str, Any] = {
        "job_id": "job-1",
        "action": ACTION,
        "subject": "media-1",
        "params": dict(PARAMS),
        "due_at": DUE,
    }
    body.update(overrides)
    return {k: v for k, v in body.items() if v is not ...}


# A request per documented operation that reaches the operation itself (not a route error).
EXAMPLES: dict[str, tuple[str, Any]] = {
    "schedule": (
        "/v1/jobs",
        {
            "job_id": "doc-1",
            "action": ACTION,
            "subject": "m",
            "params": {"object": "m/source.mp4"},
            "delay": "60s",
        },
    ),
    "get": ("/v1/jobs/doc-1", None),
    "cancel": ("/v1/jobs/doc-1:cancel", {"reason": "test"}),
    "reschedule": ("/v1/jobs/doc-1:reschedule", {"delay": "120s"}),
    "openapi": ("/v1/openapi.json", None),
}


def operations() -> list[tuple[str, str, dict[str, Any]]]:
    return [
        (method.upper(), path, operation)
        for path, item in document.document()["paths"].items()
        for method, operation in item.items()
    ]


def _resolve(spec: dict[str, Any], node: dict[str, Any]) -> dict[str, Any]:
    while "$ref" in node:
        target: Any = spec
        for part in node["$ref"].removeprefix("#/").split("/"):
            target = target[part]
        node = target
    return node


def check_against_schema(spec: dict[str, Any], response_doc: dict[str, Any], body: Any) -> None:
    schema = _resolve(spec, response_doc)["content"]["application/json"]["schema"]
    # Validate in the document's context so its $refs resolve.
    jsonschema.validate(
        body,
        {**schema, "components": spec["components"]},
        cls=jsonschema.Draft202012Validator,
    )


def documented_statuses(method: str, path: str) -> set[str] | None:
    """The statuses the document lists for the operation `method path` reaches, if any."""
    try:
        found = routes.match(method, path)
    except ApiError:
        return None
    item = document.document()["paths"][found.route.path][found.route.method.lower()]
    return set(item["responses"])
