"""The `Deadline` an action works against, and the `Heartbeat` that keeps the lease behind it.

An action checks `request.deadline.reached()` between units of work (the media action: between
objects) and, when it is reached, stops and reports what it finished (`Interrupted`). The
deadline is the earliest of: the lease's end minus a margin (moved on by every heartbeat), the
delivery's own limit (below Cloud Run's request timeout, which answers the caller but does not
stop the thread: https://cloud.google.com/run/docs/configuring/request-timeout), and at once
when a heartbeat finds a cancel request or that the lease is no longer this delivery's.

The heartbeat extends the lease by compare-and-set on the lease token every lease/3, from a
background thread and from every deadline check, so a lease is lost only when the worker
stops heartbeating (crashed, hung, or cut off from Firestore for two thirds of a lease).

The background thread is started by a `HeartbeatStarter` once the action has run one poll
interval (lease/6): its first check comes at lease/3 either way, when the first beat is due,
and the actions that end sooner (nearly all: a delete takes milliseconds) never start and
join a thread of their own, which was a measurable share of the worker's CPU per job.
"""

from __future__ import annotations

import itertools
import logging
import threading
import time
from collections.abc import Callable, Mapping
from datetime import datetime, timedelta
from typing import TYPE_CHECKING, Any, TypeVar

from services.jobs.clock import Clock
from services.jobs.errors import (
    JobsError,
    LeaseLost,
    PermanentError,
    TransientError,
    ValidationError,
)
from services.jobs.parts import Lease
from services.jobs.record import Job

if TYPE_CHECKING:
    from services.store.job_store import FirestoreJobStore

logger = logging.getLogger(__name__)

T = TypeVar("T")

# The lease is extended every lease / HEARTBEATS_PER_LEASE: two beats can fail before it lapses.
HEARTBEATS_PER_LEASE = 3

# A failed beat is retried after this, doubling with each failure in a row (up to a beat interval).
FIRST_RETRY = timedelta(seconds=1)

STOP_DEADLINE = "deadline"
STOP_CANCEL = "cancel_requested"
STOP_LEASE_LOST = "lease_lost"


class Deadline:
    """When the current action must stop between units of work. Thread-safe."""

    def __init__(
        self,
        clock: Clock,
        stop_at: datetime,
        *,
        beat: Callable[[], None] | None = None,
    ) -> None:
        self._clock = clock
        self._stop_at = stop_at
        self._beat = beat
        self._why: str | None = None
        self._lock = threading.Lock()

    def reached(self) -> bool:
        """Whether the action must stop now; heartbeats first when one is due."""
        if self._beat is not None:
            self._beat()
        with self._lock:
            if self._why is None and self._clock.now() >= self._stop_at:
                self._why = STOP_DEADLINE
            return self._why is not None

    @property
    def why(self) -> str | None:
        """deadline, cancel_requested or lease_lost once reached; None before."""
        with self._lock:
            return self._why

    @property
    def stop_at(self) -> datetime:
        with self._lock:
            return self._stop_at

    def move(self, stop_at: datetime) -> None:
        with self._lock:
            self._stop_at = stop_at

    def stop(self, why: str) -> None:
        with self._lock:
            self._why = self._why or why


class Heartbeat:
    """Keeps one delivery's lease while its action runs, and moves its deadline along."""

    def __init__(
        self,
        store: FirestoreJobStore,
        clock: Clock,
        job: Job,
        *,
        lease: timedelta,
        margin: timedelta,
        delivery_until: datetime,
    ) -> None:
        current = job.lease
        if current is None:
            raise ValueError(f"job {job.job_id!r} has no lease to keep")
        self._store = store
        self._clock = clock
        self._lease = current
        self._job = job
        self._duration = lease
        self._every = lease / HEARTBEATS_PER_LEASE
        self._margin = margin
        self._delivery_until = delivery_until
        self._next_beat = clock.now() + self._every
        self._lock = threading.Lock()
        self._done = threading.Event()
        self._thread: threading.Thread | None = None
        self._withdraw: Callable[[], None] | None = None
        self.beats = 0
        self.progress_writes = 0
        self._failures = 0  # failed beats in a row
        self.deadline = Deadline(clock, self._stop_at(current.until), beat=self.beat_if_due)
        if job.cancel_requested is not None:
            self.deadline.stop(STOP_CANCEL)

    @property
    def lease(self) -> Lease:
        with self._lock:
            return self._lease

    @property
    def job(self) -> Job:
        """The job as this delivery last wrote it (start, or the latest heartbeat)."""
        with self._lock:
            return self._job

    def _stop_at(self, lease_until: datetime) -> datetime:
        return min(lease_until - self._margin, self._delivery_until)

    def beat_if_due(self) -> None:
        """Extend the lease when a beat is due; never raises."""
        with self._lock:
            if self._done.is_set() or self._clock.now() < self._next_beat:
                return
            self._beat()

    def _beat(self) -> None:
        try:
            job = self._store.extend_lease(self._lease, self._duration)
        except LeaseLost as exc:
            logger.warning("heartbeat: lease lost: %s", exc)
            self.deadline.stop(STOP_LEASE_LOST)
            self._done.set()
            return
        except JobsError as exc:
            # The deadline does not move, so the action stops before the lease lapses. Retried
            # after 1 s, 2 s, 4 s ... (never more than a beat interval apart): an outage gets
            # a quick retry, while a refusal that persists (a shared key another job holds:
            # LeaseHeld) is not asked again every second for the rest of the lease.
            self._failures += 1
            wait = min(self._every, FIRST_RETRY * 2 ** (self._failures - 1))
            logger.warning("heartbeat failed, will retry in %s: %s", wait, exc)
            self._next_beat = self._clock.now() + wait
            return
        self._failures = 0
        self.beats += 1
        if job.lease is not None:
            self._lease = job.lease
            self._job = job
            self.deadline.move(self._stop_at(job.lease.until))
        if job.cancel_requested is not None:
            self.deadline.stop(STOP_CANCEL)
        self._next_beat = self._clock.now() + self._every

    def save_progress(self, progress: Mapping[str, Any]) -> None:
        """The action's write-ahead (`ActionRequest.record_progress`): write `progress` under
        this delivery's lease, the delivery going on (the store's `save_progress`, a
        compare-and-set on the job as this delivery last wrote it). No beat races it, and the
        job it returns is the basis of the next beat and of the outcome. Raises LeaseLost when
        the lease moved on (the deadline stops too), TransientError when Firestore did not
        answer or was contended (nothing may be acted on: it may not be recorded),
        PermanentError for progress the store would not keep whole."""
        with self._lock:
            if self.deadline.why == STOP_LEASE_LOST:
                raise LeaseLost(
                    self._lease.job_id, self._lease.owner, None, "the lease was lost mid-action"
                )
            try:
                job = self._store.save_progress(self._lease, progress, basis=self._job)
            except LeaseLost:
                self.deadline.stop(STOP_LEASE_LOST)
                self._done.set()
                raise
            except ValidationError as exc:
                raise PermanentError(f"the action's progress cannot be recorded: {exc}") from exc
            except JobsError as exc:
                raise TransientError(
                    f"progress not recorded ({type(exc).__name__}); not acting on it"
                ) from exc
            self.progress_writes += 1
            self._job = job
            if job.lease is not None:
                self._lease = job.lease
            if job.cancel_requested is not None:
                self.deadline.stop(STOP_CANCEL)

    def start(self, poll_s: float) -> Heartbeat:
        """Beat from a background thread too, checking every `poll_s` real seconds (nothing
        once stopped: the starter may get here after the action ended)."""

        def loop() -> None:
            while not self._done.wait(poll_s):
                self.beat_if_due()

        with self._lock:
            if self._done.is_set() or self._thread is not None:
                return self
            self._thread = threading.Thread(target=loop, name="lease-heartbeat", daemon=True)
            self._thread.start()
        return self

    def start_later(self, starter: HeartbeatStarter) -> Heartbeat:
        """`start` from `starter`'s thread once its delay has passed, unless stopped first."""
        self._withdraw = starter.add(self)
        return self

    def write_outcome(self, write: Callable[[], T]) -> T:
        """Run `write` (the delivery's outcome) with no beat racing it; once it returns the
        lease is ended, so no beat follows. When it raises, beats go on (the caller retries
        inside the lease this heartbeat keeps)."""
        with self._lock:
            done = write()
            self._done.set()
        return done

    def stop(self) -> None:
        """No beat after this returns (the outcome is written, or the delivery gives up)."""
        with self._lock:
            self._done.set()
            thread = self._thread
        if self._withdraw is not None:
            self._withdraw()
        if thread is not None:
            thread.join()


class HeartbeatStarter:
    """Starts each added heartbeat's thread (`Heartbeat.start(poll_s)`) `poll_s` real seconds
    after it was added, unless it was stopped (withdrawn) before. One thread for all, started
    with the first heartbeat added; it never calls Firestore, so one slow beat cannot delay
    another heartbeat's: each beats from its own thread, as before."""

    def __init__(self, poll_s: float, *, clock: Callable[[], float] = time.monotonic) -> None:
        if not poll_s > 0:
            raise ValueError("poll_s must be positive")
        self._poll_s = poll_s
        self._clock = clock
        self._keys = itertools.count()
        # Insertion order is due order: every entry waits the same poll_s.
        self._pending: dict[int, tuple[float, Heartbeat]] = {}
        self._changed = threading.Condition(threading.Lock())
        self._thread: threading.Thread | None = None

    def add(self, heartbeat: Heartbeat) -> Callable[[], None]:
        """Schedule `heartbeat`'s thread; the returned function withdraws it."""
        # No wake-up: the starter never waits past poll_s from when it last looked, and an
        # entry added since is due later than that (waking it per job cost a thread switch).
        with self._changed:
            key = next(self._keys)
            self._pending[key] = (self._clock() + self._poll_s, heartbeat)
            if self._thread is None:
                self._thread = threading.Thread(
                    target=self._run, name="lease-heartbeat-starter", daemon=True
                )
                self._thread.start()
        return lambda: self._discard(key)

    @property
    def pending(self) -> int:
        """Heartbeats added and neither started nor withdrawn yet."""
        with self._changed:
            return len(self._pending)

    def _discard(self, key: int) -> None:
        with self._changed:
            self._pending.pop(key, None)

    def _run(self) -> None:
        while True:
            heartbeat = self._next_due()
            heartbeat.start(self._poll_s)

    def _next_due(self) -> Heartbeat:
        with self._changed:
            while True:
                if not self._pending:
                    self._changed.wait(self._poll_s)
                    continue
                key, (due, heartbeat) = next(iter(self._pending.items()))
                wait = due - self._clock()
                if wait <= 0:
                    del self._pending[key]
                    return heartbeat
                self._changed.wait(wait)
