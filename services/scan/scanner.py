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

import logging
import uuid
from datetime import datetime, timedelta

from services.jobs import errors
from services.jobs.clock import Clock
from services.jobs.control import Control, HousekeepingMark
from services.jobs.metrics import LOG_EVENT, MetricsSink, NullSink
from services.jobs.runs import ScanRun
from services.scan.budget import (
    DEFAULT_ENQUEUED_TIMEOUT_S,
    EnqueueBudget,
    ScanLimits,
    TimeBudget,
    effective_claim_timeout,
    enqueue_budget,
)
from services.scan.dependencies import JobPublisher, RunRecorder, ScanStore
from services.scan.errors import QueueUnreachable, ScanError, StoreRefused, StoreUnreachable
from services.scan.gauges import Gauges
from services.scan.housekeeping import Housekeeping
from services.scan.reclaimer import REASON_LEASE_EXPIRED, Reclaimer
from services.scan.stager import Stager
from services.scan.summary import Backlog, RunTally, StopReason, log_fields

# The names callers import from here (the split modules hold them).
__all__ = [
    "DEFAULT_ENQUEUED_TIMEOUT_S",
    "EVENT_SCAN_FAILED",
    "REASON_LEASE_EXPIRED",
    "JobPublisher",
    "QueueUnreachable",
    "RunRecorder",
    "ScanError",
    "ScanLimits",
    "ScanStore",
    "Scanner",
    "StoreRefused",
    "StoreUnreachable",
]

logger = logging.getLogger(__name__)

# The event of the ERROR line of a run that Firestore stopped (not counted as a scan run).
EVENT_SCAN_FAILED = "scan_failed"


class Scanner:
    """Performs scan runs; thread-safe, so overlapping requests may share one."""

    def __init__(
        self,
        store: ScanStore,
        publisher: JobPublisher,
        clock: Clock,
        limits: ScanLimits,
        *,
        runs: RunRecorder | None = None,
        metrics: MetricsSink | None = None,
    ) -> None:
        self._store = store
        self._clock = clock
        self._limits = limits
        self.reclaimer = Reclaimer(store, clock, limits)
        self.stager = Stager(store, publisher, clock, limits)
        self.gauges = Gauges(store, clock, limits, metrics or NullSink(), runs)
        self.housekeeping = Housekeeping(limits.housekeeping_interval_s)

    def close(self) -> None:
        self.stager.close()

    @staticmethod
    def new_run_id(at: datetime) -> str:
        """A sortable, unique run ID: UTC time, then a random suffix."""
        return f"{at.strftime('%Y%m%dT%H%M%S')}-{uuid.uuid4().hex[:8]}"

    def run(self, *, dry_run: bool = False, run_id: str | None = None) -> ScanRun:
        """One scan run; raises StoreUnreachable or QueueUnreachable (with `.run`) on outage."""
        started_at = self._clock.now()
        run_id = run_id or self.new_run_id(started_at)
        tally = RunTally()
        try:
            control = self._store.get_control()
        except errors.StoreUnavailable as exc:
            raise StoreUnreachable(f"cannot read the control document: {exc}") from exc
        except errors.StoreRejected as exc:
            raise StoreRefused(f"cannot read the control document: {exc}") from exc
        # (The handler logs a StoreRefused once, with event store_rejected.)
        budget = self.budget_for(control)
        claim_timeout = self.claim_timeout_for(control)

        def finish(backlog: Backlog, reason: StopReason) -> ScanRun:
            return tally.finish(
                run_id=run_id,
                started_at=started_at,
                finished_at=self._clock.now(),
                stopped_because=reason,
                paused=control.paused,
                dry_run=dry_run,
                budget=budget.limit,
                backlog=backlog,
            )

        housekeeping = self.housekeeping.due(started_at, control.housekeeping)
        try:
            if control.paused:
                stopped: StopReason = "paused"
            elif dry_run:
                stopped = "dry_run"
            else:
                # Expired claims and leases on every run (1 read each when there are none),
                # so a crashed scan's claim or worker's lease is back within its timeout plus
                # one scan interval; stale messages and the due_at check wait for housekeeping.
                self.reclaimer.reclaim(run_id, claim_timeout, tally, quick=not housekeeping)
                time_budget = TimeBudget(started_at, self._limits.time_budget_s)
                stopped = self.stager.run(run_id, budget, time_budget, tally)
            idle = not (
                housekeeping or control.paused or dry_run or tally.claimed or tally.reclaimed
            )
            if idle and stopped == "drained":
                # Nothing was due and the last housekeeping is recent: no counts, no record.
                run = finish(self.housekeeping.idle_backlog(control.housekeeping), stopped)
                self.gauges.report(run, record=False)
                return run
            backlog = self.gauges.measure(claim_timeout)
            if housekeeping and self.housekeeping.spaced and not (control.paused or dry_run):
                self._record_housekeeping(self.housekeeping.mark(started_at, backlog))
        except StoreRefused as exc:
            exc.run = finish(Backlog(), "unavailable")
            raise
        except StoreUnreachable as exc:
            # What the run did before Firestore went away (its published messages are real)
            # goes in the 503 body and an ERROR line. No gauges: the backlog is unknown, and
            # zeros would hide the overdue alert. No `scan_run` event: this run did not finish.
            exc.run = finish(Backlog(), "unavailable")
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

    def budget_for(self, control: Control) -> EnqueueBudget:
        """This run's enqueue budget: the control's dials, under the deployment's ceiling."""
        return enqueue_budget(
            self._limits.max_per_run,
            self._limits.interval_s,
            rate_per_s=control.catch_up_rate,
            cap_override=min(self._limits.max_per_run, control.claim_budget),
        )

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
