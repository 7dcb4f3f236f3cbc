"""One Firestore database held in memory: current documents, their history, and indexes.

Not thread-safe by itself: the :class:`~emulators.firestore.engine.Engine` serialises access.
Indexes: an equality index and an array-contains index per (collection id, field path), kept
up to date on every write; a sorted index per (collection id, field path) built the first
time a range filter or an ordering needs it; and a composite index per (collection id, field
paths) built the first time a query with equalities and an ordering needs it (as production
serves such a query from a composite index,
https://cloud.google.com/firestore/docs/query-data/index-overview#composite_indexes), both
maintained from then on.

A field with a single-field index exemption (strict mode: the loaded index definitions; a
map's exemption covers its inner fields) gets no equality or array-contains entries: an
exemption overrides the automatic single-field indexing of the field
(https://cloud.google.com/firestore/docs/concepts/index-overview, "Single-field index
exemptions"), so production keeps none for it, and a query that would need them fails with
FAILED_PRECONDITION (the check in indexes.py). The planner treats such a field as unindexed
(:meth:`Database.equality_index` answers None), so each query the index set serves returns
what it would with every entry. A sorted index on such a field (the planner may walk one when
a composite index serves the query) is built from the documents instead.
"""

from __future__ import annotations

import bisect
import itertools
import sys
from collections import defaultdict
from collections.abc import Iterable, Iterator
from typing import Any

from google.cloud.firestore_v1.types import document as document_types

from emulators.firestore.indexes import Exemption, is_exempt
from emulators.firestore.names import DatabaseKey, documents_root
from emulators.firestore.values import (
    FieldPath,
    SortKey,
    get_field,
    kind,
    reference_key,
    sort_key,
    walk,
)

Document = document_types.Document.pb()

IndexKey = tuple[str, FieldPath]
# The fields of a composite index, in its key order: equality fields, then the ordered one.
CompositePaths = tuple[FieldPath, ...]
VERSION_RETENTION_US = 3600 * 1_000_000


class Stored:
    """A committed document version plus cached sort keys of its fields."""

    __slots__ = ("_name_key", "cache", "collection_id", "doc", "name", "update_us")

    def __init__(self, doc: Any, update_us: int) -> None:
        self.doc = doc
        self.name: str = doc.name
        self._name_key: SortKey | None = None
        # One string per collection id, not one per document.
        self.collection_id = sys.intern(self.name.split("/")[-2])
        self.update_us = update_us
        self.cache: dict[FieldPath, SortKey | None] = {}

    @property
    def name_key(self) -> SortKey:
        """The document's key as a reference value, made when first asked for (most stored
        documents are never ordered by name)."""
        if self._name_key is None:
            self._name_key = (6, reference_key(self.name))
        return self._name_key

    def key(self, path: FieldPath) -> SortKey | None:
        """Sort key of the field at ``path`` (None when absent); ``__name__`` is the doc key."""
        if path == ("__name__",):
            return self.name_key
        try:
            return self.cache[path]
        except KeyError:
            value = get_field(self.doc.fields, path)
            key = None if value is None else sort_key(value)
            self.cache[path] = key
            return key

    def value(self, path: FieldPath) -> Any | None:
        return get_field(self.doc.fields, path)


Entry = tuple[SortKey, str]
# Entries are kept in blocks of about this many (split above twice as many, merged with a
# neighbour below a quarter): an insert or a delete moves one block's references instead of up
# to all of them (one list of 10,000 entries moved ~2.5 us per insert or delete, and a job's
# write moves its entry in every composite index).
BLOCK = 512


class SortedIndex:
    """(sort key, name) pairs in order, for range filters and ordering; positions count
    entries from the first, as in one sorted list."""

    def __init__(self, entries: Iterable[Entry], block: int = BLOCK) -> None:
        ordered = sorted(entries)
        self._block = block
        self._blocks = [ordered[i : i + block] for i in range(0, len(ordered), block)]
        self._maxes = [b[-1] for b in self._blocks]  # the last entry of each block
        self._len = len(ordered)
        self._starts: list[int] | None = None  # each block's first position, made when asked

    def __len__(self) -> int:
        return self._len

    @property
    def entries(self) -> list[Entry]:
        """Every entry, in order (a new list)."""
        return [entry for block in self._blocks for entry in block]

    def add(self, key: SortKey, name: str) -> None:
        entry = (key, name)
        self._len += 1
        self._starts = None
        if not self._blocks:
            self._blocks.append([entry])
            self._maxes.append(entry)
            return
        b = min(bisect.bisect_left(self._maxes, entry), len(self._blocks) - 1)
        block = self._blocks[b]
        bisect.insort(block, entry)
        self._maxes[b] = block[-1]
        self._rebalance(b)

    def remove(self, key: SortKey, name: str) -> None:
        entry = (key, name)
        b = bisect.bisect_left(self._maxes, entry)
        if b == len(self._blocks):
            return
        block = self._blocks[b]
        i = bisect.bisect_left(block, entry)
        if i < len(block) and block[i] == entry:
            del block[i]
            self._len -= 1
            self._starts = None
            if block:
                self._maxes[b] = block[-1]
                self._rebalance(b)
            else:
                del self._blocks[b]
                del self._maxes[b]

    def _rebalance(self, b: int) -> None:
        """Split block ``b`` when it grew too large; merge it into a neighbour when it shrank
        too small (so many deletes leave few small blocks)."""
        block = self._blocks[b]
        if len(block) < self._block // 4 and len(self._blocks) > 1:
            j = b if b + 1 < len(self._blocks) else b - 1
            block = self._blocks[j] + self._blocks[j + 1]
            self._blocks[j : j + 2] = [block]
            self._maxes[j : j + 2] = [block[-1]]
            b = j
        if len(block) > 2 * self._block:
            half = len(block) // 2
            self._blocks[b : b + 1] = [block[:half], block[half:]]
            self._maxes[b : b + 1] = [block[half - 1], block[-1]]

    def _block_starts(self) -> list[int]:
        if self._starts is None:
            self._starts = list(itertools.accumulate((len(b) for b in self._blocks), initial=0))
        return self._starts

    def _position(self, bound: tuple[Any, ...]) -> int:
        """Position of the first entry not less than ``bound`` (bisect_left over them all)."""
        b = bisect.bisect_left(self._maxes, bound)
        if b == len(self._blocks):
            return self._len
        return self._block_starts()[b] + bisect.bisect_left(self._blocks[b], bound)

    def names(self, lo: int, hi: int, reverse: bool = False) -> Iterator[str]:
        """The names at positions [lo, hi), in order (or in reverse)."""
        lo, hi = max(lo, 0), min(hi, self._len)
        if lo >= hi:
            return
        starts = self._block_starts()
        first = bisect.bisect_right(starts, lo) - 1
        last = bisect.bisect_right(starts, hi - 1) - 1
        order = range(last, first - 1, -1) if reverse else range(first, last + 1)
        for b in order:
            part = self._blocks[b][max(lo - starts[b], 0) : hi - starts[b]]
            for _, name in reversed(part) if reverse else part:
                yield name

    def span(
        self, low: SortKey, low_inclusive: bool, high: SortKey, high_inclusive: bool
    ) -> tuple[int, int]:
        """Positions [lo, hi) of the entries whose key lies between the bounds."""
        # (key,) sorts before every (key, name) and (key, _MAX_NAME) after: bound sentinels.
        lo = self._position((low,) if low_inclusive else (low, _MAX_NAME))
        hi = self._position((high, _MAX_NAME) if high_inclusive else (high,))
        return lo, max(lo, hi)

    def between(
        self, low: SortKey, low_inclusive: bool, high: SortKey, high_inclusive: bool
    ) -> list[str]:
        lo, hi = self.span(low, low_inclusive, high, high_inclusive)
        return list(self.names(lo, hi))

    def count_between(
        self, low: SortKey, low_inclusive: bool, high: SortKey, high_inclusive: bool
    ) -> int:
        lo, hi = self.span(low, low_inclusive, high, high_inclusive)
        return hi - lo


class _MaxName(str):
    """Sorts after every document name."""

    def __lt__(self, other: object) -> bool:
        return False

    def __gt__(self, other: object) -> bool:
        return True

    def __le__(self, other: object) -> bool:
        return self == other

    def __ge__(self, other: object) -> bool:
        return True


_MAX_NAME = _MaxName("\U0010ffff")


class Database:
    """Documents of one (project, database)."""

    def __init__(self, key: DatabaseKey, unindexed: frozenset[Exemption] = frozenset()) -> None:
        self.key = key
        self.root = documents_root(key)
        self.docs: dict[str, Stored] = {}
        self.history: dict[str, list[tuple[int, Stored | None]]] = {}
        self.by_collection: dict[str, set[str]] = defaultdict(set)
        self.by_group: dict[str, set[str]] = defaultdict(set)
        self.ever_by_group: dict[str, set[str]] = defaultdict(set)
        self.eq_index: dict[IndexKey, dict[SortKey, set[str]]] = defaultdict(
            lambda: defaultdict(set)
        )
        self.contains_index: dict[IndexKey, dict[SortKey, set[str]]] = defaultdict(
            lambda: defaultdict(set)
        )
        self.sorted_indexes: dict[IndexKey, SortedIndex] = {}
        self.composite_indexes: dict[str, dict[CompositePaths, SortedIndex]] = {}
        # The (collection group, field) single-field index exemptions, and per (collection id,
        # field path) whether one covers it; each path once, shared by every document's cache.
        self.unindexed = unindexed
        self._paths: dict[IndexKey, tuple[FieldPath, bool]] = {}
        # Per collection id, the top-level fields a sorted index lies on or inside.
        self._sorted_tops: dict[str, set[str]] = defaultdict(set)

    def _has_entries(self, cid: str, name: str) -> bool:
        """Whether the top-level field ``name`` can have an equality, array-contains or sorted
        index entry, its own or a nested field's. Not when an exemption covers it (and so
        every field inside it, as :func:`is_exempt` reads a map's) and no sorted index lies on
        or in it; composite indexes are moved on their own (:meth:`_move_composites`)."""
        return self._path(cid, (name,))[1] or name in self._sorted_tops.get(cid, ())

    def single_field_indexed(self, collection_id: str, path: FieldPath) -> bool:
        """Whether ``path`` of the collection group has single-field index entries."""
        return self._path(collection_id, path)[1]

    def _path(self, cid: str, path: FieldPath) -> tuple[FieldPath, bool]:
        """(the one shared copy of ``path``, whether it is single-field indexed)."""
        known = self._paths.get((cid, path))
        if known is None:
            known = (path, not is_exempt(cid, path, self.unindexed))
            self._paths[(cid, path)] = known
        return known

    def equality_index(self, collection_id: str, path: FieldPath) -> dict[SortKey, set[str]] | None:
        """Names by value of ``path``'s single-field index; None when an exemption switched it
        off (a planner must then not narrow by it)."""
        if not self.single_field_indexed(collection_id, path):
            return None
        return self.eq_index.get((collection_id, path), {})

    def contains_index_of(
        self, collection_id: str, path: FieldPath
    ) -> dict[SortKey, set[str]] | None:
        """Names by array item of ``path``; None when an exemption switched it off."""
        if not self.single_field_indexed(collection_id, path):
            return None
        return self.contains_index.get((collection_id, path), {})

    def set_unindexed(self, unindexed: frozenset[Exemption]) -> None:
        """Serve under other exemptions (a project given other index definitions): the
        single-field entries are rebuilt from the current documents."""
        if unindexed == self.unindexed:
            return
        self.unindexed = unindexed
        self._paths.clear()
        self.eq_index.clear()
        self.contains_index.clear()
        self.sorted_indexes.clear()
        self._sorted_tops.clear()
        for stored in self.docs.values():
            self._index(stored, walk(stored.doc.fields))

    # -- reads ----------------------------------------------------------------------------

    def get(self, name: str, read_us: int | None = None) -> Stored | None:
        if read_us is None:
            return self.docs.get(name)
        versions = self.history.get(name)
        if not versions:
            return None
        i = bisect.bisect_right(versions, read_us, key=lambda v: v[0])
        return versions[i - 1][1] if i else None

    def group_names(self, collection_id: str, read_us: int | None) -> set[str]:
        if read_us is None:
            return self.by_group.get(collection_id, set())
        return self.ever_by_group.get(collection_id, set())

    def all_names(self, read_us: int | None) -> Iterable[str]:
        if read_us is None:
            return self.docs.keys()
        return self.history.keys()

    def sorted_index(self, collection_id: str, path: FieldPath) -> SortedIndex:
        index = self.sorted_indexes.get((collection_id, path))
        if index is None:
            by_value = self.equality_index(collection_id, path)
            if by_value is not None:
                # The equality index already groups names by value: sort values, not documents.
                entries = [(key, name) for key, names in by_value.items() for name in names]
            else:
                entries = []
                for name in self.by_group.get(collection_id, ()):
                    key = self.docs[name].key(path)
                    if key is not None:
                        entries.append((key, name))
            index = SortedIndex(entries)
            self.sorted_indexes[(collection_id, path)] = index
            self._sorted_tops[collection_id].add(path[0])
        return index

    def composite_index(self, collection_id: str, paths: CompositePaths) -> SortedIndex:
        """Entries ((key of each path, in order), name) of the documents of the collection
        group that have every one of ``paths``; built on first use."""
        by_paths = self.composite_indexes.setdefault(collection_id, {})
        index = by_paths.get(paths)
        if index is None:
            entries = []
            for name in self.by_group.get(collection_id, ()):
                key = _composite_key(self.docs[name], paths)
                if key is not None:
                    entries.append((key, name))
            index = SortedIndex(entries)
            by_paths[paths] = index
        return index

    # -- writes ---------------------------------------------------------------------------

    def put(
        self, name: str, doc: Any | None, time_us: int, touched: frozenset[str] | None = None
    ) -> None:
        """Make ``doc`` (or a deletion when None) the current version of ``name``.
        ``touched``: the only top-level fields that can differ from the current version (a
        masked update's), None when any can."""
        old = self.docs.get(name)
        stored = Stored(doc, time_us) if doc is not None else None
        if old is not None and stored is not None:
            self._reindex(old, stored, touched)
        elif old is not None:
            self._unindex(old, walk(old.doc.fields))
        segments = name.split("/")
        collection_path = "/".join(segments[:-1])
        collection_id = segments[-2]
        if stored is None:
            self.docs.pop(name, None)
            self.by_collection[collection_path].discard(name)
            self.by_group[collection_id].discard(name)
        else:
            self.docs[name] = stored
            self.by_collection[collection_path].add(name)
            self.by_group[collection_id].add(name)
            if old is None:
                self._index(stored, walk(stored.doc.fields))
        self._move_composites(collection_id, old, stored)
        self.ever_by_group[collection_id].add(name)
        versions = self.history.setdefault(name, [])
        versions.append((time_us, stored))
        # Keep versions a read_time may still ask for (production: the last hour), no more.
        cutoff = time_us - VERSION_RETENTION_US
        drop = 0
        while drop + 1 < len(versions) and versions[drop + 1][0] <= cutoff:
            drop += 1
        if drop:
            del versions[:drop]

    def _move_composites(self, cid: str, old: Stored | None, new: Stored | None) -> None:
        """Once per write, whatever number of fields changed: a document's entry in each
        composite index moves only when its key there changed."""
        for paths, composite in self.composite_indexes.get(cid, {}).items():
            before = _composite_key(old, paths) if old is not None else None
            after = _composite_key(new, paths) if new is not None else None
            if before == after:
                continue
            if old is not None and before is not None:
                composite.remove(before, old.name)
            if new is not None and after is not None:
                composite.add(after, new.name)

    def _reindex(self, old: Stored, new: Stored, touched: frozenset[str] | None = None) -> None:
        """Move the index entries of a document from its `old` version to its `new` one,
        touching only the top-level fields whose value changed: an update usually changes a
        few fields of many, and an equal value (protobuf equality, so 1 and 1.0 differ) has
        exactly the same entries. A field that can have no entries (:meth:`_has_entries`) is
        not even compared. The sort keys of unchanged fields carry over."""
        old_fields, new_fields = old.doc.fields, new.doc.fields
        cid = new.collection_id
        unchanged: set[str] = set()
        names = {*old_fields, *new_fields} if touched is None else touched
        for name in names:
            if not self._has_entries(cid, name):
                continue  # (its cached sort keys are not carried over: made again if asked)
            before = old_fields.get(name)
            after = new_fields.get(name)
            if before is not None and after is not None and before == after:
                unchanged.add(name)
                continue
            if before is not None:
                self._unindex(old, _subtree(name, before))
            if after is not None:
                self._index(new, _subtree(name, after))
        for path, key in old.cache.items():
            if path[0] in unchanged or (touched is not None and path[0] not in touched):
                new.cache[path] = key

    def _index(self, stored: Stored, entries: Iterable[tuple[FieldPath, Any]]) -> None:
        cid = stored.collection_id
        for given, value in entries:
            path, indexed = self._path(cid, given)
            index = self.sorted_indexes.get((cid, path))
            if not indexed:
                if index is not None:
                    index.add(_present(stored.key(path)), stored.name)
                continue
            key = _present(stored.key(path))
            self.eq_index[(cid, path)][key].add(stored.name)
            if kind(value) == "array_value":
                bucket = self.contains_index[(cid, path)]
                for item in value.array_value.values:
                    bucket[sort_key(item)].add(stored.name)
            if index is not None:
                index.add(key, stored.name)

    def _unindex(self, stored: Stored, entries: Iterable[tuple[FieldPath, Any]]) -> None:
        cid = stored.collection_id
        for given, value in entries:
            path, indexed = self._path(cid, given)
            index = self.sorted_indexes.get((cid, path))
            if not indexed:
                if index is not None:
                    index.remove(_present(stored.key(path)), stored.name)
                continue
            key = _present(stored.key(path))
            by_value = self.eq_index.get((cid, path))
            if by_value is not None:
                names = by_value.get(key)
                if names is not None:
                    names.discard(stored.name)
                    if not names:
                        del by_value[key]
            if kind(value) == "array_value":
                bucket = self.contains_index.get((cid, path))
                if bucket is not None:
                    for item in value.array_value.values:
                        names = bucket.get(sort_key(item))
                        if names is not None:
                            names.discard(stored.name)
                            if not names:
                                del bucket[sort_key(item)]
            if index is not None:
                index.remove(key, stored.name)


def _present(key: SortKey | None) -> SortKey:
    """The sort key of a field the document has (walked from its own fields)."""
    assert key is not None
    return key


def _subtree(name: str, value: Any) -> Iterator[tuple[FieldPath, Any]]:
    """The top-level field `name` and, for a map, every field inside it (as `walk` gives)."""
    yield (name,), value
    if kind(value) == "map_value":
        yield from walk(value.map_value.fields, (name,))


def _composite_key(stored: Stored, paths: CompositePaths) -> SortKey | None:
    """The document's key in a composite index on ``paths``; None when a field is absent
    (such a document is not in the index, as in production)."""
    keys = []
    for path in paths:
        key = stored.key(path)
        if key is None:
            return None
        keys.append(key)
    return tuple(keys)
