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
from dataclasses import dataclass, field
from typing import Any

from emulators.firestore.indexes import Definitions, Exemption, IndexSet, is_exempt
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
        self._plans: dict[Definitions | None, _Plan] = {}

    def observe(self, database: DatabaseKey, outcomes: Iterable[Any]) -> None:
        served = self._indexes.definitions(database) if self._indexes is not None else None
        plan = self._plans.get(served)
        if plan is None:
            plan = self._plans[served] = _Plan(served)
        seen = [
            (plan.keys(o.doc), o.doc.update_time.seconds) for o in outcomes if o.doc is not None
        ]
        if not seen:
            return
        with self._lock:
            windows = self._windows.setdefault(database[0], {})
            for keys, second in seen:
                for key in keys:
                    window = windows.get(key)
                    if window is None:
                        window = windows[key] = _Window()
                    window.add(second)

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


@dataclass(frozen=True)
class _Holder:
    """One composite index holding a timestamp path: every path it needs present, and whether
    `shard` stands before the timestamp."""

    paths: tuple[Path, ...]
    sharded: bool


@dataclass(frozen=True)
class _Collection:
    """One collection under one index set, precomputed: top-level fields no index can reach
    (skipped unread), the composite indexes holding each path, the maps on their paths."""

    unreachable: frozenset[str]
    holders: dict[Path, tuple[_Holder, ...]]
    prefixes: frozenset[Path]
    exempt: frozenset[Exemption]
    # Per path met so far, whether an exemption covers it: every write asks again for the
    # same few paths. Two threads racing on a path store the same answer.
    covered: dict[Path, bool] = field(default_factory=dict)

    def is_exempt(self, collection: str, path: Path) -> bool:
        known = self.covered.get(path)
        if known is None:
            known = self.covered[path] = is_exempt(collection, path, self.exempt)
        return known


# Per timestamp path of a collection: its field name, whether its single-field index counts
# it, and the composite indexes holding it (every path each needs present, and whether `shard`
# stands before the timestamp).
_Counted = tuple[str, bool, tuple[tuple[tuple[Path, ...], bool], ...]]
_NO_SHARD = object()  # the document's shard, not read yet


class _Plan:
    """What one index set holds, per collection (computed once per index set)."""

    def __init__(self, served: Definitions | None) -> None:
        self._served = served
        self._collections: dict[str, _Collection] = {}
        self._counted: dict[tuple[str, Path], _Counted] = {}

    def keys(self, doc: Any) -> set[Key]:
        collection = doc.name.rsplit("/", 2)[-2]
        plan = self._of(collection)
        timestamps: list[Path] = []
        _walk(doc.fields, (), collection, plan, timestamps)
        keys: set[Key] = set()
        fields = doc.fields
        present: dict[Path, bool] = {}  # per path an index needs, whether the document has it
        shard: Any = _NO_SHARD
        for path in timestamps:
            field, alone, holders = self._of_path(collection, plan, path)
            if alone:
                keys.add((collection, field, None))
            for paths, sharded in holders:
                if not _has_all(fields, paths, present):
                    continue  # (Firestore leaves a document missing a field out of the index.)
                if sharded and shard is _NO_SHARD:
                    shard = _shard(fields)
                keys.add((collection, field, shard if sharded else None))
        return keys

    def _of_path(self, collection: str, plan: _Collection, path: Path) -> _Counted:
        known = self._counted.get((collection, path))
        if known is None:
            alone = self._served is None or not plan.is_exempt(collection, path)
            holders = tuple((h.paths, h.sharded) for h in plan.holders.get(path, ()))
            known = self._counted[(collection, path)] = (format_field_path(path), alone, holders)
        return known

    def _of(self, collection: str) -> _Collection:
        known = self._collections.get(collection)
        if known is not None:
            return known
        indexes = self._served.indexes if self._served is not None else ()
        exempt = self._served.exemptions if self._served is not None else frozenset()
        composites = [
            tuple(f.path for f in i.fields) for i in indexes if i.collection_group == collection
        ]
        holders: dict[Path, list[_Holder]] = {}
        for paths in composites:
            for n, path in enumerate(paths):
                holders.setdefault(path, []).append(_Holder(paths, (SHARD_FIELD,) in paths[:n]))
        on_paths = {p[:n] for c in composites for p in c for n in range(1, len(p) + 1)}
        unreachable = frozenset(
            name
            for (group, path) in exempt
            if group == collection and len(path) == 1
            for name in path
            if path not in on_paths
        )
        known = _Collection(
            unreachable,
            {path: tuple(h) for path, h in holders.items()},
            frozenset(on_paths),
            exempt,
        )
        self._collections[collection] = known
        return known


def _walk(fields: Any, prefix: Path, collection: str, plan: _Collection, out: list[Path]) -> None:
    """The timestamp fields' paths, reading only fields some index can reach (not exempt, or on
    a composite index's path)."""
    skipped = plan.unreachable if not prefix else frozenset()
    for name in fields:
        if name in skipped:
            continue
        value = fields[name]
        kind = value.WhichOneof("value_type")
        if kind == "timestamp_value":
            out.append((*prefix, name))
        elif kind == "map_value":
            path = (*prefix, name)
            if path in plan.prefixes or not plan.is_exempt(collection, path):
                _walk(value.map_value.fields, path, collection, plan, out)


def _has_all(fields: Any, paths: tuple[Path, ...], known: dict[Path, bool]) -> bool:
    """Whether the document has a value at each of `paths` (each answer remembered in `known`:
    several indexes ask for the same paths)."""
    for path in paths:
        found = known.get(path)
        if found is None:
            found = known[path] = (
                (path[0] in fields) if len(path) == 1 else _value(fields, path) is not None
            )
        if not found:
            return False
    return True


def _value(fields: Any, path: Path) -> Any:
    """The value at `path`, or None when absent."""
    container = fields
    value: Any = None
    for name in path:
        if container is None or name not in container:
            return None
        value = container[name]
        container = (
            value.map_value.fields if value.WhichOneof("value_type") == "map_value" else None
        )
    return value


def _shard(fields: Any) -> int | None:
    if SHARD_FIELD not in fields:
        return None
    value = fields[SHARD_FIELD]
    if value.WhichOneof("value_type") == "integer_value":
        return int(value.integer_value)
    return None
