"""Hand-written fakes for unit tests of the scan's logic (integration tests use the emulators)."""

from __future__ import annotations

import dataclasses
import threading
import time
from collections.abc import Callable, Sequence
from concurrent import futures
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta

from services.jobs import errors
from services.jobs.control import Control, HousekeepingMark
from services.jobs.lanes import EVERYTHING, ClaimFilter
from services.jobs.layout import ShardCensus, ShardLayout
from services.jobs.parts import ErrorInfo
from services.jobs.results import Backlog, ClaimedJob, EnqueueMark, Reclaimed, ReclaimReport
from services.jobs.state import State

T0 = datetime(2026, 11, 30, 4, 0, tzinfo=UTC)


@dataclass
class FakeStore:
    """An in-memory queue of due IDs with the store methods the scanner calls."""

    due: list[str] = field(default_factory=list)
    control: Control = field(default_factory=Control)
    expired: list[str] = field(default_factory=list)
    # Running jobs whose lease expired on their last attempt: the reclaimer fails them.
    expired_last_attempt: list[str] = field(default_factory=list)
    reclaim_race: bool = False
    on_claim: Callable[[], None] | None = None
    unavailable: set[str] = field(default_factory=set)
    claimed: dict[str, int] = field(default_factory=dict)
    enqueued: dict[str, str] = field(default_factory=dict)
    failed: dict[str, ErrorInfo] = field(default_factory=dict)
    claim_calls: list[int] = field(default_factory=list)
    lose_marks: set[str] = field(default_factory=set)
    mark_delay_s: float = 0.0
    mark_calls: list[int] = field(default_factory=list)
    stale_enqueued: int = 0
    oldest_enqueued_age_s: float | None = None
    backlog_calls: list[timedelta] = field(default_factory=list)
    enqueued_timeouts: list[timedelta | None] = field(default_factory=list)
    unacked_sinces: list[datetime | None] = field(default_factory=list)
    quick_reclaims: list[bool] = field(default_factory=list)
    invalid: list[str] = field(default_factory=list)  # quarantined by the reclaimer
    # The reclaimer committed its failures, then Firestore stopped it (its report says so).
    reclaim_stopped: errors.JobsError | None = None
    contend_marks: bool = False  # every mark chunk loses to contention
    # The shard census (services/scan/shard_check.py): records outside 0..N-1 by kind.
    shards: int = 1
    out_of_range: int = 0
    without_shard: int = 0
    census_calls: list[bool] = field(default_factory=list)
    # Each due job's action (services/jobs/lanes.py); a job not named is media.delete_source.
    actions: dict[str, str] = field(default_factory=dict)
    claim_filters: list[ClaimFilter] = field(default_factory=list)
    _lock: threading.Lock = field(default_factory=threading.Lock)

    def _check(self, op: str) -> None:
        if op in self.unavailable:
            raise errors.StoreUnavailable(f"{op}: firestore down")

    def get_control(self) -> Control:
        self._check("get_control")
        return self.control

    def anything_due(
        self,
        now: datetime,
        shards: Sequence[int] | None = None,
        claims: ClaimFilter = EVERYTHING,
    ) -> bool:
        self._check("claim_due")
        return any(self._in_lane(job_id, claims) for job_id in self.due)

    def action_of(self, job_id: str) -> str:
        return self.actions.get(job_id, "media.delete_source")

    def _in_lane(self, job_id: str, claims: ClaimFilter) -> bool:
        action = self.action_of(job_id)
        if claims.action is not None:
            return action == claims.action
        return action not in claims.exclude

    def record_housekeeping(self, mark: HousekeepingMark) -> None:
        self._check("record_housekeeping")
        self.control = dataclasses.replace(self.control, housekeeping=mark)

    def shard_census(self, *, exact: bool) -> ShardCensus:
        self._check("shard_census")
        self.census_calls.append(exact)
        unreachable = self.out_of_range + self.without_shard if exact else None
        return ShardCensus(self.shards, self.out_of_range, unreachable)

    def adopt_shard_layout(self, layout: ShardLayout) -> ShardLayout:
        self._check("adopt_shard_layout")
        if self.control.shard_layout is None:
            self.control = dataclasses.replace(self.control, shard_layout=layout)
        return self.control.shard_layout or layout

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
        self._check("reclaim_expired")
        self.enqueued_timeouts.append(enqueued_timeout)
        self.unacked_sinces.append(unacked_since)
        self.quick_reclaims.append(quick)
        if self.reclaim_race:
            race = errors.LostRace("another run is reclaiming the same records")
            return ReclaimReport(stopped_by=race)
        taken, self.expired = self.expired[:limit], self.expired[limit:]
        self.due.extend(taken)
        failed, self.expired_last_attempt = self.expired_last_attempt, []
        return ReclaimReport(
            tuple(
                [Reclaimed(i, State.CLAIMED, State.DEFERRED, 1, "claim_timeout") for i in taken]
                + [Reclaimed(i, State.RUNNING, State.FAILED, 3, "lease_expired") for i in failed]
            ),
            quarantined=tuple(self.invalid),
            stopped_by=self.reclaim_stopped,
        )

    def claim_due(
        self,
        now: datetime,
        run_id: str,
        limit: int,
        *,
        page_size: int = 100,
        on_quarantine: Callable[[str], None] | None = None,
        shards: Sequence[int] | None = None,
        claims: ClaimFilter = EVERYTHING,
    ) -> Sequence[ClaimedJob]:
        self._check("claim_due")
        assert page_size == limit  # the scanner claims each of its pages in one transaction
        self.claim_calls.append(limit)
        self.claim_filters.append(claims)
        if self.on_claim:
            self.on_claim()
        with self._lock:
            batch = [job_id for job_id in self.due if self._in_lane(job_id, claims)][:limit]
            taken = set(batch)
            self.due = [job_id for job_id in self.due if job_id not in taken]
            out = []
            for job_id in batch:
                generation = self.claimed.get(job_id, 0) + 1
                self.claimed[job_id] = generation
                out.append(ClaimedJob(job_id, generation, T0, now, self.action_of(job_id)))
            return out

    def mark_enqueued_many(
        self, items: Sequence[tuple[str, int, str]], at: datetime | None = None
    ) -> Sequence[EnqueueMark]:
        """Per item, what the real store reports; one call stands for one transaction."""
        self._check("mark_enqueued_many")
        time.sleep(self.mark_delay_s)
        marks = []
        with self._lock:
            self.mark_calls.append(len(items))
            if self.contend_marks:
                race = errors.LostRace("gave up after repeated transaction contention")
                return [
                    EnqueueMark(job_id, generation, error=race) for job_id, generation, _ in items
                ]
            for job_id, generation, message_id in items:
                if job_id in self.lose_marks:
                    error = errors.StaleGeneration(job_id, generation, generation + 1)
                    marks.append(EnqueueMark(job_id, generation, error=error))
                    continue
                self.enqueued[job_id] = message_id
                marks.append(EnqueueMark(job_id, generation))
        return marks

    def mark_enqueue_failed(self, job_id: str, generation: int, error: ErrorInfo) -> None:
        self._check("mark_enqueue_failed")
        with self._lock:
            self.failed[job_id] = error
            self.due.append(job_id)

    def backlog(
        self, now: datetime, claim_timeout: timedelta, enqueued_timeout: timedelta
    ) -> Backlog:
        self._check("backlog")
        self.backlog_calls.append(enqueued_timeout)
        return Backlog(
            oldest_overdue_age_s=(now - T0).total_seconds() if self.due else None,
            due_count=len(self.due),
            stuck_claims=len(self.expired),
            stale_enqueued=self.stale_enqueued,
            oldest_enqueued_age_s=self.oldest_enqueued_age_s,
        )


class PublishFailure(Exception):
    """A publish the fake refused."""


class FakePublisher:
    """Resolves futures at once: message IDs, or PublishFailure for IDs in `fail`."""

    timeout_s = 1.0

    def __init__(self, fail: Callable[[str], bool] = lambda _id: False) -> None:
        self.fail = fail
        self.sent: list[tuple[str, int, str]] = []
        self._lock = threading.Lock()

    def publish(self, job_id: str, generation: int, run_id: str) -> futures.Future[str]:
        future: futures.Future[str] = futures.Future()
        with self._lock:
            self.sent.append((job_id, generation, run_id))
            count = len(self.sent)
        if self.fail(job_id):
            future.set_exception(PublishFailure(f"cannot publish {job_id}"))
        else:
            future.set_result(f"m{count}")
        return future


class Crash(BaseException):
    """Stands in for the process dying (SIGKILL, OOM) in the middle of a run."""


class CrashingPublisher(FakePublisher):
    def publish(self, job_id: str, generation: int, run_id: str) -> futures.Future[str]:
        raise Crash("process died after claiming")
