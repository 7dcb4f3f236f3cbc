"""The `Reclaimer`: the first step of a scan run, taking back what nothing else would move.

Expired claims, expired worker leases, jobs enqueued so long their message is lost (each back
to `deferred`, or `failed` / `cancelled` by the lapse rule), and records it cannot decode
(quarantined) — all through `store.reclaim_expired`, which handles each record on its own.
Nothing here stops the run: whatever the step meets, claiming follows. A job it failed gets
the `job_failed` line no dead worker could write.

The stale-enqueued rescue is backlog-aware when a `QueueAgeSource` is given (the scan's is
Cloud Monitoring's oldest-unacked age of the push subscription, services/scan/queue_age.py):
a job enqueued longer ago than the enqueued timeout is taken back only when it was also
enqueued before the publish time of the subscription's oldest unacked message, so a message
still waiting in a long backlog is never published a second time. With the age unavailable
the rescue is skipped for the run (the stale-enqueued gauge and alert still report); without a
source (tests, tools) it measures from `enqueued_at` alone.
"""

from __future__ import annotations

import logging
from datetime import datetime, timedelta
from typing import TYPE_CHECKING

from services.jobs import errors
from services.jobs.budget import ScanLimits
from services.jobs.clock import Clock
from services.jobs.results import Reclaimed
from services.jobs.state import State
from services.scan.queue_age import QueueAgeSource
from services.scan.summary import RunTally
from services.telemetry.metrics import EVENT_JOB_FAILED, LOG_EVENT

if TYPE_CHECKING:
    from services.store.job_store import FirestoreJobStore

logger = logging.getLogger(__name__)


class Reclaimer:
    """Claims, leases, stale enqueued jobs, cancels and quarantine, for one deployment."""

    def __init__(
        self,
        store: FirestoreJobStore,
        clock: Clock,
        limits: ScanLimits,
        queue_age: QueueAgeSource | None = None,
    ) -> None:
        self._store = store
        self._clock = clock
        self._limits = limits
        self._queue_age = queue_age

    def reclaim(
        self, run_id: str, claim_timeout: timedelta, tally: RunTally, *, quick: bool = False
    ) -> None:
        """The reclaimer's step. Nothing it meets stops the run: the store handles each record on
        its own and reports what it skipped; claiming follows whatever happened here. `quick`:
        only the expired claims and leases (a run between housekeepings)."""
        enqueued_timeout: timedelta | None = timedelta(seconds=self._limits.enqueued_timeout_s)
        unacked_since: datetime | None = None
        if not quick and self._queue_age is not None:
            # Read once per housekeeping (quick runs skip the stale-enqueued step anyway).
            age = self._queue_age.oldest_unacked()
            if age is None:
                enqueued_timeout = None
                logger.warning(
                    "stale-enqueued rescue skipped: the subscription's backlog age is unknown",
                    extra={"fields": {"reason": REASON_RESCUE_SKIPPED}},
                )
            else:
                unacked_since = age.unacked_since
        try:
            report = self._store.reclaim_expired(
                self._clock.now(),
                claim_timeout,
                self._limits.reclaim_limit,
                run_id,
                enqueued_timeout=enqueued_timeout,
                unacked_since=unacked_since,
                quick=quick,
            )
        except errors.JobsError as exc:
            tally.reclaim_contended = isinstance(exc, errors.LostRace)
            logger.warning(
                "reclaiming stopped: %s",
                exc,
                extra={"fields": {"reason": "reclaim_failed", "error_type": type(exc).__name__}},
            )
            return
        tally.reclaimed = len(report.reclaimed)
        for job_id in report.quarantined:
            tally.add_quarantined(job_id)
        if report.reclaimed:
            ids = [r.job_id for r in report.reclaimed]
            reasons: dict[str, int] = {}
            for item in report.reclaimed:
                reasons[item.reason] = reasons.get(item.reason, 0) + 1
            logger.warning(
                "reclaimed %d expired claims, leases or lost messages",
                len(ids),
                extra={"fields": {"reclaimed_ids": ids[:100], "reclaimed": len(ids), **reasons}},
            )
        for job_id, why in report.skipped:
            logger.warning(
                "reclaim skipped job %s: %s",
                job_id,
                why,
                extra={"fields": {"job_id": job_id, "reason": "reclaim_skipped"}},
            )
        if report.stopped_by is not None:
            tally.reclaim_contended = isinstance(report.stopped_by, errors.LostRace)
            logger.warning(
                "reclaiming stopped early: %s",
                report.stopped_by,
                extra={"fields": {"reason": "reclaim_stopped"}},
            )
        for item in report.reclaimed:
            if item.to_state == State.FAILED:
                _log_job_failed(item)


# The reason on the line of a housekeeping whose stale-enqueued step did not run.
REASON_RESCUE_SKIPPED = "enqueued_rescue_skipped"

# The reason on the job_failed line of a job the reclaimer failed.
REASON_LEASE_EXPIRED = "lease expired on the last attempt"


def _log_job_failed(item: Reclaimed) -> None:
    """The worker logs job_failed when an action fails for good; a worker that died on the
    last attempt cannot, so the reclaimer does, and the FAILED_JOBS metric and alert see it."""
    logger.error(
        "job failed: %s",
        REASON_LEASE_EXPIRED,
        extra={
            "fields": {
                LOG_EVENT: EVENT_JOB_FAILED,
                "job_id": item.job_id,
                "reason": REASON_LEASE_EXPIRED,
                "from_state": str(item.from_state),
                "generation": item.generation,
            }
        },
    )
