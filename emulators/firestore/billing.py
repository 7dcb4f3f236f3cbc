"""Billing-style counters per project, following Firestore's billing rules.

Reads: a get bills one read per document requested; a query bills one read per document
returned or skipped by an offset, and at least one; an aggregation bills one read per batch
of up to 1,000 index entries it counted, and at least one. Writes and deletes: one per write.
"""

from __future__ import annotations

import threading
from collections import Counter
from collections.abc import Iterable
from typing import Any

from emulators.firestore.indexes import IndexSet
from emulators.firestore.names import DatabaseKey
from emulators.firestore.write_rates import WriteRates

_FIELDS = ("document_reads", "document_writes", "document_deletes", "index_entries_counted")


class Billing:
    """Thread-safe counters keyed by project, with the write-rate peaks (`write_rates`)."""

    def __init__(self, indexes: IndexSet | None = None) -> None:
        self._lock = threading.Lock()
        self._counts: dict[str, Counter[str]] = {}
        self._calls: dict[str, Counter[str]] = {}
        self._rates = WriteRates(indexes)

    def observe_writes(self, database: DatabaseKey, outcomes: Iterable[Any]) -> None:
        """Feed committed writes to the per-(collection, indexed field, shard) peak rates, as
        the index set serving `database` holds them."""
        self._rates.observe(database, outcomes)

    def add(self, project: str, **amounts: int) -> None:
        with self._lock:
            counts = self._counts.setdefault(project, Counter())
            for name, amount in amounts.items():
                counts[name] += amount

    def call(self, project: str, method: str) -> None:
        with self._lock:
            self._calls.setdefault(project, Counter())[method] += 1

    def snapshot(self, project: str | None = None) -> dict[str, Any]:
        with self._lock:
            projects = (
                [project] if project is not None else list(set(self._counts) | set(self._calls))
            )
            totals: Counter[str] = Counter()
            calls: Counter[str] = Counter()
            for p in projects:
                totals.update(self._counts.get(p, Counter()))
                calls.update(self._calls.get(p, Counter()))
            out: dict[str, Any] = {name: int(totals[name]) for name in _FIELDS}
            out["calls"] = dict(sorted(calls.items()))
        out["write_rates"] = self._rates.snapshot(project)
        return out

    def reset(self, project: str | None = None) -> None:
        self._rates.reset(project)
        with self._lock:
            if project is None:
                self._counts.clear()
                self._calls.clear()
            else:
                self._counts.pop(project, None)
                self._calls.pop(project, None)


def query_reads(returned: int, skipped: int = 0) -> int:
    """A query bills every document it returns or skips, and at least one read."""
    return max(1, returned + skipped)


def aggregation_reads(index_entries: int) -> int:
    """An aggregation bills one read per up to 1,000 index entries, and at least one."""
    return max(1, -(-index_entries // 1000))
