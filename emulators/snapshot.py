"""State files of the emulators (``--data-dir``): written whole and atomically, read back with
a clear error, like Google's emulators' ``--import-data`` / ``--export-on-exit``
(https://firebase.google.com/docs/emulator-suite/install_and_configure#export_and_import_emulator_data).

Protobuf messages travel as base64 of their wire form inside JSON, so a file written by one
version of the client's protos reads back in another that knows the same fields.
"""

from __future__ import annotations

import base64
import json
import os
from pathlib import Path
from typing import Any

FORMAT = 1


class SnapshotError(Exception):
    """A state file exists but cannot be read back; it is left untouched."""


def encode(message: Any) -> str:
    return base64.b64encode(message.SerializeToString()).decode("ascii")


def decode(cls: Any, text: str) -> Any:
    return cls.FromString(base64.b64decode(text))


def write(path: Path, kind: str, state: dict[str, Any]) -> None:
    """Replace ``path`` with ``state`` in one rename, so a crash leaves the old file whole."""
    path.parent.mkdir(parents=True, exist_ok=True)
    partial = path.with_name(path.name + ".partial")
    partial.write_text(json.dumps({"format": FORMAT, "kind": kind, **state}))
    os.replace(partial, path)


def read(path: Path, kind: str) -> dict[str, Any] | None:
    """The state saved in ``path`` (None when there is none yet)."""
    try:
        text = path.read_text()
    except FileNotFoundError:
        return None
    except OSError as exc:
        raise SnapshotError(f"{path}: {exc.strerror or exc}") from exc
    try:
        state = json.loads(text)
    except json.JSONDecodeError as exc:
        raise SnapshotError(f"{path}: not a state file ({exc})") from exc
    if not isinstance(state, dict) or state.get("kind") != kind:
        raise SnapshotError(f"{path}: not a {kind} state file")
    if state.get("format") != FORMAT:
        raise SnapshotError(f"{path}: format {state.get('format')!r}, expected {FORMAT}")
    return state
