"""The storage emulator's state in a data directory, on disk before any change is answered.

The package's own disk mode rewrote its metadata index (`.meta`, JSON of every bucket and
object) in place on every change and wrote object contents with no fsync, so a SIGKILL during a
change could leave `.meta` empty or cut short, and the next start then failed on a bare JSON
error. `DurableStorage` keeps the package's in-memory store and semantics and, after every
change the package makes (each calls `_write_config_to_file`, the hook used here), writes:

1. each new content file as a blob named by its SHA-256 (`DIR/blobs/<sha256>`), fsynced;
2. the metadata index plus the blob of every content path as one snapshot
   (`DIR/storage.json`), replaced atomically (:func:`emulators.snapshot.write`: temporary
   file, fsync, rename, fsync of the folder), so a crash leaves the previous state or the new
   one, never a mix, and a blob is on disk before any snapshot refers to it;
3. then removes the blobs no snapshot refers to any more.

The package changes its store under the server's lock and the answer is sent after the
handler returns (`serialized.SerializedHandler`), so a change is on disk before its answer.
The cost is one snapshot of the metadata per change, which grows with the number of objects
(measured by `python -m tests.benchmarks persistence`). At start the snapshot is read back and
every blob's SHA-256 checked; anything missing or damaged stops the start with an error
naming the file and the fix. A data directory written by the package's disk mode (an earlier
version of this project) is read once and converted.
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
from emulators.snapshot import FIX, SnapshotError
from emulators.storage.serialized import InMemoryStorage

logger = logging.getLogger(__name__)

SNAPSHOT_KIND = "storage"
_META_KEYS = ("buckets", "objects", "resumable", "bucket_iam_policies", "soft_deleted")
# Where the package's disk mode kept its files under the data directory (its STORAGE_DIR).
_LEGACY_ROOT = ".cloudstorage"


class DurableStorage(InMemoryStorage):
    """The package's in-memory store, every change written to ``folder`` before it returns."""

    def __init__(self, folder: Path) -> None:
        super().__init__()
        self._folder = folder
        self._snapshot = folder / "storage.json"
        self._blobs = folder / "blobs"
        # path -> (the content object last persisted for it, its sha256): the identity check
        # spares hashing every unchanged file on every change.
        self._digests: dict[str, tuple[bytes, str]] = {}
        self._on_disk: set[str] = set()  # blob names written
        self._loading = True
        self._blobs.mkdir(parents=True, exist_ok=True)
        self._load()
        self._loading = False
        self._on_disk = {p.name for p in self._blobs.iterdir() if not p.name.endswith(".partial")}
        self._write_config_to_file()

    # -- the package's hooks -------------------------------------------------------------

    def _write_config_to_file(self) -> None:
        """Called by the package after every change: persist the whole state."""
        if self._loading:
            return
        files: dict[str, bytes] = self._store._files
        refs: dict[str, str] = {}
        new_blob = False
        for path, content in files.items():
            cached = self._digests.get(path)
            if cached is not None and cached[0] is content:
                digest = cached[1]
            else:
                digest = hashlib.sha256(content).hexdigest()
                self._digests[path] = (content, digest)
            refs[path] = digest
            if digest not in self._on_disk:
                _write_blob(self._blobs / digest, content)
                self._on_disk.add(digest)
                new_blob = True
        for gone in set(self._digests) - set(files):
            del self._digests[gone]
        if new_blob:
            snapshot.sync_directory(self._blobs)  # the blobs' names, before a snapshot uses them
        meta = {key: getattr(self, key) for key in _META_KEYS}
        snapshot.write(self._snapshot, SNAPSHOT_KIND, {"meta": meta, "files": refs})
        for unused in self._on_disk - set(refs.values()):
            (self._blobs / unused).unlink(missing_ok=True)
            self._on_disk.discard(unused)

    def add_to_resumable_upload(self, *args: Any, **kwargs: Any) -> Any:
        # The package does not call its hook for a chunk; a chunk acknowledged (308) must stay.
        result = super().add_to_resumable_upload(*args, **kwargs)
        self._write_config_to_file()
        return result

    def wipe(self, keep_buckets: bool = False) -> None:
        super().wipe(keep_buckets=keep_buckets)
        self._write_config_to_file()

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
        saved = self._read_snapshot()
        if saved is None:
            self._convert_legacy()
            return
        meta, files = saved.get("meta"), saved.get("files")
        if not isinstance(meta, dict) or not isinstance(files, dict):
            raise SnapshotError(f"storage: {self._snapshot}: not a storage state file; {FIX}")
        for key in _META_KEYS:
            value = meta.get(key) or {}
            if not isinstance(value, dict):
                raise SnapshotError(f"storage: {self._snapshot}: bad {key!r}; {FIX}")
            setattr(self, key, value)
        for path, digest in files.items():
            blob = self._blobs / str(digest)
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
            self._digests[path] = (self._store._files[path], str(digest))
        logger.info("storage emulator loaded %d files from %s", len(files), self._snapshot)

    def _read_snapshot(self) -> dict[str, Any] | None:
        try:
            return snapshot.read(self._snapshot, SNAPSHOT_KIND)
        except SnapshotError as exc:
            raise SnapshotError(f"storage: {exc}") from exc

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
        for key in _META_KEYS:
            setattr(self, key, meta.get(key) or {})
        for path in root.rglob("*"):
            if path.is_file() and path != meta_file:
                self._store.write_bytes(path.relative_to(root).as_posix(), path.read_bytes())
        logger.warning("storage: converted %s to %s (the old files are kept)", root, self._snapshot)


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
