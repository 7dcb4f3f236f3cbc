"""The `Scanner`: one scan run, no HTTP. Reclaim, stage (claim, publish, mark), measure, report.

A run reads the control document first. Paused or dry-run: it only measures. Otherwise the
`Reclaimer` (`reclaimer.py`) takes back abandoned claims, leases and lost messages and quarantines
what it cannot decode; the `Stager` (`stager.py`) claims due jobs a page at a time until the
enqueue budget, the time budget or the due jobs run out, publishes every ID and records each
outcome; the `Gauges` (`gauges.py`) measure the backlog and report the run.

Nothing here catches BaseException: if the process dies between claim and publish, the
records stay `claimed` and the reclaimer of a later run returns them after the claim timeout.
No ID is ever dropped silently.
"""

from __future__ import annotations

import contextvars
import logging
import time
import uuid
from collections.abc import Mapping
from concurrent import futures
from datetime import datetime, timedelta
from typing import TYPE_CHECKING

from services.jobs import errors
from services.jobs.budget import (
    EnqueueBudget,
    ScanLimits,
    TimeBudget,
    catch_up_ceiling,
    effective_claim_timeout,
    enqueue_budget,
    pace_rate,
    partition_share,
)
from services.jobs.clock import Clock
from services.jobs.control import Control, HousekeepingMark
from services.jobs.lanes import REST, LaneBudget, plan_lanes
from services.scan.dependencies import JobPublisher, LeaseKeeper, RunRecorder
from services.scan.errors import QueueUnreachable, StoreRefused, StoreUnreachable
from services.scan.gauges import Gauges
from services.scan.housekeeping import Housekeeping
from services.scan.pacer import Pacer, Sleep, pace_page
from services.scan.partitions import shards_of
from services.scan.queue_age import QueueAgeSource
from services.scan.reclaimer import Reclaimer
from services.scan.shard_check import ShardCheck
from services.scan.stager import Stager
from services.scan.summary import RunBacklog, RunTally, StopReason, log_fields
from services.scan.trigger import Execution
from services.store.partition_leases import PartitionLease, PartitionLeaseRefused
from services.store.runs import ScanRun
from services.telemetry.metrics import LOG_EVENT, MetricsSink, NullSink

if TYPE_CHECKING:
    from services.store.job_store import FirestoreJobStore

# The names callers import from here (the split modules hold them).

logger = logging.getLogger(__name__)

# The event of the ERROR line of a run that Firestore stopped (not counted as a scan run).
EVENT_SCAN_FAILED = "scan_failed"


class Scanner:
    """Performs scan runs; thread-safe, so overlapping requests may share one."""

    def __init__(
        self,
        store: FirestoreJobStore,
        publisher: JobPublisher,
        clock: Clock,
        limits: ScanLimits,
        *,
        runs: RunRecorder | None = None,
        metrics: MetricsSink | None = None,
        leases: LeaseKeeper | None = None,
        sleep: Sleep | None = None,
        queue_age: QueueAgeSource | None = None,
        rates: Mapping[str, float] | None = None,
    ) -> None:
        self._store = store
        # Each action's claim rate (jobs/s; services/jobs/lanes.py `claim_rates`): the
        # catalogue's budgets and the deployment's own. Empty: one lane, as before lanes.
        self._rates: dict[str, float] = dict(rates or {})
        self._clock = clock
        self._limits = limits
        self._leases = leases
        # Paced waits: real sleeps in production, a FakeClock's advance in tests.
        self._sleep: Sleep = sleep or time.sleep
        self.reclaimer = Reclaimer(store, clock, limits, queue_age)
        self.stager = Stager(store, publisher, clock, limits)
        self.gauges = Gauges(store, clock, limits, metrics or NullSink(), runs)
        self.housekeeping = Housekeeping(limits.housekeeping_interval_s)
        self.shard_check = ShardCheck(store, limits.shards)

    def close(self) -> None:
        self.stager.close()

    @staticmethod
    def new_run_id(at: datetime) -> str:
        """A sortable, unique run ID: UTC time, then a random suffix."""
        return f"{at.strftime('%Y%m%dT%H%M%S')}-{uuid.uuid4().hex[:8]}"

    def run(
        self,
        *,
        dry_run: bool = False,
        run_id: str | None = None,
        partition: int = 0,
        execution: Execution | None = None,
    ) -> ScanRun:
        """One scan run; raises StoreUnreachable or QueueUnreachable (with `.run`) on outage.

        `partition` names the shards the run claims (0: all of them with one partition);
        `execution` the Cloud Scheduler execution the request belongs to, if any."""
        started_at = self._clock.now()
        run_id = run_id or self.new_run_id(started_at)
        if not 0 <= partition < self._limits.partitions:
            raise ValueError(f"partition {partition} is outside 0-{self._limits.partitions - 1}")
        shards = shards_of(partition, self._limits.partitions, self._limits.shards)
        tally = RunTally()
        try:
            control = self._store.get_control()
        except errors.ClockSkewed as exc:
            # This instance's clock is too far from Firestore's (the store logged it, event
            # clock_skew): every `now` of this run would claim early or reclaim a live lease.
            # Nothing is claimed or reclaimed; a later run (or another instance) does it.
            run = tally.finish(
                run_id=run_id,
                started_at=started_at,
                finished_at=self._clock.now(),
                stopped_because="clock_skew",
                paused=False,
                dry_run=dry_run,
                budget=0,
                backlog=RunBacklog(),
                mode=self._limits.mode,
                partition=partition,
                note=str(exc),
                execution=execution.key if execution else None,
            )
            self.gauges.report(run, sink=False)  # it measured nothing
            return run
        except errors.StoreUnavailable as exc:
            raise StoreUnreachable(f"cannot read the control document: {exc}") from exc
        except errors.StoreRejected as exc:
            raise StoreRefused(f"cannot read the control document: {exc}") from exc
        # (The handler logs a StoreRefused once, with event store_rejected.)
        budget = self.budget_for(control, started_at, partition)
        claim_timeout = self.claim_timeout_for(control)
        paced = self._limits.mode == "paced"
        pace_per_s = pace_rate(budget, self._limits.time_budget_s) if paced else 0.0
        note = ""

        def finish(backlog: RunBacklog, reason: StopReason) -> ScanRun:
            return tally.finish(
                run_id=run_id,
                started_at=started_at,
                finished_at=self._clock.now(),
                stopped_because=reason,
                paused=control.paused,
                dry_run=dry_run,
                budget=budget.limit,
                backlog=backlog,
                mode=self._limits.mode,
                partition=partition,
                rate_per_s=pace_per_s,
                note=note,
                execution=execution.key if execution else None,
            )

        housekeeping = self.housekeeping.due(started_at, control.housekeeping)
        try:
            if control.paused:
                stopped: StopReason = "paused"
            elif dry_run:
                stopped = "dry_run"
            else:
                reclaimed_first = False
                # A run that may end when nothing is due looks first (1 read) and takes no
                # lease when nothing is: an idle run costs what it did before leases.
                due = self._limits.polls or self._anything_due(started_at, shards)
                if not due:
                    # Expired claims and leases on every run (1 read each when there are
                    # none), so a crashed scan's claim or worker's lease is back within its
                    # timeout plus one scan interval; stale messages and the due_at check wait
                    # for housekeeping.
                    self.reclaimer.reclaim(run_id, claim_timeout, tally, quick=not housekeeping)
                    reclaimed_first = True
                    due = tally.reclaimed > 0
                if not due:
                    stopped = "drained"
                else:
                    lease = self._acquire(partition, run_id, started_at, execution)
                    if isinstance(lease, PartitionLeaseRefused):
                        note = lease.describe()
                        logger.warning(
                            "scan run claims nothing: %s",
                            note,
                            extra={"fields": {"reason": f"lease_{lease.reason}"}},
                        )
                        run = finish(RunBacklog(), lease.reason)
                        # No gauges: this run measured nothing, and zeros would hide the
                        # backlog the run that holds the lease reports.
                        self.gauges.report(run, sink=False)
                        return run
                    finished = False
                    try:
                        if not reclaimed_first:
                            self.reclaimer.reclaim(
                                run_id, claim_timeout, tally, quick=not housekeeping
                            )
                        stopped = self._stage(
                            run_id,
                            budget,
                            started_at,
                            tally,
                            pace_per_s,
                            shards,
                            control,
                            partition,
                        )
                        # A run whose publishes all failed answers 503: Cloud Scheduler's
                        # retry of it must run, not be taken for a duplicate.
                        finished = stopped != "unavailable"
                    finally:
                        self._release(lease, finished)
            idle = not (
                housekeeping or control.paused or dry_run or tally.claimed or tally.reclaimed
            )
            # The shard layout against JOBS_SHARDS every run (no read), the census of records
            # out of reach at housekeeping only (shard_check.py).
            shard_figures = self.shard_check.figures(
                control, started_at, census=housekeeping, last=control.housekeeping
            )
            if idle and stopped == "drained":
                # Nothing was due and the last housekeeping is recent: no counts, no record.
                idle_backlog = self.housekeeping.idle_backlog(control.housekeeping)
                run = finish(self.shard_check.apply(idle_backlog, shard_figures), stopped)
                self.gauges.report(run, record=False)
                return run
            backlog = self.shard_check.apply(self.gauges.measure(claim_timeout), shard_figures)
            if housekeeping and self.housekeeping.spaced and not (control.paused or dry_run):
                mark = self.housekeeping.mark(started_at, backlog, shard_figures.unknown)
                self._record_housekeeping(mark)
        except StoreRefused as exc:
            exc.run = finish(RunBacklog(), "unavailable")
            raise
        except StoreUnreachable as exc:
            # What the run did before Firestore went away (its published messages are real)
            # goes in the 503 body and an ERROR line. No gauges: the backlog is unknown, and
            # zeros would hide the overdue alert. No `scan_run` event: this run did not finish.
            exc.run = finish(RunBacklog(), "unavailable")
            logger.error(
                "scan run stopped: Firestore unavailable",
                extra={"fields": {**log_fields(exc.run), LOG_EVENT: EVENT_SCAN_FAILED}},
            )
            raise
        run = finish(backlog, stopped)
        self.gauges.report(run)
        if run.publish_failed and not run.published:
            raise QueueUnreachable(
                f"all {run.publish_failed} publishes of run {run_id} failed; "
                "the jobs are back in deferred",
                run,
            )
        return run

    def _stage(
        self,
        run_id: str,
        budget: EnqueueBudget,
        started_at: datetime,
        tally: RunTally,
        pace_per_s: float,
        shards: tuple[int, ...] | None,
        control: Control | None = None,
        partition: int = 0,
    ) -> StopReason:
        time_budget = TimeBudget(started_at, self._limits.time_budget_s)
        lanes = self.lanes_for(control or Control(), budget, started_at, partition)
        if len(lanes) == 1 and lanes[0].claims.everything:
            # No action has a rate and none is paused: one lane, every due job.
            return self._stage_lane(run_id, budget, time_budget, tally, pace_per_s, shards)
        for lane in lanes:
            tally.add_lane(lane)
        working = [lane for lane in lanes if not lane.paused and lane.limit > 0]
        for lane in lanes:
            if lane.paused:
                logger.info(
                    "claims of %s paused until %s (its dependency asked to wait)",
                    lane.key,
                    lane.paused_until,
                    extra={"fields": {"action": lane.key, "reason": "action_paused"}},
                )
            elif lane.limit <= 0:
                tally.lane_stopped(lane.key, "budget")
        # Each lane on a thread of its own (its claims on its own claim thread), so a slow or
        # empty lane never holds another's pages up.
        with futures.ThreadPoolExecutor(
            max_workers=max(1, len(working)), thread_name_prefix="scan-lane"
        ) as pool:
            running = {
                lane.key: pool.submit(
                    contextvars.copy_context().run,
                    self._stage_lane,
                    run_id,
                    self._lane_budget(budget, lane),
                    time_budget,
                    tally,
                    self._lane_pace(budget, lane, pace_per_s),
                    shards,
                    lane,
                )
                for lane in working
            }
            futures.wait(list(running.values()))
        reasons: dict[str, StopReason] = {}
        for key, future in running.items():
            reasons[key] = future.result()  # a lane's StoreUnreachable surfaces here
            tally.lane_stopped(key, reasons[key])
        if "unavailable" in reasons.values():
            return "unavailable"
        return reasons.get(REST, "budget")

    def lanes_for(
        self,
        control: Control,
        budget: EnqueueBudget,
        now: datetime,
        partition: int = 0,
    ) -> tuple[LaneBudget, ...]:
        """This run's claim lanes: one per action with a rate (at min(rate, the catch-up
        rate) x interval, this partition's share), none for a paused action, and the rest at
        the run's own budget (services/jobs/lanes.py)."""
        return plan_lanes(
            self._rates,
            control.action_pauses,
            now,
            rest_limit=budget.limit,
            catch_up_rate=budget.rate_per_s,
            interval_s=self._limits.interval_s,
            cap=control.per_run_cap(self._limits.max_per_run),
            partition=partition,
            partitions=self._limits.partitions,
        )

    def _lane_budget(self, budget: EnqueueBudget, lane: LaneBudget) -> EnqueueBudget:
        if lane.key == REST:
            return budget
        return EnqueueBudget(lane.limit, budget.cap, lane.rate_per_s, budget.interval_s, "rate")

    def _lane_pace(self, budget: EnqueueBudget, lane: LaneBudget, pace_per_s: float) -> float:
        """A lane's paced claim rate: its budget spread over the time budget, like the run's."""
        if lane.key == REST or self._limits.mode != "paced":
            return pace_per_s
        return pace_rate(self._lane_budget(budget, lane), self._limits.time_budget_s)

    def _stage_lane(
        self,
        run_id: str,
        budget: EnqueueBudget,
        time_budget: TimeBudget,
        tally: RunTally,
        pace_per_s: float,
        shards: tuple[int, ...] | None,
        lane: LaneBudget | None = None,
    ) -> StopReason:
        if self._limits.mode != "paced" or pace_per_s <= 0:
            return self.stager.run(run_id, budget, time_budget, tally, shards=shards, lane=lane)
        pacer = Pacer(
            self._clock,
            self._sleep,
            pace_per_s,
            pace_page(pace_per_s, self._limits.page_size),
            time_budget.deadline,
            ceiling_per_s=catch_up_ceiling(budget),
        )
        poll_s = self._limits.poll_s if self._limits.polls else None
        return self.stager.run(run_id, budget, time_budget, tally, pacer, poll_s, shards, lane)

    def _anything_due(self, now: datetime, shards: tuple[int, ...] | None) -> bool:
        try:
            if shards is not None:
                return self._store.anything_due(now, shards)
            return self._store.anything_due(now)
        except errors.StoreUnavailable as exc:
            raise StoreUnreachable(f"cannot look for due jobs: {exc}") from exc
        except errors.StoreRejected as exc:
            raise StoreRefused(f"cannot look for due jobs: {exc}") from exc

    def _acquire(
        self, partition: int, run_id: str, now: datetime, execution: Execution | None
    ) -> PartitionLease | PartitionLeaseRefused | None:
        """The partition's lease (None when the scanner keeps none: unit tests' fakes)."""
        if self._leases is None:
            return None
        try:
            return self._leases.acquire(
                partition,
                run_id,
                now,
                timedelta(seconds=self._limits.lease_s),
                execution.key if execution else None,
            )
        except errors.StoreUnavailable as exc:
            raise StoreUnreachable(f"cannot take the scan lease: {exc}") from exc
        except errors.StoreRejected as exc:
            raise StoreRefused(f"cannot take the scan lease: {exc}") from exc
        except errors.LostRace:
            # Another run is taking the same lease this instant: it wins, this one claims
            # nothing, as an overlap.
            return PartitionLeaseRefused("overlap", partition, None, None, None)

    def _release(self, lease: PartitionLease | None, finished: bool) -> None:
        if lease is None or self._leases is None:
            return
        try:
            self._leases.release(lease, self._clock.now(), finished=finished)
        except errors.JobsError as exc:
            # The lease expires by itself at its `until`; the next run waits at most that.
            logger.warning(
                "could not release the scan lease: %s",
                exc,
                extra={"fields": {"reason": "lease_unreleased"}},
            )

    def budget_for(
        self, control: Control, now: datetime | None = None, partition: int = 0
    ) -> EnqueueBudget:
        """This run's enqueue budget: the control's dials (the ramp's rate while it climbs),
        under the deployment's ceiling, and this partition's share of it."""
        rate = control.rate_at(now) if now is not None else control.catch_up_rate
        # The caps are per run, and with k partitions k runs share each interval: together
        # they may claim k caps, never more than rate x interval (the rate is shared).
        k = self._limits.partitions
        budget = enqueue_budget(
            self._limits.max_per_run * k,
            self._limits.interval_s,
            rate_per_s=rate,
            cap_override=control.per_run_cap(self._limits.max_per_run) * k,
        )
        return partition_share(budget, partition, self._limits.partitions)

    def _record_housekeeping(self, mark: HousekeepingMark) -> None:
        # Best effort: without the mark the next run does its housekeeping again, which
        # costs reads but loses nothing.
        try:
            self._store.record_housekeeping(mark)
        except errors.JobsError as exc:
            logger.warning(
                "could not record the housekeeping mark: %s",
                exc,
                extra={"fields": {"reason": "housekeeping_unrecorded"}},
            )

    def claim_timeout_for(self, control: Control) -> timedelta:
        return effective_claim_timeout(control.claim_timeout, self._limits.claim_timeout_s)

    # --- the work of a run ----------------------------------------------------------------

    # --- signals ---------------------------------------------------------------------------
