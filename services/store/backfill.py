"""ShardBackfill: give every non-terminal job record the `shard` a deployment with N shards
queries it by, without ever overwriting a change made meanwhile.

With N > 1 every timestamp query has `shard == k`, so a deferred (claimed, enqueued, running)
record whose `shard` is missing (written before the field existed) or is not shard_of(id, N)
(written under another N) is never claimed, reclaimed or counted by its shard. The backfill
reads each non-terminal state's records in document-ID order (`state == S order by __name__`,
served by the single-field `state` index at every N), and writes `shard` on the ones that need
it, in BatchWrite requests of up to 500 writes (each applied or refused on its own). Each write
is conditioned on the update_time the record was read at
(https://cloud.google.com/firestore/docs/reference/rpc/google.firestore.v1#precondition): a
record changed since is refused, re-read and decided again, never clobbered. Only `shard`
changes; terminal records are left to their TTL.

A pass is resumable: `Position` (state, last job ID) says where it got to, and a pass from a
position skips what comes before it. Re-running a whole pass is safe as well: records already
right are only counted.

A pass with apply that reaches the end (from the start or resumed) records N as the shard
layout in the control document (services/jobs/layout.py, one write): the scan compares it with
its JOBS_SHARDS every run and reports a difference until then.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Any

from google.cloud import firestore

from services.jobs import schema
from services.jobs.clock import Clock, SystemClock
from services.jobs.errors import ValidationError
from services.jobs.layout import LAYOUT_FIELD, ShardLayout
from services.jobs.shard import require_shards, shard_of
from services.jobs.state import State
from services.store.bounds import CallBounds
from services.store.gateway import Gateway
from services.store.queries import NAME, QuerySpec
from services.store.transactions import store_errors

logger = logging.getLogger(__name__)

# The states whose records a sharded query must find; in the order the pass visits them.
NON_TERMINAL: tuple[State, ...] = (State.DEFERRED, State.CLAIMED, State.ENQUEUED, State.RUNNING)
MAX_BATCH = 500  # writes per BatchWrite request
# Re-reads of one record whose conditional write kept being refused (it keeps changing).
MAX_REREADS = 3


@dataclass(frozen=True)
class Position:
    """Where a pass got to: every record of the states before `state`, and of `state` with an
    ID up to `after`, was seen. As text: `state:job_id`."""

    state: State
    after: str

    def token(self) -> str:
        return f"{self.state.value}:{self.after}"

    @classmethod
    def parse(cls, token: str) -> Position:
        state_text, sep, after = token.partition(":")
        states = {s.value: s for s in NON_TERMINAL}
        if not sep or state_text not in states or not after:
            names = ", ".join(states)
            raise ValidationError(f"resume position {token!r} is not STATE:JOB_ID ({names})")
        return cls(states[state_text], after)


@dataclass
class BackfillCounts:
    """What a pass saw. `updated` counts writes applied (with apply) or needed (dry run)."""

    scanned: int = 0
    updated: int = 0
    already_right: int = 0
    changed_meanwhile: int = 0  # conditional writes refused, each record then re-read
    gone: int = 0  # re-read after a refusal: deleted, or terminal now (nothing to do)
    by_state: dict[str, int] = field(default_factory=dict)
    layout: ShardLayout | None = None  # recorded at the end of a pass with apply


Progress = Callable[[BackfillCounts, Position], None]


class ShardBackfill:
    """One pass of the shard backfill over a Firestore jobs collection."""

    def __init__(
        self,
        client: firestore.Client,
        shards: int,
        *,
        batch_size: int = MAX_BATCH,
        bounds: CallBounds | None = None,
        database: str | None = None,
        by: str = "jobsctl",
        clock: Clock | None = None,
    ) -> None:
        if not 1 <= batch_size <= MAX_BATCH:
            raise ValidationError(f"batch size must be from 1 to {MAX_BATCH}, not {batch_size}")
        self._client = client
        self._shards = require_shards(shards)
        self._batch_size = batch_size
        self._bounds = bounds or CallBounds()
        # Every RPC through the public GAPIC client; `client` builds references only.
        self._gateway = Gateway(client, database, self._bounds)
        self._rereads: dict[str, int] = {}  # per record of the current pass
        self._by = by
        self._clock = clock or SystemClock()

    def total(self) -> int:
        """How many non-terminal records a pass reads (count aggregations: one read per 1,000
        index entries)."""
        with store_errors():
            return sum(self._count(state) for state in NON_TERMINAL)

    def run(
        self,
        *,
        apply: bool,
        resume: Position | None = None,
        progress: Progress | None = None,
    ) -> BackfillCounts:
        """One pass from `resume` (or the start): count every non-terminal record, and with
        `apply` write the shard on those that need it. `progress(counts, position)` after each
        batch (the position resumes after it)."""
        counts = BackfillCounts()
        self._rereads = {}
        states = list(NON_TERMINAL)
        if resume is not None:
            states = states[states.index(resume.state) :]
        for state in states:
            after = resume.after if resume is not None and state is resume.state else None
            for page in self._pages(state, after):
                self._handle(page, apply, counts)
                counts.by_state[state.value] = counts.by_state.get(state.value, 0) + len(page)
                if progress is not None:
                    progress(counts, Position(state, page[-1].id))
        if apply:
            counts.layout = self._record_layout()
        return counts

    def _record_layout(self) -> ShardLayout:
        """N as the records' shard layout, in the control document (a merge of that one map:
        the operator's settings and the scan's housekeeping mark stay). Unconditional: a pass
        that reached the end is the authority on the layout."""
        layout = ShardLayout(self._shards, self._clock.now(), self._by, "backfill")
        control = self._client.collection(schema.CONTROL).document(schema.CONTROL_DOCUMENT)
        writes = self._gateway.writes()
        writes.merge(control, {LAYOUT_FIELD: layout.to_document()})
        with store_errors():
            self._gateway.commit(writes, idempotent=True)
        logger.info(
            "recorded the shard layout: %s shard(s)",
            self._shards,
            extra={"fields": {"reason": "shard_layout_backfilled", "shards": self._shards}},
        )
        return layout

    def wanted(self, job_id: str) -> int:
        return shard_of(job_id, self._shards)

    # -- one batch ---------------------------------------------------------------------------

    def _handle(self, page: list[Any], apply: bool, counts: BackfillCounts) -> None:
        counts.scanned += len(page)
        stale = [s for s in page if not self._is_right(s)]
        counts.already_right += len(page) - len(stale)
        if not apply:
            counts.updated += len(stale)
            return
        while stale:
            refused = self._write(stale)
            counts.updated += len(stale) - len(refused)
            counts.changed_meanwhile += len(refused)
            stale = self._reread(refused, counts)

    def _reread(self, refused: list[Any], counts: BackfillCounts) -> list[Any]:
        """The refused records as they are now: those still needing the shard, to write
        again; the others counted as already right or gone."""
        if not refused:
            return []
        again = []
        with store_errors():
            fresh = self._gateway.get_all([s.reference for s in refused])
            for snapshot in fresh:
                tries = self._rereads.get(snapshot.id, 0) + 1
                self._rereads[snapshot.id] = tries
                state = (snapshot.to_dict() or {}).get("state") if snapshot.exists else None
                if state not in {s.value for s in NON_TERMINAL}:
                    counts.gone += 1
                elif self._is_right(snapshot):
                    counts.already_right += 1
                elif tries > MAX_REREADS:
                    raise ValidationError(
                        f"job {snapshot.id} changed {tries} times while being backfilled; "
                        "run the backfill again"
                    )
                else:
                    again.append(snapshot)
        return again

    def _write(self, snapshots: list[Any]) -> list[Any]:
        """Write the wanted shard on each, conditioned on its update_time; the refused ones."""
        batch = self._gateway.writes()
        for snapshot in snapshots:
            batch.update(
                snapshot.reference, {schema.SHARD: self.wanted(snapshot.id)}, snapshot.update_time
            )
        with store_errors():
            response = self._gateway.batch_write(batch)
        refused = []
        for snapshot, status in zip(snapshots, response.status, strict=True):
            if status.code != 0:
                refused.append(snapshot)
        return refused

    def _is_right(self, snapshot: Any) -> bool:
        value = (snapshot.to_dict() or {}).get(schema.SHARD)
        return type(value) is int and value == self.wanted(snapshot.id)

    # -- reading -----------------------------------------------------------------------------

    def _pages(self, state: State, after: str | None) -> Iterator[list[Any]]:
        while True:
            spec = self._state_query(state, self._batch_size, after)
            with store_errors():
                page = list(self._gateway.stream(spec))
            if not page:
                return
            yield page
            if len(page) < self._batch_size:
                return
            after = page[-1].id

    def _state_query(self, state: State, limit: int, after: str | None) -> QuerySpec:
        # Equality only, in document-ID order: the single-field `state` index serves it at
        # every N (schema.COMMON_SHAPES), so the backfill runs before and after raising N.
        return QuerySpec(
            schema.JOBS,
            equals=(("state", state.value),),
            order_by=(NAME,),
            limit=limit,
            start_after=None if after is None else (after,),
        )

    def _count(self, state: State) -> int:
        count, _ = self._gateway.count(QuerySpec(schema.JOBS, equals=(("state", state.value),)))
        return count
