"""The highest write rate seen per (collection, indexed timestamp field, shard): the hotspots.

Firestore limits writes to a collection whose documents carry a sequentially increasing indexed
field (a timestamp such as `due_at`) to 500 per second, because every such write lands at one
end of the index (https://cloud.google.com/firestore/docs/best-practices, "High read, write,
and delete rates"). An index that has a spreading field (a `shard` value, 0..N-1) before the
timestamp splits that tail into N ranges. The emulator does not enforce the limit; it measures
against it. Every committed write of a document counts once for each timestamp field (at any
depth of maps) that an index of the active index set holds:

- its automatic single-field index, unless an exemption switched it off: key shard None (one
  range for the whole collection);
- a composite index listing it (and every other field of that index present in the document,
  as Firestore indexes only those): key shard = the document's integer `shard` when `shard`
  stands before the timestamp in that index, else None.

So a field that some unsharded index still holds shows up under shard None: the hot range the
500 writes/s guidance applies to. Without an index set (the emulator not strict), every field
is taken as single-field indexed, as Firestore does by default. Keys are counted in one-second
windows of commit time; `snapshot` gives each key's busiest window and total. Deletes are not
counted (they remove entries rather than append them).
"""

from __future__ import annotations

import threading
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

from emulators.firestore.indexes import Definitions, IndexSet, is_exempt
from emulators.firestore.names import DatabaseKey
from emulators.firestore.values import format_field_path

SHARD_FIELD = "shard"

Key = tuple[str, str, int | None]  # (collection id, field path, shard value)
Path = tuple[str, ...]


@dataclass
class _Window:
    second: int = -1
    count: int = 0
    peak: int = 0
    total: int = 0

    def add(self, second: int) -> None:
        if second != self.second:
            self.second, self.count = second, 0
        self.count += 1
        self.total += 1
        self.peak = max(self.peak, self.count)


class WriteRates:
    """Thread-safe per-project peaks; `observe` is called with every commit's outcomes."""

    def __init__(self, indexes: IndexSet | None = None) -> None:
        self._indexes = indexes
        self._lock = threading.Lock()
        self._windows: dict[str, dict[Key, _Window]] = {}

    def observe(self, database: DatabaseKey, outcomes: Iterable[Any]) -> None:
        served = self._indexes.definitions(database) if self._indexes is not None else None
        seen = [
            (key, o.doc.update_time.seconds)
            for o in outcomes
            if o.doc is not None
            for key in _keys(o.doc, served)
        ]
        if not seen:
            return
        with self._lock:
            windows = self._windows.setdefault(database[0], {})
            for key, second in seen:
                windows.setdefault(key, _Window()).add(second)

    def snapshot(self, project: str | None = None) -> list[dict[str, Any]]:
        """One row per key, busiest first: collection, field, shard, peak_writes_per_s, writes."""
        with self._lock:
            projects = [project] if project is not None else list(self._windows)
            merged: dict[Key, tuple[int, int]] = {}
            for p in projects:
                for key, window in self._windows.get(p, {}).items():
                    peak, total = merged.get(key, (0, 0))
                    merged[key] = (max(peak, window.peak), total + window.total)
        rows = [
            {
                "collection": collection,
                "field": field,
                "shard": shard,
                "peak_writes_per_s": peak,
                "writes": total,
            }
            for (collection, field, shard), (peak, total) in merged.items()
        ]
        return sorted(
            rows,
            key=lambda r: (-r["peak_writes_per_s"], r["collection"], r["field"], str(r["shard"])),
        )

    def reset(self, project: str | None = None) -> None:
        with self._lock:
            if project is None:
                self._windows.clear()
            else:
                self._windows.pop(project, None)


def _keys(doc: Any, served: Definitions | None) -> set[Key]:
    collection = doc.name.split("/")[-2]
    values = dict(_leaves(doc.fields, ()))
    shard_value = values.get((SHARD_FIELD,))
    shard = (
        int(shard_value.integer_value)
        if shard_value is not None and shard_value.WhichOneof("value_type") == "integer_value"
        else None
    )
    keys: set[Key] = set()
    for path, value in values.items():
        if value.WhichOneof("value_type") != "timestamp_value":
            continue
        field = format_field_path(path)
        if served is None or not is_exempt(collection, path, served.exemptions):
            keys.add((collection, field, None))
        if served is None:
            continue
        for index in served.indexes:
            paths = [f.path for f in index.fields]
            if index.collection_group != collection or path not in paths:
                continue
            if not all(p in values for p in paths):
                continue  # Firestore leaves a document missing a field out of the index
            sharded = (SHARD_FIELD,) in paths[: paths.index(path)]
            keys.add((collection, field, shard if sharded else None))
    return keys


def _leaves(fields: Any, prefix: Path) -> Iterable[tuple[Path, Any]]:
    """(path, value) of every field, maps walked into (a map's own path is listed too, so a
    composite index on a map field finds it)."""
    for name, value in fields.items():
        path = (*prefix, name)
        yield path, value
        if value.WhichOneof("value_type") == "map_value":
            yield from _leaves(value.map_value.fields, path)
