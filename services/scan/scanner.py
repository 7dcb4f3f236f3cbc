"""The `Scanner`: one scan run, no HTTP. Reclaim, claim in pages, publish, record, report.

A run reads the control document first. Paused or dry-run: it only measures. Otherwise it
returns expired claims to `deferred` (bounded, audited by the store), then claims due jobs a
page at a time until the enqueue budget, the time budget or the due jobs run out. Every
claimed ID is published and the scan waits for every publish future before recording the
outcome: `enqueued` with the message ID, or back to `deferred` with the error.

Nothing here catches BaseException: if the process dies between claim and publish, the
records stay `claimed` and the reclaimer of a later run returns them after the claim timeout.
No ID is ever dropped silently.
"""

from __future__ import annotations

import contextvars
import dataclasses
import functools
import logging
import threading
import uuid
from collections.abc import Callable, Sequence
from concurrent import futures
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any, Protocol

from services.jobs import errors
from services.jobs.clock import Clock
from services.jobs.control import Control
from services.jobs.metrics import EVENT_JOB_FAILED, LOG_EVENT, MetricsSink, NullSink
from services.jobs.model import Backlog as StoreBacklog
from services.jobs.model import ClaimedJob, EnqueueMark, ErrorInfo, Reclaimed, ReclaimReport
from services.jobs.publisher import PublishError
from services.jobs.runs import RunLogError, ScanRun
from services.jobs.state import State
from services.jobs.store import MARK_PAGE_SIZE
from services.scan.budget import (
    EnqueueBudget,
    TimeBudget,
    effective_claim_timeout,
    enqueue_budget,
)
from services.scan.summary import Backlog, RunTally, StopReason, log_fields, scan_report

logger = logging.getLogger(__name__)

# The event of the ERROR line of a run that Firestore stopped (not counted as a scan run).
EVENT_SCAN_FAILED = "scan_failed"

# Pub/Sub error messages can be long; the job record keeps a readable prefix.
_MAX_ERROR_CHARS = 500


class ScanError(Exception):
    """The scan run could not complete."""

    def __init__(self, message: str | None = None, run: ScanRun | None = None) -> None:
        super().__init__(message or (self.__doc__ or "").strip())
        self.run = run  # what the run did before it stopped, when known


class StoreUnreachable(ScanError):
    """Firestore could not be reached; the run stopped. Records it claimed stay claimed."""


class StoreRefused(ScanError):
    """Firestore refused the run's requests for a reason retrying cannot fix (permissions, a
    missing index or database, an invalid request): a configuration error, not an outage."""


class QueueUnreachable(ScanError):
    """Pub/Sub could not be reached: every publish of the run failed and was recorded."""


class ScanStore(Protocol):
    """The store operations a scan run uses (FirestoreJobStore provides them)."""

    def get_control(self) -> Control: ...

    def reclaim_expired(
        self,
        now: datetime,
        claim_timeout: timedelta,
        limit: int,
        run_id: str,
        *,
        enqueued_timeout: timedelta | None = None,
    ) -> ReclaimReport: ...

    def claim_due(
        self,
        now: datetime,
        run_id: str,
        limit: int,
        *,
        page_size: int,
        on_quarantine: Callable[[str], None] | None = None,
    ) -> Sequence[ClaimedJob]: ...

    def mark_enqueued_many(
        self, items: Sequence[tuple[str, int, str]], at: datetime | None = None
    ) -> Sequence[EnqueueMark]: ...

    def mark_enqueue_failed(self, job_id: str, generation: int, error: ErrorInfo) -> Any: ...

    def backlog(
        self, now: datetime, claim_timeout: timedelta, enqueued_timeout: timedelta
    ) -> StoreBacklog: ...


class JobPublisher(Protocol):
    """Publishes one job ID; the future resolves to the message ID."""

    timeout_s: float

    def publish(self, job_id: str, generation: int, run_id: str) -> futures.Future[str]: ...


class RunRecorder(Protocol):
    """Keeps the record of each run (runs.ScanRunLog writes `scan_runs`)."""

    def record(self, run: ScanRun) -> None: ...


# A job enqueued longer ago than this is "stale": its message should long since have been
# delivered, or retried (each try ends by the push ack deadline, each wait is at most the max
# backoff) and dead-lettered. At the infra's default Pub/Sub settings that whole path is at
# most 10 x 300 s + 9 x 600 s = 8,400 s; 3 h is above it, so a slow but healthy redelivery is
# never counted.
DEFAULT_ENQUEUED_TIMEOUT_S = 3 * 3600.0


@dataclass(frozen=True)
class ScanLimits:
    """The deployment's bounds on a run (from Settings); the control document works inside them.

    `max_per_run` is a ceiling: the operator's claim budget and catch-up rate can only lower
    the enqueue budget below it. `claim_timeout_s` is a floor for the same reason in reverse:
    a shorter timeout would reclaim the claims of a run that may still be publishing.
    """

    time_budget_s: float = 60.0
    max_per_run: int = 1000
    page_size: int = 200
    interval_s: float = 60.0
    claim_timeout_s: float = 600.0
    reclaim_limit: int = 500
    mark_workers: int = 16
    # Enqueued longer than this, a job counts as stale (its message may be lost); the
    # deployment sets it (JOBS_ENQUEUED_TIMEOUT_S) above Pub/Sub's whole retry path.
    enqueued_timeout_s: float = DEFAULT_ENQUEUED_TIMEOUT_S
    # 0: every run does its housekeeping. Above 0: a run that finds nothing due does the
    # rescuer, the backlog counts and the scan_runs record only when this long has passed
    # since this instance last did (and on its first run), so an idle run bills 2 reads.
    housekeeping_interval_s: float = 0.0


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
        self._publisher = publisher
        self._clock = clock
        self._limits = limits
        self._runs = runs
        self._metrics = metrics or NullSink()
        self._marker = futures.ThreadPoolExecutor(
            max_workers=limits.mark_workers, thread_name_prefix="scan-mark"
        )
        self._housekeeping = _Housekeeping(limits.housekeeping_interval_s)

    def close(self) -> None:
        self._marker.shutdown(wait=True)

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

        housekeeping = self._housekeeping.due(started_at)
        try:
            if control.paused:
                stopped: StopReason = "paused"
            elif dry_run:
                stopped = "dry_run"
            else:
                stopped = self._work(
                    run_id, started_at, budget, claim_timeout, tally, rescue=housekeeping
                )
            idle = not (housekeeping or control.paused or dry_run or tally.claimed)
            if idle and stopped == "drained":
                # Nothing was due (the claim query came back empty) and the last housekeeping
                # was recent: no counts (nothing is overdue), no scan_runs document.
                run = finish(self._housekeeping.last_backlog, stopped)
                self._report(run, record=False)
                return run
            backlog = self._measure(claim_timeout)
            if housekeeping:
                self._housekeeping.done(started_at, backlog)
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
        self._report(run)
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

    def claim_timeout_for(self, control: Control) -> timedelta:
        return effective_claim_timeout(control.claim_timeout, self._limits.claim_timeout_s)

    # --- the work of a run ----------------------------------------------------------------

    def _work(
        self,
        run_id: str,
        started_at: datetime,
        budget: EnqueueBudget,
        claim_timeout: timedelta,
        tally: RunTally,
        *,
        rescue: bool = True,
    ) -> StopReason:
        if rescue:
            self._reclaim(run_id, claim_timeout, tally)
        time_budget = TimeBudget(started_at, self._limits.time_budget_s)
        # The marks of one page run while the next page is claimed and published; at most
        # one page of marks is outstanding, and the run waits for all of them before it ends.
        in_flight: list[futures.Future[None]] = []
        try:
            return self._claim_pages(run_id, budget, time_budget, tally, in_flight)
        finally:
            _wait_all(in_flight)

    def _claim_pages(
        self,
        run_id: str,
        budget: EnqueueBudget,
        time_budget: TimeBudget,
        tally: RunTally,
        in_flight: list[futures.Future[None]],
    ) -> StopReason:
        remaining = budget.limit
        while True:
            if remaining <= 0:
                return "budget"
            now = self._clock.now()
            if time_budget.exhausted(now):
                return "time"
            want = min(self._limits.page_size, remaining)
            try:
                # One claim transaction per page: JOBS_SCAN_PAGE_SIZE sets its size.
                claims = list(
                    self._store.claim_due(
                        now, run_id, want, page_size=want, on_quarantine=tally.add_quarantined
                    )
                )
            except errors.StoreUnavailable as exc:
                raise StoreUnreachable(f"cannot claim due jobs: {exc}") from exc
            except errors.StoreRejected as exc:
                raise StoreRefused(f"cannot claim due jobs: {exc}") from exc
            except errors.LostRace as exc:
                # The store already retried (or waited on a lock longer than the call
                # timeout): another run is claiming the same records right now. Leave them
                # to it; the next run picks up whatever remains. Not an outage: 200.
                logger.warning(
                    "claiming stopped by contention: %s",
                    exc,
                    extra={"fields": {"reason": "claim_contention"}},
                )
                return "contention"
            tally.add_claimed(len(claims))
            remaining -= len(claims)
            published_before = tally.published
            previous = list(in_flight)
            in_flight.extend(self._publish_page(run_id, claims, tally))
            _wait_all(previous)
            del in_flight[: len(previous)]
            if claims and tally.published == published_before:
                # The whole page failed: Pub/Sub is most likely down. Claiming more would
                # only cycle more records through claimed -> deferred.
                return "unavailable"
            if len(claims) < want:
                return "drained"

    def _reclaim(self, run_id: str, claim_timeout: timedelta, tally: RunTally) -> None:
        """The rescuer's step. Nothing it meets stops the run: the store handles each record on
        its own and reports what it skipped; claiming follows whatever happened here."""
        try:
            report = self._store.reclaim_expired(
                self._clock.now(),
                claim_timeout,
                self._limits.reclaim_limit,
                run_id,
                enqueued_timeout=timedelta(seconds=self._limits.enqueued_timeout_s),
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

    def _publish_page(
        self, run_id: str, claims: Sequence[ClaimedJob], tally: RunTally
    ) -> list[futures.Future[None]]:
        """Publish every claim, wait for every publish, and start recording the outcomes."""
        pending: list[tuple[ClaimedJob, futures.Future[str] | None, Exception | None]] = []
        for claim in claims:
            try:
                future = self._publisher.publish(claim.job_id, claim.generation, run_id)
                pending.append((claim, future, None))
            except PublishError as exc:
                pending.append((claim, None, exc))
        marks = []
        published: list[tuple[str, int, str]] = []
        for claim, maybe_future, early_error in pending:
            message_id, error = self._outcome(maybe_future, early_error)
            if message_id is not None:
                latency = (self._clock.now() - claim.claimed_at).total_seconds()
                tally.add_published(latency)
                published.append((claim.job_id, claim.generation, message_id))
            else:
                tally.add_failed(claim.job_id)
                marks.append(self._submit(functools.partial(self._mark_failed, claim, error)))
        at = self._clock.now()
        # One transaction per chunk instead of one per job; chunks run side by side.
        for start in range(0, len(published), MARK_PAGE_SIZE):
            chunk = published[start : start + MARK_PAGE_SIZE]
            marks.append(self._submit(functools.partial(self._mark_enqueued, chunk, at, tally)))
        return marks

    def _submit(self, mark: Callable[[], None]) -> futures.Future[None]:
        # Each mark runs in the request's context so its log lines keep trace and run_id.
        context = contextvars.copy_context()
        return self._marker.submit(context.run, mark)

    def _outcome(
        self, future: futures.Future[str] | None, early_error: Exception | None
    ) -> tuple[str | None, Exception | None]:
        if future is None:
            return None, early_error
        try:
            # The publisher bounds its own retries by timeout_s; the slack covers batching.
            return future.result(timeout=self._publisher.timeout_s + 5.0), None
        except futures.TimeoutError as exc:
            return None, exc
        except Exception as exc:  # the publish failed; the error is recorded on the job
            return None, exc

    def _mark_enqueued(
        self, chunk: Sequence[tuple[str, int, str]], at: datetime, tally: RunTally
    ) -> None:
        message_ids = {job_id: message_id for job_id, _, message_id in chunk}
        try:
            marks = self._store.mark_enqueued_many(chunk, at)
        except errors.JobsError as exc:
            # The store reports per item; anything raised here is the whole chunk's fate.
            marks = [EnqueueMark(job_id, generation, error=exc) for job_id, generation, _ in chunk]
        for mark in marks:
            if mark.error is None:
                continue
            fields = {
                "job_id": mark.job_id,
                "generation": mark.generation,
                "message_id": message_ids.get(mark.job_id),
            }
            if isinstance(mark.error, errors.StaleGeneration | errors.InvalidTransition):
                # Published, but a newer claim owns the record (or it was reclaimed): the
                # worker drops this message as stale and the newer claim's message does the
                # work.
                tally.add_mark_lost()
                logger.warning(
                    "published job moved on before marking: %s",
                    mark.error,
                    extra={"fields": {**fields, "reason": "mark_stale_generation"}},
                )
            elif isinstance(mark.error, errors.LostRace):
                # The whole chunk lost to contention: the records stay claimed (their
                # messages are out); the worker starts them from claimed, and the reclaimer
                # returns any it does not.
                logger.warning(
                    "could not mark published job enqueued (chunk contended): %s",
                    mark.error,
                    extra={"fields": {**fields, "reason": "mark_contention"}},
                )
            elif isinstance(mark.error, errors.InvalidRecord):
                tally.add_quarantined(mark.job_id)
                logger.warning(
                    "published job's record is invalid: %s",
                    mark.error,
                    extra={"fields": {**fields, "reason": "mark_invalid_record"}},
                )
            else:
                # The message is out but the record stays claimed: the reclaimer returns it
                # and a later run publishes it again; the worker treats the duplicate as
                # normal input.
                logger.error(
                    "could not mark published job enqueued: %s",
                    mark.error,
                    extra={"fields": {**fields, "reason": "mark_failed"}},
                )

    def _mark_failed(self, claim: ClaimedJob, error: Exception | None) -> None:
        info = ErrorInfo(code=_error_code(error), message=_error_message(error))
        fields = {"job_id": claim.job_id, "generation": claim.generation, "error": info.message}
        logger.warning("publish failed; returning job to deferred", extra={"fields": fields})
        try:
            self._store.mark_enqueue_failed(claim.job_id, claim.generation, info)
        except errors.JobsError as exc:
            # Left claimed: the reclaimer returns it after the claim timeout.
            logger.error("could not record publish failure: %s", exc, extra={"fields": fields})

    # --- signals ---------------------------------------------------------------------------

    def _measure(self, claim_timeout: timedelta) -> Backlog:
        enqueued_timeout = timedelta(seconds=self._limits.enqueued_timeout_s)
        try:
            # Counts and limit-1 queries over the live states only: its cost does not grow
            # with the terminal records kept for retention (stats() counts every state).
            found = self._store.backlog(self._clock.now(), claim_timeout, enqueued_timeout)
        except errors.StoreUnavailable as exc:
            raise StoreUnreachable(f"cannot measure the backlog: {exc}") from exc
        except errors.StoreRejected as exc:
            raise StoreRefused(f"cannot measure the backlog: {exc}") from exc
        return Backlog(
            due_count=found.due_count,
            oldest_overdue_age_s=found.oldest_overdue_age_s or 0.0,
            stuck_claims=found.stuck_claims,
            stale_enqueued=found.stale_enqueued,
            oldest_enqueued_age_s=found.oldest_enqueued_age_s or 0.0,
        )

    def _report(self, run: ScanRun, *, record: bool = True) -> None:
        logger.info("scan run finished", extra={"fields": log_fields(run)})
        try:
            self._metrics.record_scan(scan_report(run))
        except Exception as exc:  # a metrics outage must not fail a run that did its work
            logger.warning("metrics sink failed: %s", exc)
        if self._runs is not None and record:
            try:
                self._runs.record(run)
            except RunLogError as exc:
                logger.warning("could not record the scan run: %s", exc)


class _Housekeeping:
    """When this instance last did a run's housekeeping, and the backlog it measured then.

    An idle run in between reports that backlog with nothing due (its claim query just said
    so), which is what the gauges then show: stuck claims and stale enqueued jobs can only
    have appeared through work that a run claimed, and any run that claims measures again.
    """

    def __init__(self, interval_s: float) -> None:
        self._interval = timedelta(seconds=interval_s)
        self._last: datetime | None = None
        self._backlog = Backlog()
        self._lock = threading.Lock()

    def due(self, now: datetime) -> bool:
        with self._lock:
            return (
                self._interval <= timedelta(0)
                or self._last is None
                or now - self._last >= self._interval
                or now < self._last
            )

    def done(self, at: datetime, backlog: Backlog) -> None:
        with self._lock:
            self._last = at
            self._backlog = backlog

    @property
    def last_backlog(self) -> Backlog:
        with self._lock:
            return dataclasses.replace(self._backlog, due_count=0, oldest_overdue_age_s=0.0)


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


def _wait_all(marks: list[futures.Future[None]]) -> None:
    """Wait for every mark; a mark's unexpected error surfaces here, after all have run."""
    futures.wait(marks)
    for mark in marks:
        mark.result()


def _error_code(error: Exception | None) -> str:
    if error is None:
        return "unknown"
    code = getattr(error, "grpc_status_code", None) or getattr(error, "code", None)
    name = getattr(code, "name", None)
    return str(name) if name else type(error).__name__


def _error_message(error: Exception | None) -> str:
    text = str(error) if error is not None else "publish failed"
    return (text or type(error).__name__)[:_MAX_ERROR_CHARS]
