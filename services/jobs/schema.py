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
INDEXES: tuple[CompositeIndex, ...] = (
    CompositeIndex(JOBS, (IndexField("state"), IndexField("due_at"))),
    CompositeIndex(JOBS, (IndexField("state"), IndexField("claim.claimed_at"))),
    CompositeIndex(JOBS, (IndexField("state"), IndexField("lease_until"))),
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
