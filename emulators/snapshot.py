"""State files of the emulators (``--data-dir``): written whole and atomically, read back with
a clear error, like Google's emulators' ``--import-data`` / ``--export-on-exit``
(https://firebase.google.com/docs/emulator-suite/install_and_configure#export_and_import_emulator_data).

A snapshot is replaced in one rename after its bytes are on disk: written to a temporary file,
fsynced, renamed over the old one, and the directory fsynced, so a crash at any point leaves
either the old file or the new one, whole (rename(2) is atomic; without the fsyncs a crash can
leave the new name pointing at an empty file: https://lwn.net/Articles/457667/).

Protobuf messages travel as base64 of their wire form inside JSON, so a file written by one
version of the client's protos reads back in another that knows the same fields.
"""

from __future__ import annotations

import base64
import contextlib
import json
import os
from pathlib import Path
from typing import Any

FORMAT = 1
# What a refused file's error tells the operator to do; the file itself is never touched.
FIX = (
    "it is left untouched: restore the data directory from a copy, or start empty "
    "(`make run --fresh`, or another --data-dir)"
)


class SnapshotError(Exception):
    """A state file exists but cannot be read back; it is left untouched."""


def encode(message: Any) -> str:
    return base64.b64encode(message.SerializeToString()).decode("ascii")


def decode(cls: Any, text: str) -> Any:
    return cls.FromString(base64.b64decode(text))


def write(path: Path, kind: str, state: dict[str, Any]) -> None:
    """Replace ``path`` with ``state`` in one rename, so a crash leaves the old file whole."""
    write_bytes(path, json.dumps({"format": FORMAT, "kind": kind, **state}).encode("utf-8"))


def write_bytes(path: Path, data: bytes) -> None:
    """Replace ``path`` with ``data`` durably: temporary file, fsync, rename, fsync the folder."""
    path.parent.mkdir(parents=True, exist_ok=True)
    partial = path.with_name(path.name + ".partial")
    fd = os.open(partial, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
    try:
        view = memoryview(data)
        while view:
            view = view[os.write(fd, view) :]
        os.fsync(fd)
    finally:
        os.close(fd)
    os.replace(partial, path)
    sync_directory(path.parent)


def sync_directory(folder: Path) -> None:
    """Make the names in ``folder`` (a rename, a new or removed file) durable."""
    fd = os.open(folder, os.O_RDONLY)
    try:
        # Some platforms cannot fsync a directory; there the rename is as durable as it gets.
        with contextlib.suppress(OSError):
            os.fsync(fd)
    finally:
        os.close(fd)


def read(path: Path, kind: str) -> dict[str, Any] | None:
    """The state saved in ``path`` (None when there is none yet)."""
    try:
        text = path.read_text()
    except FileNotFoundError:
        return None
    except (OSError, UnicodeDecodeError) as exc:
        raise SnapshotError(f"{path}: cannot be read ({exc}); {FIX}") from exc
    try:
        state = json.loads(text)
    except json.JSONDecodeError as exc:
        raise SnapshotError(f"{path}: truncated or not a state file ({exc}); {FIX}") from exc
    if not isinstance(state, dict) or state.get("kind") != kind:
        raise SnapshotError(f"{path}: not a {kind} state file; {FIX}")
    if state.get("format") != FORMAT:
        raise SnapshotError(f"{path}: format {state.get('format')!r}, expected {FORMAT}; {FIX}")
    return state
