"""State files of the emulators (``--data-dir``): written whole and atomically, read back with
a clear error, like Google's emulators' ``--import-data`` / ``--export-on-exit``
(https://firebase.google.com/docs/emulator-suite/install_and_configure#export_and_import_emulator_data).

A snapshot is replaced in one rename after its bytes are on disk: written to a temporary file,
fsynced, renamed over the old one, and the directory fsynced, so a crash at any point leaves
either the old file or the new one, whole (rename(2) is atomic; without the fsyncs a crash can
leave the new name pointing at an empty file: https://lwn.net/Articles/457667/).

Protobuf messages travel as base64 of their wire form inside JSON, so a file written by one
version of the client's protos reads back in another that knows the same fields.

A snapshot is one header line, ``{"format":2,"kind":KIND,"bytes":N,"sha256":HEX}``, then the
state as JSON: N bytes whose SHA-256 is HEX. A file whose body does not check out is refused,
naming it, so a flipped bit (in a base64 document, a number, a name) never loads silently as
different data. A format 1 file (one JSON object, no checksum: earlier versions) is still
read; the start that reads it writes format 2.
"""

from __future__ import annotations

import base64
import contextlib
import hashlib
import json
import os
from pathlib import Path
from typing import Any

FORMAT = 2
# Snapshots written before they carried a checksum: read, never written.
_UNCHECKED_FORMAT = 1
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
    body = json.dumps(state, separators=(",", ":")).encode("utf-8")
    header = {
        "format": FORMAT,
        "kind": kind,
        "bytes": len(body),
        "sha256": hashlib.sha256(body).hexdigest(),
    }
    write_bytes(path, json.dumps(header, separators=(",", ":")).encode("ascii") + b"\n" + body)


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
        data = path.read_bytes()
    except FileNotFoundError:
        return None
    except OSError as exc:
        raise SnapshotError(f"{path}: cannot be read ({exc}); {FIX}") from exc
    first, newline, body = data.partition(b"\n")
    if not newline:
        return _read_unchecked(path, data, kind)
    try:
        header = json.loads(first)
    except (json.JSONDecodeError, UnicodeDecodeError) as exc:
        raise SnapshotError(f"{path}: damaged header or not a state file ({exc}); {FIX}") from exc
    _check_header(path, header, kind)
    if len(body) != header["bytes"]:
        raise SnapshotError(
            f"{path}: truncated or not a state file: {len(body)} bytes after its header, "
            f"{header['bytes']} written; {FIX}"
        )
    if hashlib.sha256(body).hexdigest() != header["sha256"]:
        raise SnapshotError(f"{path}: damaged: its checksum does not match its contents; {FIX}")
    try:
        state = json.loads(body)
    except (json.JSONDecodeError, UnicodeDecodeError) as exc:  # pragma: no cover - checksummed
        raise SnapshotError(f"{path}: not a state file ({exc}); {FIX}") from exc
    if not isinstance(state, dict):
        raise SnapshotError(f"{path}: not a {kind} state file; {FIX}")
    return state


def _check_header(path: Path, header: Any, kind: str) -> None:
    if not isinstance(header, dict) or header.get("kind") != kind:
        raise SnapshotError(f"{path}: not a {kind} state file; {FIX}")
    if header.get("format") != FORMAT:
        raise SnapshotError(f"{path}: format {header.get('format')!r}, expected {FORMAT}; {FIX}")
    size, digest = header.get("bytes"), header.get("sha256")
    if (
        not isinstance(size, int)
        or not isinstance(digest, str)
        or set(header)
        != {
            "format",
            "kind",
            "bytes",
            "sha256",
        }
    ):
        raise SnapshotError(f"{path}: damaged header; {FIX}")


def _read_unchecked(path: Path, data: bytes, kind: str) -> dict[str, Any]:
    """A format 1 snapshot: one JSON object, no checksum (written by earlier versions)."""
    try:
        state = json.loads(data)
    except (json.JSONDecodeError, UnicodeDecodeError) as exc:
        raise SnapshotError(f"{path}: truncated or not a state file ({exc}); {FIX}") from exc
    if not isinstance(state, dict) or state.get("kind") != kind:
        raise SnapshotError(f"{path}: not a {kind} state file; {FIX}")
    if state.get("format") != _UNCHECKED_FORMAT:
        raise SnapshotError(f"{path}: format {state.get('format')!r}, expected {FORMAT}; {FIX}")
    del state["format"], state["kind"]
    return state
