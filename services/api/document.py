"""The OpenAPI 3.1 document of the API (`openapi.json` beside this module), read on demand.

The file is the contract: it is what `/v1/openapi.json` serves byte for byte, what docs/api.md
points producers at, and what tests/unit/api checks against `routes.ROUTES`.
"""

from __future__ import annotations

import functools
import json
from importlib import resources
from typing import Any

FILE_NAME = "openapi.json"


@functools.cache
def document_bytes() -> bytes:
    return resources.files("services.api").joinpath(FILE_NAME).read_bytes()


def document() -> dict[str, Any]:
    parsed: dict[str, Any] = json.loads(document_bytes())
    return parsed
