"""The storage emulator's state in a data directory, on disk before any change is answered.

The package's own disk mode rewrote its metadata index (`.meta`, JSON of every bucket and
object) in place on every change and wrote object contents with no fsync, so a SIGKILL during a
change could leave `.meta` empty or cut short, and the next start then failed on a bare JSON
error. `DurableStorage` keeps the package's in-memory store and semantics and, after every
change the package makes (each calls `_write_config_to_file`, the hook used here):

1. writes each new content file as a blob named by its SHA-256 (`DIR/blobs/<sha256>`),
   fsynced, so a blob exists whole or not at all, before anything refers to it. A blob that
   cannot be written (a full disk) is never taken as written: its digest is remembered only
   once it is on disk, and the store then acknowledges nothing more until a restart (every
   request answers 503, reads included, as the package already holds the unwritten content
   in memory), so nothing logged ever refers to a blob that is not there;
2. appends what changed (the metadata entries set or removed, found by comparing with what
   was last logged, and the blob of each content path that changed) to `DIR/storage.log`
   and fsyncs it (emulators/journal.py, as Firestore and Pub/Sub do).

The package changes its store under the server's lock and the answer is sent after the
handler returns (`serialized.SerializedHandler`), so a change is on disk before its answer.
At start the snapshot (`DIR/storage.json`: the whole index and every content path's blob) is
loaded, the log replayed, every blob's SHA-256 checked, and a new snapshot written; blobs no
snapshot refers to are removed then (and at a clean stop). Anything missing or damaged stops
the start with an error naming the file and the fix. A data directory written by the package's
disk mode (an earlier version of this project) is read once and converted.
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
import urllib.parse
from pathlib import Path
from typing import Any

from emulators import snapshot
from emulators.journal import Journal
from emulators.snapshot import FIX, SnapshotError
from emulators.storage.serialized import InMemoryStorage

logger = logging.getLogger(__name__)

SNAPSHOT_KIND = "storage"
# Where the package's disk mode kept its files under the data directory (its STORAGE_DIR).
_LEGACY_ROOT = ".cloudstorage"


# The depth at which each part of the package's index holds one entry (a bucket, an object, a
# soft-deleted generation...): a change is logged as the entries that differ.
_DEPTHS = {"buckets": 1, "objects": 2, "resumable": 1, "bucket_iam_policies": 1, "soft_deleted": 3}
Path_ = tuple[str, ...]


class DurableStorage(InMemoryStorage):
    """The package's in-memory store, every change on disk in ``folder`` before it returns."""

    def __init__(self, folder: Path) -> None:
        super().__init__()
        self._folder = folder
        self._blobs = folder / "blobs"
        self._journal = Journal("storage", folder, "storage", SNAPSHOT_KIND)
        # What the log holds so far: every index entry (a copy) and every content path's blob.
        self._logged: dict[Path_, Any] = {}
        self._refs: dict[str, str] = {}
        # path -> (the content object last logged for it, its sha256): the identity check
        # spares hashing every unchanged file on every change.
        self._digests: dict[str, tuple[bytes, str]] = {}
        self._loading = True
        self._blobs.mkdir(parents=True, exist_ok=True)
        self._load()
        self._loading = False
        self._logged = {path: _copy(value) for path, value in self._entries().items()}
        self._journal.start(self._state())
        self._remove_unused_blobs()

    # -- the package's hooks -------------------------------------------------------------

    def _write_config_to_file(self) -> None:
        """Called by the package after every change: log what changed, durably."""
        if self._loading:
            return
        change = self._changes()
        if not change:
            return
        if self._journal.append(change):
            self._journal.compact(self._state())
        self._journal.settle()

    def _changes(self) -> dict[str, Any]:
        files: dict[str, bytes] = self._store._files
        refs: dict[str, str] = {}
        new_blob = False
        self._journal.check()
        for path, content in files.items():
            cached = self._digests.get(path)
            if cached is not None and cached[0] is content:
                digest = cached[1]
            else:
                digest = hashlib.sha256(content).hexdigest()
                if not (self._blobs / digest).exists():
                    self._write_blob(digest, content, path)
                    new_blob = True
                # Only now: a digest remembered is a blob on disk (the check above is skipped).
                self._digests[path] = (content, digest)
            refs[path] = digest
        for gone in set(self._digests) - set(files):
            del self._digests[gone]
        if new_blob:
            try:
                snapshot.sync_directory(self._blobs)  # the blobs' names, before the log
            except OSError as exc:
                raise self._journal.fail(f"cannot fsync {self._blobs}: {exc}") from exc
        entries = self._entries()
        changed = [[list(p), v] for p, v in entries.items() if self._logged.get(p, _NONE) != v]
        removed = [list(p) for p in self._logged if p not in entries]
        files_set = {p: d for p, d in refs.items() if self._refs.get(p) != d}
        files_gone = [p for p in self._refs if p not in refs]
        if not (changed or removed or files_set or files_gone):
            return {}
        for entry, value in changed:
            self._logged[tuple(entry)] = _copy(value)
        for entry in removed:
            del self._logged[tuple(entry)]
        self._refs = refs
        return {"set": changed, "del": removed, "files": files_set, "files_gone": files_gone}

    def _write_blob(self, digest: str, content: bytes, path: str) -> None:
        try:
            _write_blob(self._blobs / digest, content)
        except OSError as exc:
            (self._blobs / f"{digest}.partial").unlink(missing_ok=True)
            raise self._journal.fail(
                f"cannot write {self._blobs / digest} (the content of {path!r}): {exc}"
            ) from exc

    def check_durable(self) -> None:
        """Raise JournalError once a change could not be made durable (until a restart)."""
        self._journal.check()

    def _entries(self) -> dict[Path_, Any]:
        flat: dict[Path_, Any] = {}

        def walk(node: Any, path: Path_, depth: int) -> None:
            if depth == 0 or not isinstance(node, dict):
                flat[path] = node
                return
            for key, value in node.items():
                walk(value, (*path, str(key)), depth - 1)

        for key, depth in _DEPTHS.items():
            walk(getattr(self, key), (key,), depth)
        return flat

    def _state(self) -> dict[str, Any]:
        return {"meta": {key: getattr(self, key) for key in _DEPTHS}, "files": dict(self._refs)}

    def add_to_resumable_upload(self, *args: Any, **kwargs: Any) -> Any:
        # The package does not call its hook for a chunk; a chunk acknowledged (308) must stay.
        result = super().add_to_resumable_upload(*args, **kwargs)
        self._write_config_to_file()
        return result

    def wipe(self, keep_buckets: bool = False) -> None:
        super().wipe(keep_buckets=keep_buckets)
        self._write_config_to_file()

    def close(self) -> None:
        """A clean stop: fold the log into the snapshot, drop the blobs nothing refers to."""
        self._journal.close(self._state())
        self._remove_unused_blobs()

    def _remove_unused_blobs(self) -> None:
        used = set(self._refs.values())
        for blob in self._blobs.iterdir():
            if blob.name not in used:
                blob.unlink(missing_ok=True)

    def rebase_links(self, url: str) -> None:
        """Point every stored object's `mediaLink` at this server (``url``): the package
        stores the address it was uploaded through, and a restart may listen elsewhere."""
        new = urllib.parse.urlsplit(url)
        for by_name in self.objects.values():
            for obj in by_name.values():
                link = obj.get("mediaLink")
                if isinstance(link, str):
                    old = urllib.parse.urlsplit(link)
                    obj["mediaLink"] = old._replace(scheme=new.scheme, netloc=new.netloc).geturl()

    # -- start -------------------------------------------------------------------------------

    def _load(self) -> None:
        saved, records = self._journal.load()
        if saved is None and not records:
            self._convert_legacy()
            self._refs = {p: hashlib.sha256(c).hexdigest() for p, c in self._store._files.items()}
            for path, content in self._store._files.items():
                digest = self._refs[path]
                self._digests[path] = (content, digest)
                if not (self._blobs / digest).exists():
                    _write_blob(self._blobs / digest, content)
            return
        where = self._journal.snapshot_path
        try:
            meta = saved.get("meta") if saved is not None else {}
            files = saved.get("files") if saved is not None else {}
            if not isinstance(meta, dict) or not isinstance(files, dict):
                raise ValueError("not a storage state file")
            for key in _DEPTHS:
                value = meta.get(key) or {}
                if not isinstance(value, dict):
                    raise ValueError(f"bad {key!r}")
                setattr(self, key, value)
            refs = {str(p): str(d) for p, d in files.items()}
            where = self._journal.log_path
            for record in records:
                for path, value in record["set"]:
                    _put(getattr(self, path[0]), path[1:], value)
                for path in record["del"]:
                    _drop(getattr(self, path[0]), path[1:])
                refs.update(record["files"])
                for path in record["files_gone"]:
                    refs.pop(path, None)
        except (KeyError, TypeError, ValueError, IndexError, AttributeError) as exc:
            raise SnapshotError(f"storage: {where}: {exc!r}; {FIX}") from exc
        for path, digest in refs.items():
            blob = self._blobs / digest
            try:
                content = blob.read_bytes()
            except OSError as exc:
                raise SnapshotError(
                    f"storage: {blob} (the content of {path!r}) cannot be read ({exc}); {FIX}"
                ) from exc
            if hashlib.sha256(content).hexdigest() != digest:
                raise SnapshotError(
                    f"storage: {blob} (the content of {path!r}) is damaged: its SHA-256 is "
                    f"not its name; {FIX}"
                )
            self._store.write_bytes(path, content)
            self._digests[path] = (self._store._files[path], digest)
        self._refs = refs
        logger.info("storage emulator loaded %d files from %s", len(refs), self._folder)

    def _convert_legacy(self) -> None:
        """Read a data directory the package's disk mode wrote (`.cloudstorage/.meta`)."""
        root = self._folder / _LEGACY_ROOT
        meta_file = root / ".meta"
        if not meta_file.exists():
            return
        try:
            meta = json.loads(meta_file.read_text())
        except (OSError, ValueError) as exc:
            raise SnapshotError(
                f"storage: {meta_file}: truncated or not the storage index ({exc}); {FIX}"
            ) from exc
        if not isinstance(meta, dict):
            raise SnapshotError(f"storage: {meta_file}: not the storage index; {FIX}")
        for key in _DEPTHS:
            setattr(self, key, meta.get(key) or {})
        for path in root.rglob("*"):
            if path.is_file() and path != meta_file:
                self._store.write_bytes(path.relative_to(root).as_posix(), path.read_bytes())
        logger.warning("storage: converted %s (the old files are kept)", root)


_NONE = object()


def _copy(value: Any) -> Any:
    """A deep copy of a JSON value (the package changes some entries in place)."""
    return json.loads(json.dumps(value))


def _put(tree: dict[str, Any], path: list[str], value: Any) -> None:
    for key in path[:-1]:
        tree = tree.setdefault(key, {})
    tree[path[-1]] = value


def _drop(tree: dict[str, Any], path: list[str]) -> None:
    for key in path[:-1]:
        tree = tree.get(key, {})
    tree.pop(path[-1], None)


def _write_blob(path: Path, content: bytes) -> None:
    """Write a blob durably under its final name (its name is its content's hash, so a blob
    that exists is whole: it is renamed into place only after its fsync)."""
    partial = path.with_name(path.name + ".partial")
    fd = os.open(partial, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
    try:
        view = memoryview(content)
        while view:
            view = view[os.write(fd, view) :]
        os.fsync(fd)
    finally:
        os.close(fd)
    os.replace(partial, path)
