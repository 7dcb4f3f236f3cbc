"""`Housekeeping`: when this instance last did a run's housekeeping (the rescuer, the backlog
counts, the scan_runs record), and the backlog it measured then.

With `JOBS_SCAN_HOUSEKEEPING_INTERVAL_S` above 0, a run that finds nothing due does its
housekeeping only when that long has passed since this instance last did (and on its first
run), so an idle run bills 2 reads: the control document and the empty claim query. Such a
run reports the last measured backlog with nothing due (its claim query just said so): stuck
claims and stale enqueued jobs appear through work a run claimed, and any run that claims
measures again; a crashed worker's lease waits for the next housekeeping, at most the
interval. 0 (the default) keeps housekeeping on every run.
"""

from __future__ import annotations

import dataclasses
import threading
from datetime import datetime, timedelta

from services.scan.summary import Backlog


class Housekeeping:
    """Thread-safe: overlapping runs of one Scanner share it."""

    def __init__(self, interval_s: float) -> None:
        self._interval = timedelta(seconds=interval_s)
        self._last: datetime | None = None
        self._backlog = Backlog()
        self._lock = threading.Lock()

    def due(self, now: datetime) -> bool:
        """Whether a run starting at `now` must do its housekeeping whatever it finds."""
        with self._lock:
            return (
                self._interval <= timedelta(0)
                or self._last is None
                or now - self._last >= self._interval
                or now < self._last  # the clock went back: do not trust the gap
            )

    def done(self, at: datetime, backlog: Backlog) -> None:
        with self._lock:
            self._last = at
            self._backlog = backlog

    @property
    def idle_backlog(self) -> Backlog:
        """The last measured backlog, with nothing due."""
        with self._lock:
            return dataclasses.replace(self._backlog, due_count=0, oldest_overdue_age_s=0.0)
