"""The `Gauges`: what a scan run measures after its work, and where its numbers go.

`store.backlog` counts over the live states only (so its cost stays flat as terminal records
accumulate), and the same `ScanRun` goes to the metrics sink, one `scan_run` log line and the
`scan_runs` document. A failing sink or run log is logged and never fails a run that did its
work.
"""

from __future__ import annotations

import logging
from datetime import timedelta
from typing import TYPE_CHECKING

from services.jobs import errors
from services.jobs.budget import ScanLimits
from services.jobs.clock import Clock
from services.scan.dependencies import RunRecorder
from services.scan.errors import StoreRefused, StoreUnreachable
from services.scan.summary import RunBacklog, log_fields, scan_report
from services.store.runs import RunLogError, ScanRun
from services.telemetry.metrics import MetricsSink

if TYPE_CHECKING:
    from services.store.job_store import FirestoreJobStore

logger = logging.getLogger(__name__)


class Gauges:
    """Measures the backlog and reports each run."""

    def __init__(
        self,
        store: FirestoreJobStore,
        clock: Clock,
        limits: ScanLimits,
        metrics: MetricsSink,
        runs: RunRecorder | None,
    ) -> None:
        self._store = store
        self._clock = clock
        self._limits = limits
        self._metrics = metrics
        self._runs = runs

    def measure(self, claim_timeout: timedelta) -> RunBacklog:
        enqueued_timeout = timedelta(seconds=self._limits.enqueued_timeout_s)
        try:
            # Counts and limit-1 queries over the live states only: its cost does not grow
            # with the terminal records kept for retention (stats() counts every state).
            found = self._store.backlog(self._clock.now(), claim_timeout, enqueued_timeout)
        except errors.StoreUnavailable as exc:
            raise StoreUnreachable(f"cannot measure the backlog: {exc}") from exc
        except errors.StoreRejected as exc:
            raise StoreRefused(f"cannot measure the backlog: {exc}") from exc
        return RunBacklog(
            due_count=found.due_count,
            oldest_overdue_age_s=found.oldest_overdue_age_s or 0.0,
            stuck_claims=found.stuck_claims,
            stale_enqueued=found.stale_enqueued,
            oldest_enqueued_age_s=found.oldest_enqueued_age_s or 0.0,
        )

    def report(self, run: ScanRun, *, record: bool = True, sink: bool = True) -> None:
        """Log line always; gauges unless `sink` is False (a run that measured nothing); the
        scan_runs document unless `record` is False."""
        logger.info("scan run finished", extra={"fields": log_fields(run)})
        if sink:
            try:
                self._metrics.record_scan(scan_report(run))
            except Exception as exc:  # a metrics outage must not fail a run that did its work
                logger.warning("metrics sink failed: %s", exc)
        if self._runs is not None and record:
            try:
                self._runs.record(run)
            except RunLogError as exc:
                logger.warning("could not record the scan run: %s", exc)
