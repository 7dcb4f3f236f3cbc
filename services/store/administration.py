"""Administration: the operator's side of the store, what they read and what they change.

Reads of jobs (`get`, `list_jobs`, `stats`, `newer_records`, `backlog`, `shard_census`); the
control document, read and changed (`get_control`, `update_control`, plus the scan's
`record_housekeeping` mark and `adopt_shard_layout`); and the operator's two changes of a job,
`cancel` and `reschedule`. Five of these write: `cancel`, `reschedule` and `update_control` in
a transaction, `adopt_shard_layout` in a transaction, `record_housekeeping` as one unconditional
merge.
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import UTC, datetime, timedelta
from typing import Any

from services.jobs.control import HOUSEKEEPING_FIELD, Control, HousekeepingMark
from services.jobs.errors import InvalidRecord, ValidationError
from services.jobs.lanes import PAUSES_FIELD, merged_pauses, pauses_from_document
from services.jobs.layout import LAYOUT_FIELD, ShardCensus, ShardLayout
from services.jobs.record import SCHEMA_VERSION, Job
from services.jobs.results import Backlog, NewerRecords, Page, Stats
from services.jobs.shard import Part, fan_out
from services.jobs.state import State
from services.store.documents import (
    Documents,
    decoded,
    require_aware,
    require_due_in_horizon,
    require_short,
    require_text,
)
from services.store.merge import merged
from services.store.queries import (
    all_jobs_query,
    decode_cursor,
    due_query,
    encode_cursor,
    enqueued_query,
    expired_claims_query,
    expired_leases_query,
    in_range_query,
    list_query,
    live_query,
    newer_schema_query,
    out_of_range_query,
    pending_action_query,
    state_query,
)
from services.store.transactions import Transaction, store_errors

_MAX_LIST_LIMIT = 500


class Administration:
    """The operator's reads, the control document, cancel and reschedule."""

    def __init__(self, docs: Documents) -> None:
        self._docs = docs

    def cancel(self, job_id: str, reason: str, by: str) -> Job:
        """Cancel a job. Deferred, claimed or enqueued → cancelled. Running → records
        cancel_requested (the worker honours it; state stays running). Terminal →
        AlreadyTerminal, unchanged. Missing → JobNotFound. A reason over MAX_REASON_BYTES
        → ValidationError."""
        require_text(reason=reason, by=by)
        require_short(reason=reason, by=by)

        def change(job: Job, now: datetime) -> Job:
            return self._docs.rules.cancel(job, reason, by, now)

        return self._docs.transition(job_id, change)

    def reschedule(self, job_id: str, due_at: datetime, reason: str, by: str) -> Job:
        """Move a deferred job's due_at (and so its claim time). Any other state →
        InvalidTransition. A failed job is re-scheduled as a new job ID instead."""
        require_text(reason=reason, by=by)
        require_short(reason=reason, by=by)
        new_due = require_aware(due_at, "due_at")
        require_due_in_horizon(new_due, self._docs.clock.now())

        def change(job: Job, now: datetime) -> Job:
            return self._docs.rules.reschedule(job, new_due, reason, by, now)

        return self._docs.transition(job_id, change)

    def get(self, job_id: str) -> Job | None:
        """The job, or None. One read. InvalidRecord when the document cannot be decoded
        (quarantined as it was found; the Firestore console shows it as stored)."""
        with store_errors():
            snapshot = self._docs.gateway.get(self._docs.jobs.document(job_id))
        return decoded(snapshot) if snapshot.exists else None

    def list_jobs(
        self,
        *,
        state: State | None = None,
        due_before: datetime | None = None,
        overdue_at: datetime | None = None,
        claimed_before: datetime | None = None,
        limit: int = 50,
        cursor: str | None = None,
    ) -> Page:
        """One page of jobs in time order (due_at, or claim time with `claimed_before`).

        Pass the returned `next_cursor` back for the next page. Filters: see `list_query`.
        """
        if not 1 <= limit <= _MAX_LIST_LIMIT:
            raise ValidationError(f"limit must be from 1 to {_MAX_LIST_LIMIT}")
        for name, value in (
            ("due_before", due_before),
            ("overdue_at", overdue_at),
            ("claimed_before", claimed_before),
        ):
            if value is not None:
                require_aware(value, name)
        after = decode_cursor(cursor) if cursor else None
        order_field = "claim.claimed_at" if claimed_before else "due_at"

        def page(shard: Part) -> list[Any]:
            spec = list_query(
                state=state,
                due_before=due_before,
                overdue_at=overdue_at,
                claimed_before=claimed_before,
                limit=limit + 1,  # one more tells whether another page exists
                after=after,
                shard=shard,
            )
            return list(self._docs.stream(spec))

        with store_errors():
            # With N > 1 each shard's page is in (order field, ID) order from the same cursor:
            # their merge is the global order, and its first limit + 1 the global page.
            snapshots = merged(fan_out(self._docs.read_parts, page), order_field, limit + 1)
        more = len(snapshots) > limit
        snapshots = snapshots[:limit]
        jobs: list[Job] = []
        invalid: list[str] = []
        for snapshot in snapshots:
            try:
                jobs.append(decoded(snapshot))
            except InvalidRecord:
                invalid.append(snapshot.id)  # listed by ID; a scan moves it aside
        next_cursor = None
        if more:
            last = snapshots[-1]
            next_cursor = encode_cursor(last.get(order_field), last.id)
        return Page(tuple(jobs), next_cursor, tuple(invalid))

    def stats(self, now: datetime, claim_timeout: timedelta, *, shard_census: bool = True) -> Stats:
        """Backlog figures from count aggregations and one limit-1 query; never reads every
        document. Every figure is read at one snapshot: the first count's server read time,
        passed to the others (https://cloud.google.com/firestore/docs/reference/rpc/google.
        firestore.v1#runaggregationqueryrequest), so a job moving between states mid-way is
        counted once, in one state. With JOBS_SHARDS > 1 and `shard_census`, the exact census
        of non-terminal records out of the shard queries' reach (services/jobs/layout.py)."""
        with store_errors():
            deferred, read_time = self._docs.count_at(state_query(State.DEFERRED))
            per_state = {State.DEFERRED: deferred}
            per_state |= {
                state: self._docs.count(state_query(state), read_time=read_time)
                for state in State
                if state is not State.DEFERRED
            }

            def figures(shard: Part) -> tuple[list[Any], int, int, int]:
                return (
                    list(self._docs.stream(due_query(now, 1, shard), read_time=read_time)),
                    self._docs.count(due_query(now, None, shard), read_time=read_time),
                    self._docs.count(
                        expired_claims_query(now - claim_timeout, None, shard), read_time=read_time
                    ),
                    self._docs.count(expired_leases_query(now, None, shard), read_time=read_time),
                )

            # With N > 1, one set of queries per shard at the same read time: counts add up,
            # the oldest is the oldest of the shards' oldest.
            parts = fan_out(self._docs.read_parts, figures)
            # The exact shard census at the same read time: the live total is the sum of the
            # per-state counts just made, so it costs the out-of-range count (1 read when
            # there are none) and the in-range count (1 read per 1,000 live records).
            live = sum(n for state, n in per_state.items() if not state.terminal)
            wanted = shard_census and self._docs.shards > 1
            census = self._census(live, read_time) if wanted else None
        oldest = merged([p[0] for p in parts], "due_at", 1)
        due_count = sum(p[1] for p in parts)
        stuck = sum(p[2] for p in parts)
        expired = sum(p[3] for p in parts)
        return Stats(
            oldest_overdue_age_s=_age(now, oldest, "due_at"),
            due_count=due_count,
            stuck_claims=stuck,
            expired_leases=expired,
            per_state={state: per_state[state] for state in State},
            read_time=read_time,
            shard_census=census,
        )

    def shard_census(self, *, exact: bool) -> ShardCensus:
        """Non-terminal records the shard queries miss (services/jobs/layout.py). Always the
        out-of-range count: one count aggregation over the (state, shard, due_at) index, 1 read
        when there are none. With `exact`, also every record outside 0..N-1 (missing or
        non-numeric shards too): the live count minus the in-range count, at one read time;
        each bills a read per 1,000 non-terminal records. At N = 1 nothing is missed: no query
        and no read."""
        shards = self._docs.shards
        if shards == 1:
            return ShardCensus(1, 0, 0 if exact else None)
        with store_errors():
            if not exact:
                return ShardCensus(shards, self._docs.count(out_of_range_query(shards)))
            live, read_time = self._docs.count_at(live_query())
            return self._census(live, read_time)

    def _census(self, live: int, read_time: Any) -> ShardCensus:
        shards = self._docs.shards
        out_of_range = self._docs.count(out_of_range_query(shards), read_time=read_time)
        in_range = self._docs.count(in_range_query(shards), read_time=read_time)
        return ShardCensus(shards, out_of_range, max(live - in_range, 0))

    def adopt_shard_layout(self, layout: ShardLayout) -> ShardLayout:
        """Record `layout` in the control document unless one is there already (a backfill's,
        written meanwhile, wins); the layout stored afterwards. One transaction: 1 read, and 1
        write when it records."""
        ref = self._docs.control_ref

        def body(transaction: Transaction) -> ShardLayout:
            snapshot = self._docs.get_in(transaction, ref)
            stored = ShardLayout.from_document((snapshot.to_dict() or {}).get(LAYOUT_FIELD))
            if stored is not None:
                return stored
            # A merge of the one map: the operator's settings and the housekeeping mark stay.
            transaction.merge(ref, {LAYOUT_FIELD: layout.to_document()})
            return layout

        return self._docs.tx.run(body)

    def pending_by_action(self, actions: Sequence[str]) -> dict[str, int]:
        """How many non-terminal jobs (deferred, claimed, enqueued, running) each of `actions`
        has: one count aggregation per action, all at the first one's read time (1 read per
        action, plus 1 per 1,000 of its pending jobs)."""
        counts: dict[str, int] = {}
        read_time: Any = None
        with store_errors():
            for action in dict.fromkeys(actions):
                query = pending_action_query(action)
                if read_time is None:
                    counts[action], read_time = self._docs.count_at(query)
                else:
                    counts[action] = self._docs.count(query, read_time=read_time)
        return counts

    def newer_records(self, stats: Stats) -> NewerRecords:
        """The records a newer version wrote, counted at `stats`'s read time (2 count
        aggregations): those with a schema_version above this code's, and those whose state
        none of `stats.per_state` counted (every document less the known states' sum)."""
        with store_errors():
            newer = self._docs.count(newer_schema_query(SCHEMA_VERSION), read_time=stats.read_time)
            total = self._docs.count(all_jobs_query(), read_time=stats.read_time)
        return NewerRecords(
            newer_schema=newer, unknown_state=max(total - sum(stats.per_state.values()), 0)
        )

    def backlog(
        self, now: datetime, claim_timeout: timedelta, enqueued_timeout: timedelta
    ) -> Backlog:
        """What the scan measures every run: 3 count aggregations and 2 limit-1 queries (per
        shard with JOBS_SHARDS > 1).

        `stale_enqueued` counts jobs enqueued (published) before now - enqueued_timeout: their
        message may be gone (dead letter expired, subscription recreated), so nothing else
        would ever move them. Terminal states are never counted, so the cost stays flat as
        retention grows; `stats` (every state) is for the operator.
        """
        if claim_timeout <= timedelta(0) or enqueued_timeout <= timedelta(0):
            raise ValidationError("claim_timeout and enqueued_timeout must be positive")

        def figures(shard: Part) -> tuple[list[Any], list[Any], int, int, int]:
            return (
                list(self._docs.stream(due_query(now, 1, shard))),
                list(self._docs.stream(enqueued_query(None, 1, shard))),
                self._docs.count(due_query(now, None, shard)),
                self._docs.count(expired_claims_query(now - claim_timeout, None, shard)),
                self._docs.count(enqueued_query(now - enqueued_timeout, None, shard)),
            )

        with store_errors():
            # One set per shard with N > 1: 5 queries each, counts summed, oldest of oldest.
            parts = fan_out(self._docs.read_parts, figures)
        oldest_due = merged([p[0] for p in parts], "due_at", 1)
        oldest_enqueued = merged([p[1] for p in parts], "enqueued_at", 1)
        due_count = sum(p[2] for p in parts)
        stuck = sum(p[3] for p in parts)
        stale = sum(p[4] for p in parts)
        return Backlog(
            oldest_overdue_age_s=_age(now, oldest_due, "due_at"),
            due_count=due_count,
            stuck_claims=stuck,
            stale_enqueued=stale,
            oldest_enqueued_age_s=_age(now, oldest_enqueued, "enqueued_at"),
        )

    def get_control(self) -> Control:
        """The operator's control settings; defaults when the document does not exist.

        A scan run's first read: with a `max_clock_skew`, its read_time is this run's check of
        the clock against Firestore's (ClockSkewed when further: the run claims and reclaims
        nothing on that clock)."""
        before = self._docs.clock.now()
        with store_errors():
            snapshot = self._docs.gateway.get(self._docs.control_ref)
        after = self._docs.clock.now()
        self._docs.check_clock(before, snapshot.read_time, after, "claims and reclaims")
        return Control.from_document(snapshot.to_dict() if snapshot.exists else None)

    def has_control_document(self) -> bool:
        """Whether the control document exists: the scan's first run writes it (its
        housekeeping mark), as does any operator change; a project without it has never had
        a scan run, or is not the project meant (`jobsctl stats` warns)."""
        with store_errors():
            return bool(self._docs.gateway.get(self._docs.control_ref).exists)

    def update_control(self, by: str, reason: str, **changes: Any) -> Control:
        """Change control settings (paused, claim_budget, catch_up_rate, claim_timeout),
        validated and audited with who and why; ValidationError writes nothing."""
        Control().changed(by=by, reason=reason, at=self._docs.clock.now(), **dict(changes))
        ref = self._docs.control_ref

        def body(transaction: Transaction) -> Control:
            snapshot = self._docs.get_in(transaction, ref)
            current = Control.from_document(snapshot.to_dict() if snapshot.exists else None)
            updated = current.changed(
                by=by, reason=reason, at=self._docs.clock.now(), **dict(changes)
            )
            transaction.set(ref, updated.to_document())
            return updated

        return self._docs.tx.run(body)

    def record_housekeeping(self, mark: HousekeepingMark) -> None:
        """Store the scan's housekeeping mark in the control document: one write, replacing
        only that map (operator settings and their history are left as they are)."""
        with store_errors():
            # set(..., merge=[field]): no condition, so sending it twice writes the same.
            writes = self._docs.gateway.writes()
            writes.merge(self._docs.control_ref, {HOUSEKEEPING_FIELD: mark.to_document()})
            self._docs.gateway.commit(writes, idempotent=True)

    def record_action_pause(self, action: str, until: datetime) -> bool:
        """Pause the scan's claims of `action` until `until` (its dependency answered 429/503
        with Retry-After): kept in the control document's `action_pauses` map, which every
        scan run reads anyway. One transaction: 1 read, and 1 write only when the stored pause
        ends earlier (ended pauses are dropped from the map then); True when it wrote."""
        require_text(action=action)
        until = require_aware(until, "until")
        ref = self._docs.control_ref
        now = self._docs.clock.now()

        def body(transaction: Transaction) -> bool:
            snapshot = self._docs.get_in(transaction, ref)
            stored = pauses_from_document((snapshot.to_dict() or {}).get(PAUSES_FIELD))
            merged = merged_pauses(stored, action, until, now)
            if merged is None:
                return False
            # A merge of the one map: the operator's settings and the scan's marks stay.
            transaction.merge(ref, {PAUSES_FIELD: merged})
            return True

        return self._docs.tx.run(body)


def _age(now: datetime, snapshots: list[Any], field: str) -> float | None:
    """Seconds since `field` of the first snapshot (never negative), or None when empty."""
    if not snapshots:
        return None
    value = (snapshots[0].to_dict() or {}).get(field)
    if not isinstance(value, datetime):
        return None
    return max((now - value.astimezone(UTC)).total_seconds(), 0.0)
