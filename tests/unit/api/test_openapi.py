"""The OpenAPI document against the real routes: valid 3.1, every route documented, every
documented route answering with a documented status and a body its schema accepts."""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import pytest
from openapi_spec_validator import validate

from services.api import document, routes
from services.jobs.catalogue import load_catalogue
from tests.unit.api.conftest import Api
from tests.unit.api.contract import EXAMPLES, check_against_schema, operations


def test_the_document_is_valid_openapi_3_1() -> None:
    spec = document.document()
    assert spec["openapi"].startswith("3.1.")
    validate(spec)


def test_every_route_is_documented_and_every_documented_operation_is_a_route() -> None:
    documented = {(method, path, op["operationId"]) for method, path, op in operations()}
    served = {(r.method, r.path, r.operation) for r in routes.ROUTES}
    assert documented == served


def test_the_error_schema_lists_exactly_the_statuses_the_api_answers_with() -> None:
    error = document.document()["components"]["schemas"]["Error"]["properties"]["error"]
    documented = set(error["properties"]["status"]["enum"])
    package = Path(routes.__file__).parent
    source = "".join(p.read_text(encoding="utf-8") for p in package.glob("*.py"))
    used = set(re.findall(r'"([A-Z]+(?:_[A-Z]+)+|[A-Z]{5,})"', source)) & _GOOGLE_CODES
    assert used == documented


# google.rpc.Code names (https://cloud.google.com/apis/design/errors#handling_errors).
_GOOGLE_CODES = frozenset(
    {
        "CANCELLED",
        "UNKNOWN",
        "INVALID_ARGUMENT",
        "DEADLINE_EXCEEDED",
        "NOT_FOUND",
        "ALREADY_EXISTS",
        "PERMISSION_DENIED",
        "UNAUTHENTICATED",
        "RESOURCE_EXHAUSTED",
        "FAILED_PRECONDITION",
        "ABORTED",
        "OUT_OF_RANGE",
        "UNIMPLEMENTED",
        "INTERNAL",
        "UNAVAILABLE",
        "DATA_LOSS",
    }
)


@pytest.mark.parametrize(("method", "path", "operation"), operations())
def test_every_documented_route_answers_as_documented(
    api: Api, method: str, path: str, operation: dict[str, Any]
) -> None:
    spec = document.document()
    # The job the resource operations address exists (reschedule runs before cancel).
    api.post(*EXAMPLES["schedule"])
    url, body = EXAMPLES[operation["operationId"]]
    response = api.request(method, url, body)
    documented = operation["responses"]
    assert str(response.status_code) in documented, response.get_data(as_text=True)
    assert response.status_code < 300, response.get_data(as_text=True)
    check_against_schema(spec, documented[str(response.status_code)], response.get_json())
    # And an error from the same route matches the error schema.
    refused = api.request(method, url, body, auth=None)
    assert str(refused.status_code) in documented
    check_against_schema(spec, documented[str(refused.status_code)], refused.get_json())


def test_the_served_document_is_the_file_plus_the_catalogues_actions(api: Api) -> None:
    served = api.get("/v1/openapi.json").get_json()
    catalogue = load_catalogue()
    assert served == document.for_catalogue(catalogue)
    action = served["components"]["schemas"]["ScheduleRequest"]["properties"].pop("action")
    assert action["enum"] == catalogue.names()
    for name in catalogue.names():
        assert name in action["description"]
    # Everything else is the file, as it is.
    from_file = json.loads(document.document_bytes())
    del from_file["components"]["schemas"]["ScheduleRequest"]["properties"]["action"]
    assert served == from_file
    validate(document.for_catalogue(catalogue))
