"""The Firestore layout every component agrees on: collection names, composite indexes, TTL fields.

This module is the one source of truth: the store runs its queries against these collections,
and the Pulumi program (`infra/`) creates exactly these indexes, TTL policies and index
exemptions. Which queries run, and so which indexes exist, depends on the shard count N
(`JOBS_SHARDS`, Pulumi key `shards`): `query_shapes(N)`, `composite_indexes(N)`,
`exemptions(N)`. Tests prove, for N = 1 and N > 1, each query the store runs is served by an
index declared here, and that a field is indexed only if a declared query needs it.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

from services.jobs.shard import require_shards

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


SHARD = "shard"
# The HTTP target an http.request job names (services/jobs/lanes.py: a target's claim lane).
TARGET = "params.target"

# `state == X and <field> <= T order by <field>`: equality field first, then the range field.
# Each serves the store's queries named beside it with JOBS_SHARDS = 1 (tests/unit/jobs/
# test_indexes.py proves it). Each ends in a timestamp that grows with time, so each is one hot
# key range capping the collection near 500 writes/s
# (https://cloud.google.com/firestore/docs/best-practices, "High read, write, and delete
# rates"): they exist only while N = 1.
UNSHARDED_INDEXES: tuple[CompositeIndex, ...] = (
    # claim_due, stats (due count, oldest overdue), list(state=…, due_before/overdue_at=…)
    CompositeIndex(JOBS, (IndexField("state"), IndexField("due_at"))),
    # reclaim_expired (stuck claims), stats (stuck_claims), list(claimed_before=…)
    CompositeIndex(JOBS, (IndexField("state"), IndexField("claim.claimed_at"))),
    # reclaim_expired (expired leases), stats (expired_leases)
    CompositeIndex(JOBS, (IndexField("state"), IndexField("lease_until"))),
    # backlog (stale_enqueued, oldest enqueued age), reclaim_expired (lost messages)
    CompositeIndex(JOBS, (IndexField("state"), IndexField("enqueued_at"))),
    # claim_due of one action's lane (services/jobs/lanes.py): `action == A`, in due order
    CompositeIndex(JOBS, (IndexField("state"), IndexField("action"), IndexField("due_at"))),
    # claim_due of the rest lane: `action not-in [...]`, a second inequality, which Firestore
    # orders after the explicit due_at order (the query names both)
    CompositeIndex(JOBS, (IndexField("state"), IndexField("due_at"), IndexField("action"))),
    # claim_due of one target's lane: `action == A and params.target == T`, in due order
    CompositeIndex(
        JOBS, (IndexField("state"), IndexField("action"), IndexField(TARGET), IndexField("due_at"))
    ),
    # claim_due of an action's jobs but its laned targets': `params.target not-in [...]`,
    # ordered after due_at like the rest lane's `action`
    CompositeIndex(
        JOBS, (IndexField("state"), IndexField("action"), IndexField("due_at"), IndexField(TARGET))
    ),
)

# The same queries with JOBS_SHARDS > 1, one per shard (`... and shard == k`). Firestore takes
# a composite index's equality fields in any order before the range field
# (https://cloud.google.com/firestore/docs/query-data/index-overview), so `shard, state, …`
# would serve them as well. Either way each growing timestamp sits under N `shard` prefixes: N
# key ranges instead of one hot spot
# (https://cloud.google.com/firestore/docs/best-practices#high_read_write_and_delete_rates);
# `state` first keeps every index led by the state it serves.
#
# These exist at every N, N = 1 included (where every record has shard 0, so they carry the
# same load as the unsharded ones): raising N then switches the services to indexes that are
# already built, and the unsharded ones are dropped only after, in the same `pulumi up`
# (Pulumi's engine issues the deletes of resources the program no longer registers once the
# program has run, https://www.pulumi.com/docs/reference/how/). Building them
# only when N changes would leave the new queries without an index for the minutes an index
# build takes.
SHARDED_INDEXES: tuple[CompositeIndex, ...] = (
    CompositeIndex(JOBS, (IndexField("state"), IndexField(SHARD), IndexField("due_at"))),
    CompositeIndex(JOBS, (IndexField("state"), IndexField(SHARD), IndexField("claim.claimed_at"))),
    CompositeIndex(JOBS, (IndexField("state"), IndexField(SHARD), IndexField("lease_until"))),
    CompositeIndex(JOBS, (IndexField("state"), IndexField(SHARD), IndexField("enqueued_at"))),
    # The claim lanes per shard: one action's (and its `shard in [...]` probe), and the rest.
    CompositeIndex(
        JOBS,
        (IndexField("state"), IndexField(SHARD), IndexField("action"), IndexField("due_at")),
    ),
    CompositeIndex(
        JOBS,
        (IndexField("state"), IndexField(SHARD), IndexField("due_at"), IndexField("action")),
    ),
    # The target lanes per shard: one target's (and its `shard in [...]` probe), and an
    # action's jobs but its laned targets'.
    CompositeIndex(
        JOBS,
        (
            IndexField("state"),
            IndexField(SHARD),
            IndexField("action"),
            IndexField(TARGET),
            IndexField("due_at"),
        ),
    ),
    CompositeIndex(
        JOBS,
        (
            IndexField("state"),
            IndexField(SHARD),
            IndexField("action"),
            IndexField("due_at"),
            IndexField(TARGET),
        ),
    ),
    # list() and list(due_before=…) over every state: with N = 1 the single-field `due_at`
    # index serves them; with N > 1 that index is switched off (an exemption) and this one
    # serves each shard's page.
    CompositeIndex(JOBS, (IndexField(SHARD), IndexField("due_at"))),
)


def composite_indexes(shards: int) -> tuple[CompositeIndex, ...]:
    """The composite indexes a deployment with `shards` shards declares: both sets at N = 1
    (the unsharded queries use the first, the second waits for N > 1), the sharded ones only
    above."""
    if require_shards(shards) == 1:
        return UNSHARDED_INDEXES + SHARDED_INDEXES
    return SHARDED_INDEXES


INDEXES: tuple[CompositeIndex, ...] = composite_indexes(1)


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


def is_served(
    shape: QueryShape,
    indexes: tuple[CompositeIndex, ...] | None = None,
    exemptions: tuple[IndexExemption, ...] | None = None,
) -> bool:
    """Whether Firestore serves `shape`: by a declared composite index, or by automatic
    single-field indexes that no exemption switched off (an exempted map field takes every
    field inside it along)."""
    if needs_composite_index(shape):
        return serving_index(shape, INDEXES if indexes is None else indexes) is not None
    exempt = {
        (e.collection, e.field) for e in (INDEX_EXEMPTIONS if exemptions is None else exemptions)
    }
    return all(
        (shape.collection, path.split(".")[0]) not in exempt for path in single_field_needs(shape)
    )


# The jobs queries that order or range on a timestamp, as JOBS_SHARDS = 1 runs them. With
# N > 1 each runs once per shard instead, with `shard == k` added (`sharded`).
TIMESTAMP_SHAPES: tuple[QueryShape, ...] = (
    # claim_due, stats, backlog, list(overdue_at=…), list(state=…), the due_at type check
    QueryShape(JOBS, frozenset({"state"}), (IndexField("due_at"),)),
    # reclaim_expired (stuck claims), stats, backlog, list(claimed_before=…)
    QueryShape(JOBS, frozenset({"state"}), (IndexField("claim.claimed_at"),)),
    # reclaim_expired (expired leases), stats
    QueryShape(JOBS, frozenset({"state"}), (IndexField("lease_until"),)),
    # backlog (stale enqueued, oldest enqueued age), reclaim_expired (lost messages)
    QueryShape(JOBS, frozenset({"state"}), (IndexField("enqueued_at"),)),
    # list() and list(due_before=…): every state, in due order
    QueryShape(JOBS, frozenset(), (IndexField("due_at"),)),
    # claim_due and anything_due of one action's claim lane (`action == A`)
    QueryShape(JOBS, frozenset({"state", "action"}), (IndexField("due_at"),)),
    # claim_due of the rest lane (`action not-in [...]`): due_at, then action
    QueryShape(JOBS, frozenset({"state"}), (IndexField("due_at"), IndexField("action"))),
    # claim_due and anything_due of one target's lane (`action == A and params.target == T`)
    QueryShape(JOBS, frozenset({"state", "action", TARGET}), (IndexField("due_at"),)),
    # claim_due of an action's jobs but its laned targets' (`params.target not-in [...]`)
    QueryShape(JOBS, frozenset({"state", "action"}), (IndexField("due_at"), IndexField(TARGET))),
)

# The queries whatever N is: none orders or ranges on a value growing with time in a
# collection written per job.
COMMON_SHAPES: tuple[QueryShape, ...] = (
    # stats: the count of each state; jobsctl backfill-shards: each state's records by ID; the
    # shard census: every non-terminal record (`state in [...]`)
    QueryShape(JOBS, frozenset({"state"}), ()),
    # jobsctl actions: each action's non-terminal records (`action ==`, `state in [...]`)
    QueryShape(JOBS, frozenset({"action", "state"}), ()),
    # stats: every record, and those with a schema_version above this code's (newer records)
    QueryShape(JOBS, frozenset(), ()),
    QueryShape(JOBS, frozenset(), (IndexField("schema_version"),)),
    # jobsctl runs: the latest scan runs
    QueryShape(SCAN_RUNS, frozenset(), (IndexField("started_at", "DESCENDING"),)),
    # jobsctl rejections: the newest rejected deliveries
    QueryShape(REJECTED, frozenset(), (IndexField("received_at", "DESCENDING"),)),
)


# The shard census with N > 1 (services/jobs/layout.py): non-terminal records by `shard` range
# (>= N, and 0..N-1), ordered by shard then due_at, so the (state, shard, due_at) index of
# SHARDED_INDEXES serves it; no index of its own. Its range is on `shard`, not a timestamp.
CENSUS_SHAPES: tuple[QueryShape, ...] = (
    QueryShape(JOBS, frozenset({"state"}), (IndexField(SHARD), IndexField("due_at"))),
)


def sharded(shape: QueryShape) -> QueryShape:
    """`shape` with `shard == k` added: the per-shard form of a timestamp query."""
    return QueryShape(shape.collection, shape.equality | {SHARD}, shape.ordered)


def query_shapes(shards: int) -> tuple[QueryShape, ...]:
    """Every query shape the services and jobsctl run with `shards` shards. The store builds
    its jobs queries from these (tests/infra/test_database.py proves each store query's shape
    is one of them); ScanRunLog.recent and RejectionStore.recent are the two others."""
    if require_shards(shards) == 1:
        return TIMESTAMP_SHAPES + COMMON_SHAPES
    return tuple(sharded(shape) for shape in TIMESTAMP_SHAPES) + COMMON_SHAPES + CENSUS_SHAPES


QUERY_SHAPES: tuple[QueryShape, ...] = query_shapes(1)

# The top-level fields of the documents in the collections written once or more per job
# (tests/infra/test_database.py proves the model writes no other). Firestore indexes every
# field automatically, and an indexed value that grows with time (every timestamp here) caps
# a collection near 500 writes/s (https://cloud.google.com/firestore/docs/best-practices,
# "Index exemptions"). scan_runs (one write per scan run) and control (one document) are far
# below that and keep the defaults.
DOCUMENT_FIELDS: dict[str, tuple[str, ...]] = {
    JOBS: (
        "schema_version",
        "action",
        "subject",
        "params",
        "due_at",
        "scheduled_due_at",
        "state",
        "attempt",
        "max_attempts",
        "idempotency_key",
        "claim",
        "enqueued_at",
        "message_id",
        "lease_until",
        "lease_owner",
        "lease_token",
        "ended_lease_token",
        "producer",
        "progress",
        "cancel_requested",
        "result",
        "last_error",
        "history",
        "created_at",
        "updated_at",
        "expire_at",
        "shard",
    ),
    IDEMPOTENCY: (
        "job_id",
        "action",
        "subject",
        "outcome",
        "details",
        "completed_at",
        "expire_at",
    ),
    REJECTED: (
        "reason",
        "detail",
        "payload",
        "payload_encoding",
        "payload_bytes",
        "truncated",
        "headers",
        "received_at",
        "expire_at",
        "job_id",
        "message_id",
    ),
}


def single_field_needs(shape: QueryShape) -> frozenset[str]:
    """The field paths whose automatic single-field indexes `shape` is served by.

    A shape that needs a composite index is served by it alone (composite indexes do not use
    single-field ones); otherwise Firestore merges the single-field indexes of the equality
    fields, or uses the one of the single ordered field.
    """
    if needs_composite_index(shape):
        return frozenset()
    return frozenset(shape.equality) | {f.path for f in shape.ordered}


def indexed_fields(shapes: tuple[QueryShape, ...] = QUERY_SHAPES) -> frozenset[tuple[str, str]]:
    """(collection, top-level field) pairs some query needs a single-field index on."""
    return frozenset(
        (shape.collection, path.split(".")[0])
        for shape in shapes
        for path in single_field_needs(shape)
    )


@dataclass(frozen=True)
class IndexExemption:
    """A field whose automatic single-field indexing is switched off (for a map, with every
    field inside it): no query needs it, and each index entry costs write latency, storage,
    and, for a value growing with time, write throughput."""

    collection: str
    field: str


def index_exemptions(
    fields: dict[str, tuple[str, ...]] = DOCUMENT_FIELDS,
    shapes: tuple[QueryShape, ...] = QUERY_SHAPES,
) -> tuple[IndexExemption, ...]:
    """Every declared field that no query shape needs indexed, in declaration order."""
    needed = indexed_fields(shapes)
    return tuple(
        IndexExemption(collection, name)
        for collection, names in fields.items()
        for name in names
        if (collection, name) not in needed
    )


def exemptions(shards: int) -> tuple[IndexExemption, ...]:
    """The index exemptions of a deployment with `shards` shards. With N > 1 no query leans on
    the single-field `due_at` index any more, so it is exempt like every other timestamp here:
    no index of the jobs collection then ends in a growing value without a `shard` before it."""
    return index_exemptions(DOCUMENT_FIELDS, query_shapes(shards))


def index_definitions(
    shards: int | str = 1,
) -> tuple[tuple[CompositeIndex, ...], tuple[IndexExemption, ...]]:
    """(composite indexes, fields without single-field indexes) of a deployment with `shards`
    shards, as the Pulumi program leaves the database: the exemptions plus the TTL fields, which
    it exempts as well (infra/database.py). What the Firestore emulator's strict mode enforces
    (`services.jobs.schema?shards=4`; the plain module name loads N = 1)."""
    count = int(shards)
    declared = exemptions(count)
    ttl = tuple(
        IndexExemption(t.collection, t.field)
        for t in TTL_FIELDS
        if IndexExemption(t.collection, t.field) not in declared
    )
    return composite_indexes(count), declared + ttl


INDEX_EXEMPTIONS: tuple[IndexExemption, ...] = exemptions(1)


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
