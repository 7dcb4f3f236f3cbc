"""Reclaims: the maintenance side of the store, taking back abandoned work.

`reclaim_expired` moves expired claims, lapsed leases and (optionally) stale enqueued jobs
back to deferred (or to their end, by `Transitions.lapse_end`), one page per transaction,
falling back to one record at a time, and quarantines records no query can move.
"""

from __future__ import annotations

import dataclasses
import logging
import threading
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

from services.jobs.errors import (
    InvalidRecord,
    InvalidTransition,
    JobNotFound,
    JobsError,
    StoreRejected,
    StoreUnavailable,
    ValidationError,
)
from services.jobs.record import Job
from services.jobs.results import Reclaimed, ReclaimReport
from services.jobs.shard import Part, fan_out, spend_over_shards
from services.jobs.state import Role, State
from services.store.documents import (
    CLAIM_PAGE_SIZE,
    Documents,
    decoded,
    require_text,
    write_changes,
)
from services.store.queries import (
    QuerySpec,
    enqueued_query,
    expired_claims_query,
    expired_leases_query,
    misfiled_due_queries,
)
from services.store.transactions import Transaction, store_errors

logger = logging.getLogger(__name__)

# Deferred records per run the due_at type check inspects (each query bills >= 1 read).
MISFILED_CHECK_LIMIT = 20


class Reclaims:
    """Takes back abandoned work and quarantines what nothing else could move."""

    def __init__(self, docs: Documents) -> None:
        self._docs = docs

    def reclaim_expired(
        self,
        now: datetime,
        claim_timeout: timedelta,
        limit: int,
        run_id: str,
        *,
        enqueued_timeout: timedelta | None = None,
        unacked_since: datetime | None = None,
        quick: bool = False,
    ) -> ReclaimReport:
        """The reclaimer: take back abandoned work, at most `limit` jobs, each audited by
        `reclaimer:<run_id>`, and quarantine records nothing else could move.

        - Claimed with claim.claimed_at older than now - claim_timeout → deferred (same
          generation; the next claim bumps it).
        - Running whose lease_until < now (the worker crashed or stopped heartbeating): the
          rule of `Transitions.lapse_end`, the same `start` applies — cancelled when a cancel was
          requested, failed in the last attempt, else deferred with attempt + 1, due at once.
        - With `enqueued_timeout`: enqueued with enqueued_at older than now - it (no start
          since the publish or release: the message is lost) → deferred; the next claim
          publishes it under generation + 1, which fences the old message. With
          `unacked_since` too (the publish time of the subscription's oldest unacked
          message, as last sampled), only those enqueued before it as well: a job is marked
          enqueued after its publish is acknowledged, so one enqueued before every message
          still waiting has no message waiting, while a job enqueued later may still have
          its message in the backlog, however old (issue 24 finding 9).
        - Deferred jobs whose due_at is not a timestamp (no due query can see them) and any
          undecodable document met on the way are quarantined (`quarantined`).

        `quick` keeps only the claim and lease steps (1 read each when nothing is due back):
        the scan runs them on every run so a crashed claim or worker is back within its
        timeout plus one scan interval, and the rest with its spaced housekeeping.

        Each page is one transaction that queries and changes; a page that fails (a locked
        record, contention, an error) is retried one record at a time, and a record that
        still fails is `skipped` with its reason: one record never stops the rest. Results of
        committed pages are always returned; `stopped_by` says what ended a step early.
        """
        require_text(run_id=run_id)
        if claim_timeout <= timedelta(0):
            raise ValidationError("claim_timeout must be positive")
        if enqueued_timeout is not None and enqueued_timeout <= timedelta(0):
            raise ValidationError("enqueued_timeout must be positive")
        cutoff = now - claim_timeout
        steps: list[_ReclaimStep] = [
            _ReclaimStep(
                "claim_timeout",
                lambda n, shard: expired_claims_query(cutoff, n, shard),
                lambda j: (
                    j.state is State.CLAIMED and j.claim is not None and j.claim.claimed_at < cutoff
                ),
                self._docs.rules.reclaim_claim,
            ),
            _ReclaimStep(
                "lease_expired",
                lambda n, shard: expired_leases_query(now, n, shard),
                lambda j: j.state is State.RUNNING and not j.lease_live(now),
                self._docs.rules.reclaim_lease,
            ),
        ]
        if enqueued_timeout is not None and not quick:
            before = now - enqueued_timeout
            if unacked_since is not None:
                before = min(before, unacked_since)
            steps.append(
                _ReclaimStep(
                    "enqueued_timeout",
                    lambda n, shard: enqueued_query(before, n, shard),
                    lambda j: (
                        j.state is State.ENQUEUED
                        and j.enqueued_at is not None
                        and j.enqueued_at < before
                    ),
                    self._docs.rules.reclaim_enqueued,
                )
            )
        tally = _ReclaimTally(run_id)
        try:
            for step in steps:
                self._reclaim_step(step, limit, tally)
            if not quick:
                self._quarantine_misfiled_due(run_id, tally)
        except StoreUnavailable as exc:
            # Firestore itself is out of reach: nothing more can be done this run. With
            # nothing committed that is the caller's error; otherwise keep what was done.
            if not (tally.reclaimed or tally.quarantined):
                raise
            tally.stopped_by = exc
        report = tally.report()
        if report.reclaimed:
            logger.warning("reclaimed %d job(s) in run %s", len(report.reclaimed), run_id)
        return report

    def _reclaim_step(self, step: _ReclaimStep, limit: int, tally: _ReclaimTally) -> None:
        """One step up to `limit` reclaimed in all: the unsharded query with N = 1, else the
        budget left spent over the shards (each shard's query in its own time order)."""
        if self._docs.shards == 1:
            self._reclaim_shard(step, limit, tally, None)
            return

        def take(shard: Part, share: int) -> list[Reclaimed]:
            part = _ReclaimTally(tally.run_id)
            try:
                self._reclaim_shard(step, share, part, shard)
            finally:
                tally.absorb(part)  # committed changes are reported even when one shard fails
            return part.reclaimed

        spend_over_shards(limit - len(tally.reclaimed), self._docs.read_parts, take)

    def _reclaim_shard(
        self, step: _ReclaimStep, limit: int, tally: _ReclaimTally, shard: Part
    ) -> None:
        after: tuple[Any, ...] | None = None  # the next page starts after this record
        while len(tally.reclaimed) < limit:
            want = min(CLAIM_PAGE_SIZE, limit - len(tally.reclaimed))
            spec = dataclasses.replace(step.spec(want, shard), start_after=after)
            try:
                page, invalid, last = self._docs.tx.run(
                    self._reclaim_page, spec, step, tally.run_id
                )
            except StoreUnavailable:
                raise
            except JobsError as exc:
                logger.warning("reclaim page (%s) failed, going one by one: %s", step.name, exc)
                if not self._reclaim_each(spec, step, tally):
                    return
                continue
            tally.reclaimed.extend(page)
            moved = self._quarantine_all(invalid, tally)
            if len(page) + len(invalid) < want:
                return  # nothing more to take back
            if moved < len(invalid):
                # Records left as found (a newer version's, never quarantined) would fill the
                # same page again and hold up every job after them: go on after the last
                # record this page read; all before it were taken back or moved aside.
                after = last
            elif not (page or moved):
                return

    def _reclaim_page(
        self,
        transaction: Transaction,
        spec: QuerySpec,
        step: _ReclaimStep,
        run_id: str,
    ) -> tuple[list[Reclaimed], list[str], tuple[Any, ...] | None]:
        """The page's changes, the IDs it could not decode, and the cursor after the last
        record it read (its order field's value and ID)."""
        at = self._docs.clock.now()
        page = []
        invalid = []
        last: tuple[Any, ...] | None = None
        for snapshot in self._docs.stream(spec, transaction):
            last = (snapshot.get(spec.order_by[0]), snapshot.id)
            try:
                job = decoded(snapshot)
            except InvalidRecord:
                invalid.append(snapshot.id)
                continue
            new = step.change(job, at, run_id)
            write_changes(transaction, snapshot.reference, job, new)
            page.append(reclaimed(job, new, step.name))
        return page, invalid, last

    def _reclaim_each(self, spec: QuerySpec, step: _ReclaimStep, tally: _ReclaimTally) -> bool:
        """The page again, one transaction per record; False when the step should stop."""
        try:
            with store_errors():
                ids = [snapshot.id for snapshot in self._docs.stream(spec)]
        except StoreUnavailable:
            raise
        except JobsError as exc:
            tally.stopped_by = exc
            return False
        progressed = False
        for job_id in ids:
            ref = self._docs.jobs.document(job_id)

            def body(transaction: Transaction, ref: Any = ref) -> Reclaimed | None:
                job = self._docs.load(transaction, ref, ref.id)
                if not step.applies(job):
                    return None  # moved on meanwhile: nothing to do
                at = self._docs.clock.now()
                new = step.change(job, at, tally.run_id)
                write_changes(transaction, ref, job, new)
                return reclaimed(job, new, step.name)

            try:
                done = self._docs.tx.run(body)
            except InvalidRecord:
                self._quarantine_all([job_id], tally)
                progressed = True
                continue
            except (JobNotFound, InvalidTransition):
                continue
            except StoreUnavailable:
                raise
            except JobsError as exc:
                tally.skipped.append((job_id, f"{step.name}: {type(exc).__name__}: {exc}"))
                logger.warning(
                    "reclaim skipped job %s: %s",
                    job_id,
                    exc,
                    extra={"fields": {"job_id": job_id, "reason": f"reclaim_{step.name}"}},
                )
                continue
            if done is not None:
                tally.reclaimed.append(done)
                progressed = True
        # Stop the step when nothing moved: the records left are the skipped ones.
        return progressed and len(ids) == spec.limit

    def _quarantine_all(self, job_ids: Sequence[str], tally: _ReclaimTally) -> int:
        moved = [j for j in job_ids if self._docs.quarantine(j, Role.RECLAIMER, tally.run_id)]
        tally.quarantined.extend(moved)
        return len(moved)

    def _quarantine_misfiled_due(self, run_id: str, tally: _ReclaimTally) -> None:
        """The periodic check for a deferred job whose due_at is not a timestamp: Firestore
        range filters match only values of the operand's type and order types null < bool <
        number < timestamp < string (https://firebase.google.com/docs/firestore/manage-data/
        data-types#value_type_ordering), so no due query ever returns it. Two limit queries
        on the (state, due_at) index find the common mistakes: a null, boolean or number sorts
        before every timestamp, a string (an ISO date) after. 1 read each when none exist."""
        found = fan_out(self._docs.read_parts, lambda shard: self._misfiled_due(shard, tally))
        self._quarantine_all([job_id for part in found for job_id in part], tally)

    def _misfiled_due(self, shard: Part, tally: _ReclaimTally) -> list[str]:
        """The IDs of one shard's deferred jobs whose due_at is not a timestamp (all of them
        with shard None)."""
        misfiled: list[str] = []
        try:
            with store_errors():
                for spec in misfiled_due_queries(MISFILED_CHECK_LIMIT, shard):
                    # Look at the first record alone (1 read); only when it is misfiled is the
                    # page worth its reads: with many future jobs the first query would
                    # otherwise bill MISFILED_CHECK_LIMIT reads every run.
                    first = list(self._docs.stream(dataclasses.replace(spec, limit=1)))
                    if not first or isinstance(first[0].get("due_at"), datetime):
                        continue
                    for snapshot in self._docs.stream(spec):
                        if isinstance(snapshot.get("due_at"), datetime):
                            break  # timestamps from here on
                        misfiled.append(snapshot.id)
        except StoreRejected as exc:
            tally.stopped_by = tally.stopped_by or exc
        return misfiled


@dataclass(frozen=True)
class _ReclaimStep:
    """One kind of abandoned work: its query, the condition re-checked per record, the
    change, and the reason name logged and reported for it."""

    name: str
    spec: Callable[[int, Part], QuerySpec]  # (limit, shards or None for all)
    applies: Callable[[Job], bool]
    change: Callable[[Job, datetime, str], Job]


@dataclass
class _ReclaimTally:
    run_id: str
    reclaimed: list[Reclaimed] = dataclasses.field(default_factory=list)
    quarantined: list[str] = dataclasses.field(default_factory=list)
    skipped: list[tuple[str, str]] = dataclasses.field(default_factory=list)
    stopped_by: JobsError | None = None
    _lock: threading.Lock = dataclasses.field(default_factory=threading.Lock, repr=False)

    def absorb(self, part: _ReclaimTally) -> None:
        """Add what one shard's part did (called from the shards' threads)."""
        with self._lock:
            self.reclaimed.extend(part.reclaimed)
            self.quarantined.extend(part.quarantined)
            self.skipped.extend(part.skipped)
            self.stopped_by = self.stopped_by or part.stopped_by

    def report(self) -> ReclaimReport:
        return ReclaimReport(
            tuple(self.reclaimed), tuple(self.quarantined), tuple(self.skipped), self.stopped_by
        )


def reclaimed(job: Job, new: Job, reason: str) -> Reclaimed:
    """What the reclaimer reports for one record it moved (`reason` names the step)."""
    if new.state is State.CANCELLED:
        reason = "cancel_requested"
    return Reclaimed(job.job_id, job.state, new.state, job.generation, reason)
