"""Every documented route answers on the real store as the OpenAPI document says: a documented
status, and a body its schema accepts (the unit test does the same on an in-memory store)."""

from __future__ import annotations

from typing import Any

import pytest

from services.api import document
from tests.integration.api.conftest import ApiRig
from tests.unit.api.contract import EXAMPLES, check_against_schema, operations


@pytest.mark.parametrize(("method", "path", "operation"), operations())
def test_every_documented_route_answers_as_documented_on_firestore(
    api_rig: ApiRig, method: str, path: str, operation: dict[str, Any]
) -> None:
    spec = document.document()
    assert api_rig.call("POST", *EXAMPLES["schedule"]).status_code == 201
    url, body = EXAMPLES[operation["operationId"]]
    response = api_rig.call(method, url, body)
    documented = operation["responses"]
    assert response.status_code < 300, response.text
    assert str(response.status_code) in documented
    check_against_schema(spec, documented[str(response.status_code)], response.json())
    # A stranger's token on the same route: a documented refusal in the error schema.
    stranger = api_rig.token(email="x@p.iam.gserviceaccount.com")
    refused = api_rig.call(method, url, body, token=stranger)
    assert refused.status_code == 403
    check_against_schema(spec, documented["403"], refused.json())
