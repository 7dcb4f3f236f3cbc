"""The `Stager`: claim due jobs a page at a time, publish each ID, record the outcome.

One claim transaction per page until the enqueue budget, the time budget or the due jobs run
out, or another run's contention stops it. The next page's claim runs on a claim thread as soon
as one publish of the current page is acknowledged, so claiming overlaps publishing and marking.
Every claimed ID is published and the stager waits for every publish future before recording:
`enqueued` with the message ID (one conditional BatchWrite per chunk of 100, on a small thread
pool overlapping the next page), or back to `deferred` with the error. Nothing here catches
BaseException: if the process dies between claim and publish, the records stay `claimed` and
a later run's reclaimer returns them after the claim timeout.
"""

from __future__ import annotations

import contextvars
import functools
import logging
from collections.abc import Callable, Sequence
from concurrent import futures
from dataclasses import dataclass
from datetime import datetime
from typing import TYPE_CHECKING, Any

from services.edge.publisher import PublishError
from services.jobs import errors
from services.jobs.budget import EnqueueBudget, ScanLimits, TimeBudget
from services.jobs.clock import Clock
from services.jobs.lanes import EVERYTHING, ClaimFilter, LaneBudget
from services.jobs.parts import ErrorInfo
from services.jobs.results import ClaimedJob, EnqueueMark
from services.scan.dependencies import JobPublisher
from services.scan.errors import StoreRefused, StoreUnreachable
from services.scan.pacer import Pacer
from services.scan.summary import RunTally, StopReason
from services.store.claims import MARK_PAGE_SIZE

if TYPE_CHECKING:
    from services.store.job_store import FirestoreJobStore

logger = logging.getLogger(__name__)

# Pub/Sub error messages can be long; the job record keeps a readable prefix.
_MAX_ERROR_CHARS = 500


class Stager:
    """Claims, publishes and marks for one scan run at a time (thread-safe)."""

    def __init__(
        self, store: FirestoreJobStore, publisher: JobPublisher, clock: Clock, limits: ScanLimits
    ) -> None:
        self._store = store
        self._publisher = publisher
        self._clock = clock
        self._limits = limits
        self._marker = futures.ThreadPoolExecutor(
            max_workers=limits.mark_workers, thread_name_prefix="scan-mark"
        )
        # One claim at a time: two claim transactions would only contend for the same
        # oldest records.
        self._claimer = futures.ThreadPoolExecutor(max_workers=1, thread_name_prefix="scan-claim")

    def close(self) -> None:
        self._claimer.shutdown(wait=True)
        self._marker.shutdown(wait=True)

    def run(
        self,
        run_id: str,
        budget: EnqueueBudget,
        time_budget: TimeBudget,
        tally: RunTally,
        pacer: Pacer | None = None,
        poll_s: float | None = None,
        shards: tuple[int, ...] | None = None,
        lane: LaneBudget | None = None,
    ) -> StopReason:
        """Stage one run's pages; waits for every mark before it returns.

        With a `pacer` each page waits for its tokens (a paced run); with `poll_s` as well, a
        short page does not end the run: the next claim comes `poll_s` later, until the time
        budget ends. With a `lane` (services/jobs/lanes.py) only that lane's jobs are claimed,
        on a claim thread of its own, so lanes run side by side, each at its own pace."""
        # The marks of one page run while the next page is claimed and published; at most
        # one page of marks is outstanding, and the run waits for all of them before it ends.
        in_flight: list[futures.Future[None]] = []
        claimer = None
        if lane is not None:
            claimer = futures.ThreadPoolExecutor(
                max_workers=1, thread_name_prefix=f"scan-claim-{lane.key}"
            )
        pace = _Pace(
            pacer,
            poll_s if pacer is not None else None,
            shards,
            claimer,
            lane.claims if lane is not None else EVERYTHING,
            lane.key if lane is not None else None,
        )
        try:
            return self.stage(run_id, budget, time_budget, tally, in_flight, pace)
        finally:
            _wait_all(in_flight)
            if claimer is not None:
                claimer.shutdown(wait=True)

    def stage(
        self,
        run_id: str,
        budget: EnqueueBudget,
        time_budget: TimeBudget,
        tally: RunTally,
        in_flight: list[futures.Future[None]],
        pace: _Pace | None = None,
    ) -> StopReason:
        pace = pace or _Pace(None, None, None)
        remaining = budget.limit
        page = self._start_claim(run_id, remaining, time_budget, tally, pace)
        while isinstance(page, _Claiming):
            claims = self._claimed(page)
            if claims is None:
                return "contention"
            if isinstance(claims, _Deadline):
                # A paced run's wait for tokens (or a poll) reached the time budget.
                return "time"
            tally.add_claimed(len(claims), pace.lane)
            remaining -= len(claims)
            # A short page means nothing more was due when it was claimed.
            full = len(claims) == page.want
            following: list[_Claiming | StopReason] = []
            claim_following = functools.partial(
                self._follow, following, full, run_id, remaining, time_budget, tally, pace
            )
            published_before = tally.published
            previous = list(in_flight)
            in_flight.extend(self._publish_page(run_id, claims, tally, claim_following))
            _wait_all(previous)
            del in_flight[: len(previous)]
            if claims and tally.published == published_before:
                # The whole page failed: Pub/Sub is most likely down. Claiming more would
                # only cycle more records through claimed -> deferred (and no next claim was
                # started: that waits for this page's first acknowledged publish).
                return "unavailable"
            claim_following()
            page = following[0]
        return page

    def _follow(
        self,
        following: list[_Claiming | StopReason],
        full: bool,
        run_id: str,
        remaining: int,
        time_budget: TimeBudget,
        tally: RunTally,
        pace: _Pace,
    ) -> None:
        """Decide (once) what follows a page: the next page's claim, or why there is none.
        A short page means nothing more is due: the run ends ("drained") unless it polls."""
        if following:
            return
        if full:
            following.append(self._start_claim(run_id, remaining, time_budget, tally, pace))
        elif pace.poll_s is not None:
            following.append(
                self._start_claim(run_id, remaining, time_budget, tally, pace, pace.poll_s)
            )
        else:
            following.append("drained")

    def _start_claim(
        self,
        run_id: str,
        remaining: int,
        time_budget: TimeBudget,
        tally: RunTally,
        pace: _Pace,
        after_s: float = 0.0,
    ) -> _Claiming | StopReason:
        """Start claiming the next page on the claim thread, or say why no page is claimed.

        The claim of page k+1 runs while page k is still being published and marked: a
        claim query only returns `deferred` records, so it never meets what page k claimed,
        and each page is committed before any of its IDs is published.
        """
        if remaining <= 0:
            return "budget"
        now = self._clock.now()
        if time_budget.exhausted(now):
            return "time"
        want = min(self._limits.page_size, remaining)
        pacer = pace.pacer
        if pacer is not None:
            want = min(want, pacer.burst)
        context = contextvars.copy_context()

        def claim() -> Sequence[ClaimedJob] | _Deadline:
            at = now
            if pacer is not None:
                # Waits run on the claim thread, so the publishes and marks of the page
                # before go on meanwhile.
                if after_s and not pacer.wait(after_s):
                    return _DEADLINE
                pacer.aim(remaining)
                if pacer.take(want) == 0:
                    return _DEADLINE
                at = self._clock.now()  # what became due while it waited is due now
            # One claim transaction per page: JOBS_SCAN_PAGE_SIZE sets its size.
            narrowed: dict[str, Any] = {}
            if pace.shards is not None:  # a partition's own shards
                narrowed["shards"] = pace.shards
            if not pace.claims.everything:  # one lane's jobs
                narrowed["claims"] = pace.claims
            return self._store.claim_due(
                at, run_id, want, page_size=want, on_quarantine=tally.add_quarantined, **narrowed
            )

        future = (pace.claimer or self._claimer).submit(context.run, claim)
        return _Claiming(want, future)

    def _claimed(self, page: _Claiming) -> list[ClaimedJob] | _Deadline | None:
        """The page's committed claims; None when another run's contention stopped it;
        _DEADLINE when a paced wait reached the time budget first."""
        try:
            result = page.future.result()
            if isinstance(result, _Deadline):
                return result
            return list(result)
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
            return None

    def _publish_page(
        self,
        run_id: str,
        claims: Sequence[ClaimedJob],
        tally: RunTally,
        on_first_publish: Callable[[], None],
    ) -> list[futures.Future[None]]:
        """Publish every claim, wait for every publish, and start recording the outcomes.

        `on_first_publish` is called once, as soon as one publish is acknowledged (proof
        that Pub/Sub is up), so the next page's claim overlaps the rest of this one.
        """
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
                if not published:
                    on_first_publish()
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


class _Deadline:
    """A paced claim that never ran: its wait reached the time budget."""


_DEADLINE = _Deadline()


@dataclass(frozen=True)
class _Pace:
    """How a run claims: at its pacer's rate (None: as fast as it goes), polling every
    `poll_s` after a short page (None: a short page ends the run), over `shards`."""

    pacer: Pacer | None
    poll_s: float | None
    # A partition's shards (None: all of them).
    shards: tuple[int, ...] | None
    # A lane's own claim thread (None: the stager's), its jobs, and its key for the tally.
    claimer: futures.ThreadPoolExecutor | None = None
    claims: ClaimFilter = EVERYTHING
    lane: str | None = None


@dataclass(frozen=True)
class _Claiming:
    """A page's claim transaction, running on the claim thread."""

    want: int
    future: futures.Future[Sequence[ClaimedJob] | _Deadline]


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
