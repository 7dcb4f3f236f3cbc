"""The Firestore layout every component agrees on: collection names, composite indexes, TTL fields.

This module is the one source of truth: the store runs its queries against these collections,
and the Pulumi program (`infra/`) creates exactly these indexes and TTL policies. A test proves
each query the store runs is served by an index declared here.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

JOBS = "jobs"
IDEMPOTENCY = "idempotency"
CONTROL = "control"
SCAN_RUNS = "scan_runs"
REJECTED = "rejected"

# The single control document the operator edits (pause, budgets, catch-up rate).
CONTROL_DOCUMENT = "scan"

Order = Literal["ASCENDING", "DESCENDING"]


@dataclass(frozen=True)
class IndexField:
    path: str
    order: Order = "ASCENDING"


@dataclass(frozen=True)
class CompositeIndex:
    """A collection-scoped composite index, in the order Firestore needs its fields."""

    collection: str
    fields: tuple[IndexField, ...]

    @property
    def field_paths(self) -> tuple[str, ...]:
        return tuple(f.path for f in self.fields)


# `state == X and <field> <= T order by <field>`: equality field first, then the range field.
# Each serves the store's queries named beside it (tests/unit/jobs/test_indexes.py proves it).
INDEXES: tuple[CompositeIndex, ...] = (
    # claim_due, stats (due count, oldest overdue), list(state=…, due_before/overdue_at=…)
    CompositeIndex(JOBS, (IndexField("state"), IndexField("due_at"))),
    # reclaim_expired (stuck claims), stats (stuck_claims), list(claimed_before=…)
    CompositeIndex(JOBS, (IndexField("state"), IndexField("claim.claimed_at"))),
    # reclaim_expired (expired leases), stats (expired_leases)
    CompositeIndex(JOBS, (IndexField("state"), IndexField("lease_until"))),
    # backlog (stale_enqueued, oldest enqueued age)
    CompositeIndex(JOBS, (IndexField("state"), IndexField("enqueued_at"))),
)


@dataclass(frozen=True)
class QueryShape:
    """What a query asks of the indexes: its equality fields and its ordered (range/order-by)
    fields, without the implicit `__name__` tiebreak."""

    collection: str
    equality: frozenset[str]
    ordered: tuple[IndexField, ...]


def serving_index(
    shape: QueryShape, indexes: tuple[CompositeIndex, ...] = INDEXES
) -> CompositeIndex | None:
    """The declared composite index serving `shape`, or None when none does.

    Firestore serves equality-only queries (merging single-field indexes) and a single
    range/order field without equalities from its automatic single-field indexes; anything
    else needs a composite index: the equality fields first (any order), then the ordered
    fields in order and direction.
    """
    for index in indexes:
        if index.collection != shape.collection:
            continue
        head = index.fields[: len(shape.equality)]
        tail = index.fields[len(shape.equality) :]
        if {f.path for f in head} == set(shape.equality) and tail == shape.ordered:
            return index
    return None


def needs_composite_index(shape: QueryShape) -> bool:
    """False when Firestore's automatic single-field indexes serve `shape`."""
    return (bool(shape.ordered) and bool(shape.equality)) or len(shape.ordered) > 1


def is_served(shape: QueryShape, indexes: tuple[CompositeIndex, ...] = INDEXES) -> bool:
    return not needs_composite_index(shape) or serving_index(shape, indexes) is not None


@dataclass(frozen=True)
class IndexExemption:
    """A field whose automatic single-field indexing is switched off: it is never queried,
    and indexing large maps and arrays would only cost index entries and write latency."""

    collection: str
    field: str


INDEX_EXEMPTIONS: tuple[IndexExemption, ...] = (
    IndexExemption(JOBS, "params"),
    IndexExemption(JOBS, "history"),
    IndexExemption(JOBS, "result"),
    IndexExemption(JOBS, "last_error"),
    IndexExemption(JOBS, "cancel_requested"),
    IndexExemption(IDEMPOTENCY, "details"),
)


@dataclass(frozen=True)
class TtlField:
    """A TTL policy: Firestore deletes documents of `collection` some time after `field`."""

    collection: str
    field: str


EXPIRE_AT = "expire_at"

TTL_FIELDS: tuple[TtlField, ...] = (
    TtlField(JOBS, EXPIRE_AT),
    TtlField(IDEMPOTENCY, EXPIRE_AT),
    TtlField(SCAN_RUNS, EXPIRE_AT),
    TtlField(REJECTED, EXPIRE_AT),
)
