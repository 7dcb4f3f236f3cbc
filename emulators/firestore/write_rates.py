"""The highest write rate seen per (collection, timestamp field, shard): where hotspots would be.

Firestore limits writes to a collection whose documents carry a sequentially increasing indexed
field (a timestamp such as `due_at`) to 500 per second, because every such write lands at one
end of the index (https://cloud.google.com/firestore/docs/best-practices, "High read, write,
and delete rates"). An index
whose first field spreads the writes (a `shard` value, 0..N-1) splits that tail into N ranges.
The emulator does not enforce the limit; it measures against it: every committed write of a
document counts once for each top-level timestamp field the document holds, keyed by its
collection, that field and the document's integer `shard` field (None without one), in
one-second windows of commit time. `snapshot` gives each key's busiest window and total.
Deletes are not counted (they remove entries rather than append them).
"""

from __future__ import annotations

import threading
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

SHARD_FIELD = "shard"

Key = tuple[str, str, int | None]  # (collection id, field, shard value)


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

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._windows: dict[str, dict[Key, _Window]] = {}

    def observe(self, project: str, outcomes: Iterable[Any]) -> None:
        seen = [(key, second) for o in outcomes if o.doc is not None for key, second in _keys(o)]
        if not seen:
            return
        with self._lock:
            windows = self._windows.setdefault(project, {})
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
        return sorted(rows, key=lambda r: (-r["peak_writes_per_s"], r["collection"], r["field"]))

    def reset(self, project: str | None = None) -> None:
        with self._lock:
            if project is None:
                self._windows.clear()
            else:
                self._windows.pop(project, None)


def _keys(outcome: Any) -> list[tuple[Key, int]]:
    doc = outcome.doc
    collection = doc.name.split("/")[-2]
    second = doc.update_time.seconds
    shard: int | None = None
    timestamps = []
    for name, value in doc.fields.items():
        kind = value.WhichOneof("value_type")
        if kind == "timestamp_value":
            timestamps.append(name)
        elif name == SHARD_FIELD and kind == "integer_value":
            shard = int(value.integer_value)
    return [((collection, name, shard), second) for name in timestamps]
