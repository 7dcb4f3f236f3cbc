"""`Housekeeping`: whether a scan run must do its housekeeping (the reclaimer, the backlog
counts, the scan_runs record and the mark of when it was done), and what an idle run between
housekeepings reports.

A run that finds nothing due bills 4 reads (the control document, the expired-claim and
expired-lease queries of the quick reclaim, and the empty claim query) unless
`JOBS_SCAN_HOUSEKEEPING_INTERVAL_S` has passed since any instance last did its housekeeping.
The mark of that (`HousekeepingMark`) lives in the control document, which every run reads
first anyway, so a cold instance knows it at no extra read, and a run that does its
housekeeping writes it (1 write). Every run takes back expired claims and leases, so a crashed
scan's claim or a dead worker's lease is back within its timeout plus one scan interval; only
the stale-enqueued rescue, the due_at type check, the backlog counts and the shard census
(`shard_check.py`) wait for the interval.
A run that claims or reclaims something always measures the backlog and records itself. 0
keeps housekeeping on every run. An idle run reports the backlog measured at the last
housekeeping, with nothing due (its claim query just said so).
"""

from __future__ import annotations

from collections.abc import Mapping
from datetime import datetime, timedelta

from services.jobs.control import BACKLOG_FIGURES, HousekeepingMark
from services.scan.summary import RunBacklog


class Housekeeping:
    """Stateless over the stored mark, so overlapping runs and instances agree."""

    def __init__(self, interval_s: float) -> None:
        self._interval = timedelta(seconds=interval_s)

    @property
    def spaced(self) -> bool:
        """Whether runs may skip it (an interval is set), so its mark is worth a write."""
        return self._interval > timedelta(0)

    def due(self, now: datetime, last: HousekeepingMark | None) -> bool:
        """Whether a run starting at `now` must do its housekeeping whatever it finds."""
        return (
            not self.spaced
            or last is None
            or now - last.at >= self._interval
            or now < last.at  # the clock went back, or another clock is ahead: do it
        )

    @staticmethod
    def mark(at: datetime, backlog: RunBacklog, layout_unknown: bool = False) -> HousekeepingMark:
        """The mark of a housekeeping at `at`: its backlog figures and shard census
        (services/scan/shard_check.py), which the idle runs after it repeat."""
        measured = {
            "stuck_claims": backlog.stuck_claims,
            "stale_enqueued": backlog.stale_enqueued,
            "oldest_enqueued_age_s": backlog.oldest_enqueued_age_s,
            "shard_stranded": backlog.shard_stranded,
            "shard_layout_unknown": int(layout_unknown),
        }
        return HousekeepingMark(at=at, backlog={name: measured[name] for name in BACKLOG_FIGURES})

    @staticmethod
    def idle_backlog(last: HousekeepingMark | None) -> RunBacklog:
        """The last measured backlog, with nothing due."""
        figures: Mapping[str, float] = last.backlog if last is not None else {}
        return RunBacklog(
            due_count=0,
            oldest_overdue_age_s=0.0,
            stuck_claims=int(figures.get("stuck_claims", 0)),
            stale_enqueued=int(figures.get("stale_enqueued", 0)),
            oldest_enqueued_age_s=float(figures.get("oldest_enqueued_age_s", 0.0)),
            shard_stranded=int(figures.get("shard_stranded", 0)),
        )
