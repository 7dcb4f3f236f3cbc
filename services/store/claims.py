"""Claims: the scan's side of the store, claiming due jobs and marking them enqueued.

`claim_due` claims a page of due jobs per transaction (per shard with JOBS_SHARDS > 1);
`mark_enqueued_many` records the publish, as one conditional write per job this store
claimed itself (`WrittenRecords`) and a read-and-write transaction for any other;
`mark_enqueue_failed` puts a claim whose publish failed back to deferred.
"""

from __future__ import annotations

import dataclasses
import logging
import random
import threading
from collections.abc import Callable, Mapping, Sequence
from datetime import datetime
from typing import Any

from services.jobs import schema
from services.jobs.errors import (
    InvalidRecord,
    JobNotFound,
    JobsError,
    LostRace,
    StoreRejected,
    StoreUnavailable,
    ValidationError,
)
from services.jobs.lanes import EVERYTHING, ClaimFilter
from services.jobs.limits import life_headroom_problem
from services.jobs.parts import ErrorInfo
from services.jobs.record import Job
from services.jobs.results import ClaimedJob, EnqueueMark
from services.jobs.shard import MAX_IN_VALUES, shard_groups, spend_over_shards
from services.jobs.state import Role
from services.store.decoding import decode_fields, update_time
from services.store.documents import (
    CLAIM_PAGE_SIZE,
    Documents,
    changed_fields,
    decoded,
    require_text,
    text_ok,
    write_changes,
)
from services.store.queries import due_probe_query, due_query
from services.store.transactions import Transaction, as_datetime, store_errors
from services.store.written import WrittenRecords

logger = logging.getLogger(__name__)

MARK_PAGE_SIZE = 100  # documents marked enqueued per transaction
_BATCH_WRITE_LIMIT = 500  # writes per BatchWrite request


class Claims:
    """Claims due jobs and records their publish."""

    def __init__(self, docs: Documents) -> None:
        self._docs = docs
        # Claims this process wrote, so their enqueue mark can be one write conditioned on the
        # claim commit's update_time instead of a read and a write (services/store/written.py).
        self._written = WrittenRecords()
        self._pending = threading.local()

    def claim_due(
        self,
        now: datetime,
        run_id: str,
        limit: int,
        *,
        page_size: int = CLAIM_PAGE_SIZE,
        on_quarantine: Callable[[str], None] | None = None,
        shards: Sequence[int] | None = None,
        claims: ClaimFilter = EVERYTHING,
    ) -> list[ClaimedJob]:
        """`shards`: only these shards (a scan partition's group); None: all of them.
        `claims`: one lane's jobs (services/jobs/lanes.py); every due job by default.

        Claim up to `limit` deferred jobs due at or before `now`: oldest due first with one
        shard; with JOBS_SHARDS > 1 oldest first within each shard, the limit split over the
        shards, so a run may claim a newer job of one shard before an older one of another.

        Each page is one transaction that queries and claims (generation + 1), so overlapping
        callers never claim the same job: 1 read + 1 write per claimed job, 1 read when nothing
        is due. Each document is decoded on its own: one that cannot be is left out of the
        page, quarantined after it (`on_quarantine(job_id)`), and claiming goes on. If
        contention persists after some pages were claimed, returns those (they are committed
        and must be published); with none claimed it raises LostRace.
        """
        require_text(run_id=run_id)
        if limit < 0 or page_size < 1:
            raise ValidationError("limit must be >= 0 and page_size >= 1")
        if claims.also:
            # The rest lane with an action's unrated targets: its parts share the limit as
            # shards do (evenly, what one leaves goes to the others), each in its due order.
            def take(part: ClaimFilter, part_limit: int) -> list[ClaimedJob]:
                return self.claim_due(
                    now,
                    run_id,
                    part_limit,
                    page_size=page_size,
                    on_quarantine=on_quarantine,
                    shards=shards,
                    claims=part,
                )

            claimed, errors_seen = spend_over_shards(
                limit, claims.parts(), take, (LostRace, StoreUnavailable, StoreRejected)
            )
            if errors_seen and not claimed:
                raise _worst(errors_seen)
            return claimed
        if self._docs.shards == 1:
            # One unsharded query, as before the field existed: records without `shard`
            # are claimed too.
            return self._claim_shard(now, run_id, limit, page_size, on_quarantine, None, claims)
        return self._claim_sharded(now, run_id, limit, page_size, on_quarantine, shards, claims)

    def anything_due(
        self,
        now: datetime,
        shards: Sequence[int] | None = None,
        claims: ClaimFilter = EVERYTHING,
    ) -> bool:
        """Whether any deferred job (of `claims`' lane) is due at `now` (in `shards`, when
        given): one billed read (one per 30 shards). The scan asks before it takes its
        partition's lease."""
        if claims.also:
            return any(self.anything_due(now, shards, part) for part in claims.parts())
        if self._docs.shards == 1:
            with store_errors():
                return bool(list(self._docs.stream(due_query(now, 1, None, claims))))
        return self._anything_due(now, shards, claims)

    def _claim_sharded(
        self,
        now: datetime,
        run_id: str,
        limit: int,
        page_size: int,
        on_quarantine: Callable[[str], None] | None,
        only: Sequence[int] | None = None,
        claims: ClaimFilter = EVERYTHING,
    ) -> list[ClaimedJob]:
        """`limit` split evenly over the shards still holding due jobs, each shard claimed in
        its own due order on a bounded pool; a shard that returns less than its share is
        drained, and what it left over goes to the others in the next round. First one probe
        per 30 shards (`shard in [...]`, 1 read when empty), so a run with nothing due bills
        about what N = 1 does, not one read per shard."""
        if not self._anything_due(now, only, claims):
            return []

        def take(shard: int, share: int) -> list[ClaimedJob]:
            return self._claim_shard(now, run_id, share, page_size, on_quarantine, shard, claims)

        # A random first shard within the run's shards: the split's remainder goes to the first
        # shards listed, so a fixed order would starve the last ones whenever the budget is
        # below N (8 shards, budget 6: shards 6 and 7 never claimed).
        chosen = list(self._subset(only))
        first = random.randrange(len(chosen))  # fairness, not security
        shards = [*chosen[first:], *chosen[:first]]
        # One shard's failure must not discard the other shards' committed claims: they are
        # claimed in Firestore and only a publish moves them on (else they wait for the
        # claim timeout). Raised only when nothing was claimed.
        claimed, errors_seen = spend_over_shards(
            limit, shards, take, (LostRace, StoreUnavailable, StoreRejected)
        )
        if errors_seen and not claimed:
            raise _worst(errors_seen)
        for exc in errors_seen:
            logger.warning(
                "claim_due %s: a shard failed after %d claimed elsewhere: %s",
                run_id,
                len(claimed),
                exc,
                extra={
                    "fields": {"reason": "claim_shard_failed", "error_type": type(exc).__name__}
                },
            )
        return claimed

    def _subset(self, only: Sequence[int] | None) -> Sequence[int]:
        every = range(self._docs.shards)
        if only is None:
            return every
        chosen = sorted(set(only))
        if not chosen or any(shard not in every for shard in chosen):
            raise ValidationError(
                f"shards {list(only)} are not a non-empty subset of 0-{len(every) - 1}"
            )
        return chosen

    def _anything_due(
        self, now: datetime, only: Sequence[int] | None = None, claims: ClaimFilter = EVERYTHING
    ) -> bool:
        if only is None:
            groups = shard_groups(self._docs.shards)  # what read_parts has with N > 1
        else:
            chosen = self._subset(only)
            step = MAX_IN_VALUES
            groups = [tuple(chosen[n : n + step]) for n in range(0, len(chosen), step)]
        with store_errors():
            return any(
                list(self._docs.stream(due_probe_query(now, group, claims))) for group in groups
            )

    def _claim_shard(
        self,
        now: datetime,
        run_id: str,
        limit: int,
        page_size: int,
        on_quarantine: Callable[[str], None] | None,
        shard: int | None,
        claims: ClaimFilter = EVERYTHING,
    ) -> list[ClaimedJob]:
        claimed: list[ClaimedJob] = []
        after: tuple[Any, ...] | None = None  # the next page starts after this record
        while len(claimed) < limit:
            want = min(page_size, limit - len(claimed))
            try:
                page, invalid, last = self._claim_remembering(
                    now, run_id, want, shard, after, claims
                )
            except (LostRace, StoreUnavailable, StoreRejected) as exc:
                # The pages already committed are claimed: return them to be published.
                if not claimed:
                    raise
                logger.warning(
                    "claim_due %s stopped after %d: %s: %s",
                    run_id,
                    len(claimed),
                    type(exc).__name__,
                    exc,
                )
                break
            claimed.extend(page)
            moved = [
                job_id
                for job_id in invalid
                if self._docs.quarantine(job_id, Role.SCAN, run_id, headroom=True)
            ]
            for job_id in moved:
                if on_quarantine is not None:
                    on_quarantine(job_id)
            if len(page) + len(invalid) < want:
                break  # nothing more is due
            if len(moved) < len(invalid):
                # Records left as found (a newer version's, never quarantined) would fill the
                # same page again and hold up every job due after them: go on after the last
                # record this page read; all before it were claimed or moved aside.
                after = last
            elif not (page or moved):
                break
        return claimed

    def _claim_page(
        self,
        transaction: Transaction,
        now: datetime,
        run_id: str,
        want: int,
        shard: int | None,
        after: tuple[Any, ...] | None = None,
        claims: ClaimFilter = EVERYTHING,
    ) -> tuple[list[ClaimedJob], list[str], tuple[Any, ...] | None]:
        """The page's claims, the IDs it could not decode, and the cursor after the last
        record it read (its due_at, its action for the rest lane, and its ID)."""
        at = self._docs.clock.now()
        claimed = []
        invalid = []
        last: tuple[Any, ...] | None = None
        query = self._docs.query(
            dataclasses.replace(due_query(now, want, shard, claims), start_after=after)
        )
        # The rest lane orders by due_at, then action; an action's lane leaving targets out
        # by due_at, then params.target: the cursor names that second order too.
        by_action = bool(claims.exclude)
        by_target = bool(claims.exclude_targets)
        jobs = self._docs.jobs
        for job_id, document in self._docs.tx.query_in(transaction, query):
            try:
                job, fields = self._docs.decoded_fields(job_id, document)
            except InvalidRecord:
                fields = decode_fields(document.fields, self._docs.client)
                fits = False
            else:
                # One record too large to take its claim (or a later write of its life) would
                # fail this whole page's commit on every run: it is left out and quarantined
                # after the page, alone (issue 33, finding 2).
                fits = life_headroom_problem(schema.JOBS, job_id, fields) is None
            if not fits:
                invalid.append(job_id)
                # The query ranged on due_at: it is a timestamp, whatever else is wrong.
                last = _cursor(fields.get("due_at"), fields, job_id, by_action, by_target)
                continue
            new = self._docs.rules.claim(job, run_id, at)
            write_changes(transaction, jobs.document(job_id), job, new)
            claimed.append(ClaimedJob(job.job_id, new.generation, job.due_at, at, job.action))
            self._pending.jobs.append(new)
            last = _cursor(
                job.due_at,
                {"action": job.action, "params": job.params},
                job_id,
                by_action,
                by_target,
            )
        return claimed, invalid, last

    def _claim_remembering(
        self,
        now: datetime,
        run_id: str,
        want: int,
        shard: int | None,
        after: tuple[Any, ...] | None = None,
        claims: ClaimFilter = EVERYTHING,
    ) -> tuple[list[ClaimedJob], list[str], tuple[Any, ...] | None]:
        """A claim page; each claimed job is remembered with the update_time its write got."""

        def attempt(
            transaction: Transaction, *args: Any
        ) -> tuple[list[ClaimedJob], list[str], tuple[Any, ...] | None]:
            self._pending.jobs = []
            self._pending.transaction = transaction
            return self._claim_page(transaction, *args)

        result = self._docs.tx.run(attempt, now, run_id, want, shard, after, claims)
        transaction = self._pending.transaction
        names = getattr(transaction, "written_names", [])
        written = getattr(transaction, "write_results", None) or []
        in_jobs = f"/{schema.JOBS}/"
        # Read from the raw results: the same time the proto-plus field gives, without its
        # wrapper per result.
        stamped = (
            (name, update_time(result))
            for name, result in zip(names, written, strict=False)
            if in_jobs in name
        )
        stamps = {name.rsplit("/", 1)[-1]: at for name, at in stamped if at is not None}
        for job in self._pending.jobs:
            if job.job_id in stamps:
                remembered = job.replaced(update_time=as_datetime(stamps[job.job_id]))
                self._written.put(("claim", job.job_id, job.generation), remembered)
        return result

    def mark_enqueued_many(
        self,
        items: Sequence[tuple[str, int, str]],
        at: datetime | None = None,
        *,
        page_size: int = MARK_PAGE_SIZE,
    ) -> list[EnqueueMark]:
        """Claimed → enqueued with the message ID (publish acknowledged at `at`), for many
        (job_id, generation, message_id): conditional writes for the claims this store wrote,
        one transaction per page for the rest.

        Already enqueued, or the worker got the push first (running or terminal, same
        generation): only the message ID is recorded; the job never moves backwards. Each item
        gets its outcome as an EnqueueMark in input order: the job as written, or the error
        refusing it (another generation → StaleGeneration; deferred, e.g. reclaimed →
        InvalidTransition; JobNotFound; ValidationError). A job this store claimed (and nothing
        changed since) costs 1 write: its mark is conditioned on the claim commit's
        update_time, no read. Any other costs 1 read + 1 write in a transaction per page, as
        does a job whose conditional write was refused (the worker started it first, say). A
        page that cannot be written (contention, Firestore down) marks its items with that
        error.
        """
        if page_size < 1:
            raise ValidationError("page_size must be at least 1")
        marks: list[EnqueueMark | None] = self._mark_remembered(items, at)
        rest = [n for n, mark in enumerate(marks) if mark is None]
        if rest:
            read = self._mark_reading([items[n] for n in rest], at, page_size)
            for n, mark in zip(rest, read, strict=True):
                marks[n] = mark
        return [mark for mark in marks if mark is not None]

    def _mark_remembered(
        self, items: Sequence[tuple[str, int, str]], at: datetime | None
    ) -> list[EnqueueMark | None]:
        """Per item, its mark when it is a claim this store remembers, written as one write
        conditioned on the claim's update_time (BatchWrite: each write applied or refused on
        its own); None for the items left to the reading path."""
        now = self._docs.clock.now()
        marks: list[EnqueueMark | None] = [None] * len(items)
        planned: list[tuple[int, Job, Job]] = []
        for n, (job_id, generation, message_id) in enumerate(items):
            claimed = self._written.take(("claim", job_id, generation))
            if claimed is None or not text_ok(job_id, message_id):
                continue
            try:
                new = self._docs.rules.enqueued(claimed, generation, message_id, at or now, now)
            except JobsError:
                continue
            planned.append((n, claimed, new))
        for first in range(0, len(planned), _BATCH_WRITE_LIMIT):
            page = planned[first : first + _BATCH_WRITE_LIMIT]
            applied = self._docs.write_conditionally([(old, new) for _, old, new in page])
            for (n, _, new), stamp in zip(page, applied, strict=True):
                if stamp is not None:
                    job = new.replaced(update_time=stamp)
                    marks[n] = EnqueueMark(job.job_id, items[n][1], job=job)
        return marks

    def _mark_reading(
        self, items: Sequence[tuple[str, int, str]], at: datetime | None, page_size: int
    ) -> list[EnqueueMark]:
        marks: list[EnqueueMark] = []
        for start in range(0, len(items), page_size):
            page = list(items[start : start + page_size])
            try:
                done = self._docs.tx.run(self._mark_page, page, at)
            except (LostRace, StoreUnavailable, StoreRejected) as exc:
                marks.extend(
                    EnqueueMark(job_id, generation, error=exc) for job_id, generation, _ in page
                )
                continue
            marks.extend(done)
            for mark in done:
                if isinstance(mark.error, InvalidRecord):
                    self._docs.quarantine(mark.job_id, Role.SCAN, "mark_enqueued")
        return marks

    def _mark_page(
        self,
        transaction: Transaction,
        page: list[tuple[str, int, str]],
        at: datetime | None,
    ) -> list[EnqueueMark]:
        now = self._docs.clock.now()
        valid = {job_id for job_id, _, message_id in page if text_ok(job_id, message_id)}
        refs = [self._docs.jobs.document(job_id) for job_id in sorted(valid)]
        before: dict[str, Job] = {}
        broken: dict[str, InvalidRecord] = {}
        if refs:
            for snapshot in transaction.get_all(refs):
                if snapshot.exists:
                    try:
                        before[snapshot.id] = decoded(snapshot)
                    except InvalidRecord as exc:
                        broken[snapshot.id] = exc
        current = dict(before)
        marks = []
        for job_id, generation, message_id in page:
            if job_id not in valid:
                error: JobsError = ValidationError(
                    "job_id and message_id must be non-empty strings"
                )
                marks.append(EnqueueMark(job_id, generation, error=error))
            elif job_id in broken:
                marks.append(EnqueueMark(job_id, generation, error=broken[job_id]))
            elif job_id not in current:
                marks.append(EnqueueMark(job_id, generation, error=JobNotFound(job_id)))
            else:
                try:
                    job = self._docs.rules.enqueued(
                        current[job_id], generation, message_id, at or now, now
                    )
                except JobsError as exc:
                    marks.append(EnqueueMark(job_id, generation, error=exc))
                else:
                    current[job_id] = job
                    marks.append(EnqueueMark(job_id, generation, job=job))
        for job_id, job in current.items():
            diff = changed_fields(before[job_id], job)
            if diff:
                transaction.update(self._docs.jobs.document(job_id), diff)
        return marks

    def mark_enqueue_failed(self, job_id: str, generation: int, error: ErrorInfo) -> Job:
        """Claimed → deferred after a failed publish, with last_error and an audit entry; the
        job stays due, so a later run publishes it again."""

        def change(job: Job, now: datetime) -> Job:
            return self._docs.rules.enqueue_failed(job, generation, error, now)

        return self._docs.transition(job_id, change)


def _worst(seen: Sequence[Exception]) -> Exception:
    """The error a claim with nothing claimed raises: an outage or a refusal before contention,
    so the run reports the fault rather than "another run is claiming"."""
    for kind in (StoreRejected, StoreUnavailable):
        for exc in seen:
            if isinstance(exc, kind):
                return exc
    return seen[0]


def _cursor(
    due: Any, fields: dict[str, Any], job_id: str, by_action: bool, by_target: bool
) -> tuple[Any, ...]:
    """Where the next claim page of a lane starts: after this record, in the lane's order."""
    if by_action:
        return (due, fields.get("action"), job_id)
    if by_target:
        params = fields.get("params")
        return (due, params.get("target") if isinstance(params, Mapping) else None, job_id)
    return (due, job_id)
