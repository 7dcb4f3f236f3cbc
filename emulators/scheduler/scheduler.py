"""The local Cloud Scheduler: runs one HTTP job by Cloud Scheduler's documented rules.

Each rule, with where Google states it:
- Runs on the job's unix-cron schedule in its time zone (cron.py, job.py).
- "Execution n + 1 of a job will not begin until execution n has finished. Cloud Scheduler will
  never allow two simultaneously outstanding executions. ... if the n+1th execution is
  scheduled to run at 16:00 but the nth execution takes until 16:15, the n+1th execution will
  not start until 16:15" (Job.schedule,
  https://cloud.google.com/scheduler/docs/reference/rest/v1/projects.locations.jobs). So a
  late execution delays the next one to the moment it ends, and that delayed execution carries
  its own scheduled time; any further scheduled times that passed meanwhile are skipped, not
  replayed ("the next scheduled execution time might be skipped if the retries continue through
  that time", https://cloud.google.com/scheduler/docs/configuring/retry-jobs).
- An attempt without a 2xx answer by `attemptDeadline` fails (DEADLINE_EXCEEDED) and its
  request is cancelled (attempt.py); the execution then retries by `retryConfig` (retry.py)
  while the target may still be running the first attempt ("Deduplicate job requests",
  https://cloud.google.com/scheduler/docs/configuring/deduplicate-job-requests). Retries keep
  going through later scheduled times (retry-jobs page above); the execution stays outstanding
  until an attempt succeeds or retries are exhausted.
- Every request carries `X-CloudScheduler-JobName`, and `X-CloudScheduler-ScheduleTime` equal
  on every retry of one scheduled execution (services/edge/scheduler_request.py).
- `run_now()` is `gcloud scheduler jobs run` / jobs.run: "Cloud Scheduler will dispatch the job,
  even if the job is already running"
  (https://cloud.google.com/scheduler/docs/reference/rest/v1/projects.locations.jobs/run). A
  forced execution neither waits for nor delays the scheduled ones. Its ScheduleTime header
  "may use the timestamp of the next scheduled execution, or be omitted" (dedup page):
  `ForcedScheduleTime` picks which; the default (NEXT) is the case a target must handle with
  care, since the next scheduled execution then carries the same value.
"""

from __future__ import annotations

import enum
import logging
import threading
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Any

from emulators.scheduler.attempt import Answer, HttpCall, TokenSource
from emulators.scheduler.clock import SchedulerClock, WallClock
from emulators.scheduler.job import HttpJob
from services.edge.scheduler_request import (
    CLOUD_SCHEDULER_HEADER,
    JOB_NAME_HEADER,
    SCHEDULE_TIME_HEADER,
    USER_AGENT,
    format_schedule_time,
)

logger = logging.getLogger(__name__)

# A cancelled attempt's socket is closed at once; this only bounds a thread whose target never
# answers and whose cancel could not reach the socket (real seconds beyond the deadline).
_SOCKET_GRACE_S = 30.0
_KEPT_ATTEMPTS = 1000
_STOP_TIMEOUT_S = 5.0


class ForcedScheduleTime(enum.Enum):
    """What a forced run's X-CloudScheduler-ScheduleTime carries (both are Google's)."""

    NEXT = "next"  # the next scheduled execution's time
    OMITTED = "omitted"  # no header


@dataclass(frozen=True)
class Attempt:
    """One finished attempt: its number (1, 2, ... over the scheduler's life), the execution it
    belongs to, its retry index (0: the first attempt), and how it ended."""

    number: int
    schedule_time: datetime | None  # None: the header was omitted
    forced: bool
    retry: int
    status: int | None
    body: dict[str, Any]
    error: str = ""
    deadline_exceeded: bool = False

    @property
    def succeeded(self) -> bool:
        return self.status is not None and 200 <= self.status < 300


@dataclass
class _InFlight:
    number: int
    retry: int
    call: HttpCall
    deadline: datetime


@dataclass
class _Execution:
    schedule_time: datetime | None
    forced: bool
    start_at: datetime  # when its next attempt starts (the first: when it was due)
    first_attempt_at: datetime | None = None
    retries: int = 0
    attempt: _InFlight | None = None
    waiting: bool = True  # an attempt is due at start_at


@dataclass
class CloudScheduler:
    """Runs `job` until `stop()`; `on_attempt` hears of every attempt once it ended."""

    job: HttpJob
    tokens: TokenSource
    clock: SchedulerClock = field(default_factory=WallClock)
    on_attempt: Callable[[Attempt], None] | None = None
    forced_schedule_time: ForcedScheduleTime = ForcedScheduleTime.NEXT

    def __post_init__(self) -> None:
        self._lock = threading.Lock()
        self._timetable = self.job.timetable
        self._zone = self.job.zone
        self._scheduled: _Execution | None = None
        self._forced: list[_Execution] = []
        self._next_fire: datetime | None = None
        self._attempts: list[Attempt] = []
        self._skipped: list[datetime] = []
        self._numbers = 0
        self._stopping = False
        self._thread: threading.Thread | None = None

    # -- control ------------------------------------------------------------------------

    def start(self) -> CloudScheduler:
        """Begin at the first scheduled time after now."""
        with self._lock:
            if self._thread is not None:
                raise RuntimeError("this scheduler already started")
            self._next_fire = self._timetable.next_after(self.clock.now())
            self._thread = threading.Thread(target=self._run, name="cloud-scheduler", daemon=True)
        self._thread.start()
        return self

    def stop(self, timeout_s: float = _STOP_TIMEOUT_S) -> None:
        """Stop firing and cancel any attempt in flight."""
        with self._lock:
            self._stopping = True
        self.clock.notify()
        if self._thread is not None:
            self._thread.join(timeout=timeout_s)

    def run_now(self) -> datetime | None:
        """Force a run now (jobs.run); returns the ScheduleTime it carries (None: omitted)."""
        with self._lock:
            schedule_time = None
            if self.forced_schedule_time is ForcedScheduleTime.NEXT:
                schedule_time = self._next_fire or self._timetable.next_after(self.clock.now())
            self._forced.append(_Execution(schedule_time, True, self.clock.now()))
        self.clock.notify()
        return schedule_time

    def send_retry_of(self, schedule_time: datetime) -> HttpCall:
        """DRILL AID, not a Cloud Scheduler API: one more attempt of the execution scheduled
        at `schedule_time`, sent now and carrying exactly what Cloud Scheduler's retry of it
        carries (the same headers, a fresh OIDC token), outside this scheduler's bookkeeping.
        It lets a drill put a retry at a chosen moment inside a running attempt, which the
        real scheduler does only when the attempt outlasts its deadline. Read the answer from
        the returned call's `answer` once it is not None."""
        return HttpCall(
            url=self.job.uri,
            method=self.job.http_method,
            headers=self._headers(schedule_time),
            body=self.job.body,
            token=self._token,
            now=self.clock.now,
            on_done=lambda: None,
            socket_timeout_s=self.job.attempt_deadline_s + _SOCKET_GRACE_S,
        ).start()

    # -- what happened (for callers and tests) ------------------------------------------

    @property
    def attempts(self) -> list[Attempt]:
        with self._lock:
            return list(self._attempts)

    @property
    def skipped(self) -> list[datetime]:
        """Scheduled times that passed while an execution was outstanding, never run."""
        with self._lock:
            return list(self._skipped)

    @property
    def next_scheduled(self) -> datetime | None:
        with self._lock:
            return self._next_fire

    # -- the loop -----------------------------------------------------------------------

    def _run(self) -> None:
        while True:
            with self._lock:
                if self._stopping:
                    break
                finished = self._step(self.clock.now())
                wake = self._next_wake()
            for attempt in finished:
                self._report(attempt)
            self.clock.sleep_until(wake)
        with self._lock:
            for execution in self._executions():
                if execution.attempt is not None:
                    execution.attempt.call.cancel()

    def _executions(self) -> list[_Execution]:
        return ([self._scheduled] if self._scheduled else []) + self._forced

    def _step(self, now: datetime) -> list[Attempt]:
        """Everything due by `now`, in order: ended attempts, due retries, the next run."""
        finished: list[Attempt] = []
        for execution in self._executions():
            finished.extend(self._advance(execution, now))
        self._forced = [e for e in self._forced if not _over(e)]
        if self._scheduled is not None and _over(self._scheduled):
            self._scheduled = None
        fire = self._next_fire
        if self._scheduled is None and fire is not None and fire <= now:
            self._scheduled = _Execution(fire, False, now)
            self._next_fire = self._skip_to_after(fire, now)
            finished.extend(self._advance(self._scheduled, now))
        return finished

    def _advance(self, execution: _Execution, now: datetime) -> list[Attempt]:
        """End the execution's attempt if it answered or its deadline passed, plan a retry,
        and start the next attempt when it is due."""
        ended: list[Attempt] = []
        flight = execution.attempt
        if flight is not None:
            answer = flight.call.answer
            if answer is None and now < flight.deadline:
                return ended  # still waiting for it
            if answer is None or answer.finished_at > flight.deadline:
                flight.call.cancel()
                deadline_s = self.job.attempt_deadline_s
                late = Answer(None, b"", f"DEADLINE_EXCEEDED after {deadline_s:g} s", now)
                ended.append(self._record(execution, flight, late, deadline_exceeded=True))
                failed_at = flight.deadline
            else:
                ended.append(self._record(execution, flight, answer))
                execution.attempt = None
                if answer.succeeded:
                    return ended
                failed_at = answer.finished_at
            execution.attempt = None
            self._plan_retry(execution, failed_at)
        if execution.waiting and execution.start_at <= now:
            self._start_attempt(execution, now)
        return ended

    def _plan_retry(self, execution: _Execution, failed_at: datetime) -> None:
        first = execution.first_attempt_at or failed_at
        elapsed_s = (failed_at - first).total_seconds()
        if self.job.retry.allows_retry(execution.retries, elapsed_s):
            wait_s = self.job.retry.backoff_s(execution.retries + 1)
            execution.start_at = failed_at + timedelta(seconds=wait_s)
            execution.waiting = True
        else:
            execution.waiting = False  # over: the job waits for its next scheduled time

    def _start_attempt(self, execution: _Execution, now: datetime) -> None:
        if execution.first_attempt_at is None:
            execution.first_attempt_at = now
            retry = 0
        else:
            execution.retries += 1
            retry = execution.retries
        self._numbers += 1
        call = HttpCall(
            url=self.job.uri,
            method=self.job.http_method,
            headers=self._headers(execution.schedule_time),
            body=self.job.body,
            token=self._token,
            now=self.clock.now,
            on_done=self.clock.notify,
            socket_timeout_s=self.job.attempt_deadline_s + _SOCKET_GRACE_S,
        )
        deadline = now + self.job.attempt_deadline
        execution.attempt = _InFlight(self._numbers, retry, call, deadline)
        execution.waiting = False
        call.start()

    def _token(self) -> str:
        return self.tokens(self.job.audience, self.job.oidc_service_account_email)

    def _headers(self, schedule_time: datetime | None) -> dict[str, str]:
        headers = dict(self.job.headers)
        if self.job.body and not any(k.lower() == "content-type" for k in headers):
            # "Content-Type: By default, the Content-Type header is set to
            # "application/octet-stream"" (HttpTarget.headers, API reference).
            headers["Content-Type"] = "application/octet-stream"
        headers["User-Agent"] = USER_AGENT
        headers[CLOUD_SCHEDULER_HEADER] = "true"
        headers[JOB_NAME_HEADER] = self.job.job_id
        if schedule_time is not None:
            headers[SCHEDULE_TIME_HEADER] = format_schedule_time(schedule_time, self._zone)
        return headers

    def _record(
        self,
        execution: _Execution,
        flight: _InFlight,
        answer: Answer,
        *,
        deadline_exceeded: bool = False,
    ) -> Attempt:
        attempt = Attempt(
            number=flight.number,
            schedule_time=execution.schedule_time,
            forced=execution.forced,
            retry=flight.retry,
            status=answer.status,
            body=answer.json_body(),
            error=answer.error,
            deadline_exceeded=deadline_exceeded,
        )
        self._attempts.append(attempt)
        del self._attempts[:-_KEPT_ATTEMPTS]
        return attempt

    def _skip_to_after(self, fired: datetime, now: datetime) -> datetime | None:
        """The first scheduled time after `now`, noting the ones in (fired, now] as skipped."""
        following = self._timetable.next_after(fired)
        while following is not None and following <= now:
            self._skipped.append(following)
            del self._skipped[:-_KEPT_ATTEMPTS]
            following = self._timetable.next_after(following)
        return following

    def _next_wake(self) -> datetime | None:
        times: list[datetime] = []
        if self._scheduled is None and self._next_fire is not None:
            times.append(self._next_fire)
        for execution in self._executions():
            if execution.attempt is not None:
                times.append(execution.attempt.deadline)
            elif execution.waiting:
                times.append(execution.start_at)
        return min(times, default=None)

    def _report(self, attempt: Attempt) -> None:
        if not attempt.succeeded:
            logger.warning(
                "attempt %d (%s) failed: %s %s",
                attempt.number,
                self.job.job_id,
                attempt.status,
                attempt.error[:200],
            )
        if self.on_attempt is not None:
            self.on_attempt(attempt)


def _over(execution: _Execution) -> bool:
    return execution.attempt is None and not execution.waiting
