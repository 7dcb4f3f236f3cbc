"""The write-ahead log that makes an emulator's acknowledged writes survive a crash.

With ``--data-dir`` an emulator keeps two files per component: a snapshot (``NAME.json``, its
whole state, replaced atomically: :mod:`emulators.snapshot`) and a log (``NAME.log``) of every
change since that snapshot. A change is appended to the log (under the emulator's own lock,
before it is applied, so a change that cannot be logged is never applied) and the log is
fsynced before the emulator answers (:meth:`Journal.settle`): what a client was told is
written is on disk, so a SIGKILL or a power cut loses nothing acknowledged. Answers that
*show* state (reads, deliveries) settle too, so nothing a client saw can be lost either.
Concurrent writers share one fsync (group commit): whoever fsyncs first makes every change
appended before it durable, and the others find their change durable already.

At start the snapshot is loaded and the log replayed on top of it; then a new snapshot is
written and the log emptied (compaction), as it is at a clean stop and whenever the log
passes ``compact_bytes`` while running.

The log starts with a marker, ``<magic, acknowledged seq, crc32 of both>``, then records:
``<length, crc32 of payload, crc32 of the first 8 bytes>`` and a JSON payload with a ``seq``
one more than the previous record's (the snapshot holds the ``seq`` it covers). A crash in the
middle of an append leaves a torn last record (cut short, or the zeroed tail a power cut can
leave); it was never acknowledged, so it is discarded and a WARNING says so. The marker tells
that apart from a log cut short by more: it is rewritten in place after each fsync with the
last sequence number that fsync made durable (never more: it is written after the fsync
returns, and the next fsync carries it to disk, so after a power cut it may lag by one group
commit; after a SIGKILL it is exact). A log whose intact records end before the marker's
sequence lost acknowledged writes, and the start refuses it. Anything else that does not check
out (a bad record followed by more, a gap in the sequence, a snapshot that does not parse or
whose checksum does not match) stops the start with an error naming the component, the file
and the fix, and the files are left as they are. A log from before the marker (no magic) is
read as before, without that check, and the start that reads it writes a marked one.
"""

from __future__ import annotations

import json
import logging
import os
import struct
import threading
import zlib
from collections.abc import Iterator
from pathlib import Path
from typing import Any, Protocol

from emulators import snapshot
from emulators.snapshot import FIX, SnapshotError

logger = logging.getLogger(__name__)

_HEADER = struct.Struct("<III")  # payload length, payload crc32, crc32 of those 8 bytes
# The log's first bytes: magic, the last acknowledged (durable) seq, crc32 of those 16 bytes.
_MARKER = struct.Struct("<8sQI")
_MAGIC = b"EMUJLOG2"
# The size of a log that holds no record (after a compaction: a clean stop, a start).
MARKER_BYTES = _MARKER.size
# A log larger than this is folded into a new snapshot while the emulator runs.
DEFAULT_COMPACT_BYTES = 64 * 1024 * 1024


class JournalError(Exception):
    """The data directory could not be written: the change was not acknowledged, and this
    emulator acknowledges nothing more until it is restarted."""


def _sync_data(fd: int) -> None:
    # fdatasync also flushes the file size an append changed; macOS has only fsync.
    if hasattr(os, "fdatasync"):
        os.fdatasync(fd)
    else:  # pragma: no cover - not Linux
        os.fsync(fd)


def encode_record(payload: dict[str, Any]) -> bytes:
    body = json.dumps(payload, separators=(",", ":")).encode("utf-8")
    head = struct.pack("<II", len(body), zlib.crc32(body))
    return head + struct.pack("<I", zlib.crc32(head)) + body


class Journal:
    """One component's snapshot and log in a data directory."""

    def __init__(
        self,
        component: str,
        folder: Path,
        name: str,
        kind: str,
        *,
        compact_bytes: int = DEFAULT_COMPACT_BYTES,
    ) -> None:
        self.component = component
        self.kind = kind
        self.snapshot_path = folder / f"{name}.json"
        self.log_path = folder / f"{name}.log"
        self.compact_bytes = compact_bytes
        self._lock = threading.Lock()  # appends, and the counters below
        self._sync_lock = threading.Lock()  # one fsync (or compaction) at a time
        self._fd: int | None = None
        self._appended = 0  # seq of the last record written to the log
        self._durable = 0  # seq up to which the log (or a snapshot) is on disk
        self._size = 0  # bytes appended since the last compaction
        self._end = 0  # where the next record goes
        self._broken: str | None = None
        self._acknowledged = 0  # what the log's marker says was acknowledged (load)
        self._torn: tuple[int, int, str] | None = None  # a torn last record (load)
        self.fsyncs = 0  # how many times the log was fsynced (group commits)

    # -- start ------------------------------------------------------------------------------

    def load(self) -> tuple[dict[str, Any] | None, list[dict[str, Any]]]:
        """The saved snapshot (None when there is none) and the log's records after it."""
        try:
            saved = snapshot.read(self.snapshot_path, self.kind)
        except SnapshotError as exc:
            raise SnapshotError(f"{self.component}: {exc}") from exc
        covered = 0
        if saved is not None:
            covered = saved.pop("log_seq", 0)
            if not isinstance(covered, int) or covered < 0:
                raise SnapshotError(
                    f"{self.component}: {self.snapshot_path}: bad log_seq {covered!r}; {FIX}"
                )
        records = []
        expected = covered + 1
        self._acknowledged, self._torn = 0, None
        for offset, record in self._read_log():
            seq = record.get("seq")
            if not isinstance(seq, int):
                raise self._corrupt(offset, "a record without a sequence number")
            if seq <= covered:
                continue  # already in the snapshot (a crash between its rename and the trim)
            if seq != expected:
                raise self._corrupt(offset, f"record {seq} where {expected} was expected")
            records.append(record)
            expected += 1
        last = expected - 1
        if self._acknowledged > last:
            raise SnapshotError(
                f"{self.component}: {self.log_path}: cut short: its intact records end at "
                f"{last}, but record {self._acknowledged} was acknowledged (more than a torn "
                f"last record is missing); {FIX}"
            )
        if self._torn is not None:
            self._discard_torn(*self._torn)
        self._appended = self._durable = last
        return saved, records

    def start(self, state: dict[str, Any]) -> None:
        """Fold ``state`` (the loaded snapshot with the log replayed) into a new snapshot,
        empty the log and open it for appends."""
        self.snapshot_path.parent.mkdir(parents=True, exist_ok=True)
        # Not O_APPEND: the marker at the start is rewritten in place (pwrite at an offset
        # on an O_APPEND descriptor appends on Linux); records go at `_end`.
        self._fd = os.open(self.log_path, os.O_WRONLY | os.O_CREAT, 0o644)
        snapshot.sync_directory(self.log_path.parent)
        self.compact(state)

    def _read_log(self) -> Iterator[tuple[int, dict[str, Any]]]:
        try:
            data = self.log_path.read_bytes()
        except FileNotFoundError:
            return
        except OSError as exc:
            raise SnapshotError(
                f"{self.component}: {self.log_path}: cannot be read ({exc}); {FIX}"
            ) from exc
        offset = 0
        if data[: len(_MAGIC)] == _MAGIC:
            if len(data) < _MARKER.size:
                raise self._corrupt(0, "a marker cut short")
            _magic, acknowledged, crc = _MARKER.unpack_from(data, 0)
            if zlib.crc32(data[: _MARKER.size - 4]) != crc:
                raise self._corrupt(0, "a marker that does not check out")
            self._acknowledged = acknowledged
            offset = _MARKER.size
        while offset < len(data):
            rest = len(data) - offset
            if rest < _HEADER.size:
                self._torn = (offset, rest, "cut short in its header")
                return
            length, body_crc, head_crc = _HEADER.unpack_from(data, offset)
            if zlib.crc32(data[offset : offset + 8]) != head_crc:
                if not data[offset:].strip(b"\0"):
                    self._torn = (offset, rest, "zeroed")
                    return
                raise self._corrupt(offset, "a record header that does not check out")
            end = offset + _HEADER.size + length
            if end > len(data):
                self._torn = (offset, rest, "cut short")
                return
            body = data[offset + _HEADER.size : end]
            if zlib.crc32(body) != body_crc:
                if end == len(data):
                    self._torn = (offset, rest, "its checksum does not match")
                    return
                raise self._corrupt(offset, "a record whose checksum does not match")
            try:
                record = json.loads(body)
            except (json.JSONDecodeError, UnicodeDecodeError) as exc:
                raise self._corrupt(offset, f"a record that is not JSON ({exc})") from exc
            if not isinstance(record, dict):
                raise self._corrupt(offset, "a record that is not a JSON object")
            yield offset, record
            offset = end

    def _discard_torn(self, offset: int, size: int, why: str) -> None:
        logger.warning(
            "%s: discarded the torn last record of %s (%d bytes at byte %d, %s): a crash in "
            "the middle of an append; that write was never acknowledged",
            self.component,
            self.log_path,
            size,
            offset,
            why,
        )

    def _corrupt(self, offset: int, what: str) -> SnapshotError:
        return SnapshotError(
            f"{self.component}: {self.log_path}: corrupt at byte {offset}: {what}; {FIX}"
        )

    # -- while running ------------------------------------------------------------------------

    def append(self, payload: dict[str, Any]) -> bool:
        """Write one change to the log (not yet durable: :meth:`settle` makes it so).

        Call with the emulator's own lock held, before applying the change, so the log's
        order is the order changes were applied in. Returns whether the log has grown past
        ``compact_bytes`` (the caller then compacts, still under its lock). Raises
        :class:`JournalError` when the log cannot be written.
        """
        with self._lock:
            self._check()
            assert self._fd is not None, "Journal.start was not called"
            seq = self._appended + 1
            record = encode_record({"seq": seq, **payload})
            try:
                _write_at(self._fd, record, self._end)
            except OSError as exc:
                self._broken = f"cannot append to {self.log_path}: {exc}"
                raise JournalError(f"{self.component}: {self._broken}") from exc
            self._appended = seq
            self._end += len(record)
            self._size += len(record)
            return self._size >= self.compact_bytes

    def settle(self) -> None:
        """Return once every change appended so far is on disk (group commit)."""
        with self._lock:
            self._check()
            target = self._appended
            if self._durable >= target:
                return
        with self._sync_lock:
            with self._lock:
                self._check()
                if self._durable >= target:
                    return  # another caller's fsync covered it
                upto, fd = self._appended, self._fd
            assert fd is not None
            try:
                _sync_data(fd)
                # Only now that `upto` is durable may the marker say so; the next fsync (or
                # the kernel's writeback) takes it to disk (see the module docstring).
                _write_at(fd, _marker(upto), 0)
            except OSError as exc:
                with self._lock:
                    self._broken = f"cannot fsync {self.log_path}: {exc}"
                raise JournalError(f"{self.component}: {self._broken}") from exc
            with self._lock:
                self.fsyncs += 1
                self._durable = max(self._durable, upto)

    def compact(self, state: dict[str, Any]) -> None:
        """Replace the snapshot with ``state`` (every change appended so far) and empty the
        log. Call with the emulator's lock held, so no change is appended meanwhile."""
        with self._sync_lock, self._lock:
            self._check()
            seq = self._appended
            try:
                snapshot.write(self.snapshot_path, self.kind, {**state, "log_seq": seq})
                if self._fd is not None:
                    # The snapshot covering every record is durable: the log can go. A crash
                    # before this truncation replays records the snapshot has (skipped by seq).
                    os.ftruncate(self._fd, 0)
                    _write_at(self._fd, _marker(seq), 0)
                    os.fsync(self._fd)
                    self._end = _MARKER.size
            except OSError as exc:
                self._broken = f"cannot write {self.snapshot_path}: {exc}"
                raise JournalError(f"{self.component}: {self._broken}") from exc
            self._durable = seq
            self._size = 0

    def close(self, state: dict[str, Any] | None) -> None:
        """A clean stop: fold everything into the snapshot (when ``state`` is given)."""
        try:
            if state is not None and self._broken is None:
                self.compact(state)
        finally:
            with self._lock:
                if self._fd is not None:
                    os.close(self._fd)
                    self._fd = None
                    self._broken = self._broken or "closed"

    def fail(self, reason: str) -> JournalError:
        """Stop acknowledging: something the next change would refer to (a blob) could not be
        written. Every later append, settle and compaction raises until a restart."""
        with self._lock:
            self._broken = self._broken or reason
        return JournalError(f"{self.component}: {reason}")

    def check(self) -> None:
        """Raise JournalError once this journal acknowledges nothing more."""
        with self._lock:
            self._check()

    def _check(self) -> None:
        if self._broken is not None:
            raise JournalError(f"{self.component}: {self._broken}; restart the emulator")


def _marker(acknowledged: int) -> bytes:
    head = struct.pack("<8sQ", _MAGIC, acknowledged)
    return head + struct.pack("<I", zlib.crc32(head))


def _write_at(fd: int, data: bytes, offset: int) -> None:
    view = memoryview(data)
    while view:
        written = os.pwrite(fd, view, offset)
        view, offset = view[written:], offset + written


class Replayable(Protocol):
    """An emulator's state as the journal restores it: a snapshot, then each logged change."""

    def import_state(self, state: dict[str, Any]) -> int: ...

    def replay(self, record: dict[str, Any]) -> object: ...

    def export_state(self) -> dict[str, Any]: ...


def open_journal(
    state: Replayable, component: str, data_file: Path, kind: str, noun: str, label: str
) -> Journal:
    """Load `data_file`'s snapshot into `state`, replay the log on top, and start logging;
    a damaged file is a SnapshotError naming the component, the file and the fix. `noun`
    is what the snapshot counts (documents, messages), `label` how the log lines name it."""
    journal = Journal(component, data_file.parent, data_file.stem, kind)
    saved, records = journal.load()
    where = data_file
    try:
        if saved is not None:
            loaded = state.import_state(saved)
            logger.info("%s loaded %d %s from %s", label, loaded, noun, data_file)
        where = journal.log_path
        for record in records:
            state.replay(record)
    except SnapshotError as exc:
        raise SnapshotError(f"{component}: {where}: {exc}; {FIX}") from exc
    if records:
        logger.info("%s replayed %d changes from %s", label, len(records), where)
    journal.start(state.export_state())
    return journal
