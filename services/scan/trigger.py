"""The scan request body: empty, or a small JSON object of known options.

Cloud Scheduler sends whatever body the job is configured with; the operator may send
`{"dry_run": true}` to measure without claiming. Anything else is refused with a message
that says exactly what was wrong, so a misconfigured scheduler job is obvious in its logs.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

# The largest body we read; a valid one is a few dozen bytes.
MAX_BODY_BYTES = 1024

# Allowed keys and the Python type each value must have.
ALLOWED_KEYS: dict[str, type] = {"dry_run": bool}


class TriggerError(ValueError):
    """The scan request body is not empty or a JSON object of known options."""

    def __init__(self, message: str | None = None) -> None:
        super().__init__(message or (self.__doc__ or "").strip())


@dataclass(frozen=True)
class Trigger:
    """What one scan request asks for."""

    dry_run: bool = False


def parse_trigger(body: bytes) -> Trigger:
    """A Trigger from the raw request body; raises TriggerError with the reason."""
    if len(body) > MAX_BODY_BYTES:
        raise TriggerError(f"body is larger than {MAX_BODY_BYTES} bytes")
    if not body.strip():
        return Trigger()
    try:
        text = body.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise TriggerError("body is not UTF-8 text") from exc
    try:
        payload: Any = json.loads(text)
    except json.JSONDecodeError as exc:
        raise TriggerError(f"body is not valid JSON: {exc.msg} at position {exc.pos}") from exc
    except RecursionError as exc:
        # 1 KiB of "[" nests deeper than the interpreter allows; it is bad input, not a crash.
        raise TriggerError("body is not valid JSON: nested too deeply") from exc
    if not isinstance(payload, dict):
        raise TriggerError(f"body must be a JSON object (or empty), got {type(payload).__name__}")
    problems = [f"unknown key {key!r}" for key in sorted(payload) if key not in ALLOWED_KEYS]
    for key, expected in ALLOWED_KEYS.items():
        if key in payload and type(payload[key]) is not expected:
            problems.append(f"{key!r} must be a JSON {_json_type(expected)}")
    if problems:
        allowed = ", ".join(sorted(ALLOWED_KEYS))
        raise TriggerError("; ".join(problems) + f" (allowed keys: {allowed})")
    return Trigger(dry_run=bool(payload.get("dry_run", False)))


def _json_type(python_type: type) -> str:
    return {bool: "boolean", int: "number", str: "string"}.get(python_type, python_type.__name__)
