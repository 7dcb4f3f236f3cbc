"""The OpenAPI 3.1 document of the API (`openapi.json` beside this module), read on demand.

The file is the contract: it is what `/v1/openapi.json` serves, what docs/api.md points
producers at, and what tests/unit/api checks against `routes.ROUTES`. The one thing the file
cannot know is the deployment's action catalogue (built-ins and installed plug-ins): the served
document adds it to `ScheduleRequest.action`, as an `enum` and a description listing each
action's params (`for_catalogue`).
"""

from __future__ import annotations

import functools
import json
from importlib import resources
from typing import Any

from services.jobs.catalogue import Catalogue

FILE_NAME = "openapi.json"


@functools.cache
def document_bytes() -> bytes:
    return resources.files("services.api").joinpath(FILE_NAME).read_bytes()


def document() -> dict[str, Any]:
    parsed: dict[str, Any] = json.loads(document_bytes())
    return parsed


def for_catalogue(catalogue: Catalogue) -> dict[str, Any]:
    """The document with the catalogue's actions in `ScheduleRequest.action`."""
    served = document()
    action = served["components"]["schemas"]["ScheduleRequest"]["properties"]["action"]
    action["enum"] = catalogue.names()
    listed = "; ".join(
        f"{a.name}: params {a.params.summary() if a.params else 'any JSON map'}"
        for a in catalogue.actions()
    )
    action["description"] = f"{action['description']} This deployment's actions: {listed}."
    return served
