"""Merge: the k-way merge of per-shard pages into one ordered answer.

With JOBS_SHARDS > 1 every ordered read runs one query per shard; each answer is in
(order field, document ID) order, so their merge in the same order, as Firestore orders values,
is the order one unsharded query would have given.
"""

from __future__ import annotations

import heapq
import itertools
from collections.abc import Sequence
from datetime import UTC, datetime
from typing import Any

# Firestore's order of value types: null < boolean < number < timestamp < string < bytes <
# reference < geo point < array < map
# (https://firebase.google.com/docs/firestore/manage-data/data-types#value_type_ordering).
_TYPE_RANK: tuple[tuple[type, int], ...] = (
    (bool, 1),  # before int: a bool is an int in Python
    (int, 2),
    (float, 2),
    (datetime, 3),
    (str, 4),
    (bytes, 5),
)


def order_key(snapshot: Any, field_path: str) -> tuple[int, Any, str]:
    """`snapshot`'s place in `order by field_path, __name__`, as Firestore orders it (values of
    kinds this store never orders by sort after, by their text)."""
    try:
        value = snapshot.get(field_path)
    except KeyError:
        value = None
    if value is None:
        return (0, 0, snapshot.id)
    for kind, rank in _TYPE_RANK:
        if isinstance(value, kind):
            if isinstance(value, datetime):
                value = value.astimezone(UTC)
            return (rank, value, snapshot.id)
    return (6, repr(value), snapshot.id)


def merged(pages: Sequence[list[Any]], field_path: str, limit: int) -> list[Any]:
    """The first `limit` of the shards' pages, each in (field_path, ID) order, merged into
    that order: the k-way merge that makes N per-shard queries one ordered answer."""
    if len(pages) == 1:
        return pages[0][:limit]
    ordered = heapq.merge(*pages, key=lambda snapshot: order_key(snapshot, field_path))
    return list(itertools.islice(ordered, limit))
