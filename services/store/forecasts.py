"""Forecasts: how many deferred jobs fall due in each window of a horizon, per action.

The calendar's counts (services/jobs/forecast.py draws the budgets and marks the windows over
them). Every figure is a count aggregation, never a streamed document: one per action per
window (per shard with JOBS_SHARDS > 1), plus one per action for the jobs already overdue. They
are not read at one snapshot (unlike `stats`): the windows are disjoint, so only a job
rescheduled while the page is counted can land in two windows or none, which a forecast
tolerates; and a count at a read time is what the built-in emulator answers by running the
whole query (113 ms against 11 ms for one hour's count among 20,000 jobs), which would make
`make run`'s calendar crawl. Each bills at least
one read, plus one per 1,000 index entries it counts
(https://firebase.google.com/docs/firestore/pricing#aggregation_queries). Past 48 windows the
counts go in two passes (`due_counts`): a 30-day hourly calendar of A actions bills 31 x A
reads, plus 24 per day that holds jobs of an action, plus one per 1,000 jobs counted (twice:
each job is counted in its day and in its hour).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

from services.jobs.forecast import Calendar, Window, calendar_of, count_reads, windows
from services.jobs.shard import Part, fan_out
from services.store.documents import Documents
from services.store.queries import due_window_query
from services.store.transactions import store_errors


@dataclass(frozen=True)
class DueCounts:
    """Per action: jobs due in each window, and jobs already due before the first."""

    per_window: dict[str, tuple[int, ...]]
    overdue: dict[str, int]
    reads: int  # what the counts bill (services/jobs/forecast.py `count_reads`)


# Windows counted together in the first pass (a day of hourly windows).
CHUNK = 24
_Task = tuple[str, int, int, Part]


class Forecasts:
    """The calendar's count aggregations."""

    def __init__(self, docs: Documents) -> None:
        self._docs = docs

    def calendar(
        self,
        now: datetime,
        horizon: timedelta,
        step: str,
        *,
        actions: Sequence[str],
        rates: Mapping[str, float],
        catch_up_rate: float,
    ) -> Calendar:
        """The calendar of `actions` from `now`'s hour (or day) over `horizon`, each held
        against its claim rate (`lanes.claim_rates`) or the catch-up rate: what `jobsctl
        forecast` prints and the console draws. ValidationError naming step or horizon."""
        found = windows(now, horizon, step)
        counts = self.due_counts(actions, found)
        return calendar_of(
            found,
            step,
            counts.per_window,
            rates,
            catch_up_rate,
            overdue=counts.overdue,
            reads=counts.reads,
        )

    def due_counts(self, actions: Sequence[str], found: Sequence[Window]) -> DueCounts:
        """For each of `actions`, the deferred jobs due in each of `found` and those due
        before its first window: count aggregations only (see the module docstring), run
        concurrently. In two passes when there are many windows: first one
        count per span of CHUNK windows (a day of hours), then the windows of the spans that
        hold jobs; an action with nothing due in a day costs one count for it, not 24."""
        names = list(dict.fromkeys(actions))
        if not names or not found:
            return DueCounts({a: () for a in names}, dict.fromkeys(names, 0), 0)
        size = CHUNK if len(found) > 2 * CHUNK else 1
        spans = [(i, min(i + size, len(found))) for i in range(0, len(found), size)]
        # (action, lo, hi, shard): that action's jobs due in windows lo..hi-1 of one shard;
        # lo = -1: those due before the first window (overdue).
        first_pass: list[_Task] = [
            (action, lo, hi, shard)
            for action in names
            for lo, hi in [(-1, 0), *spans]
            for shard in self._docs.read_parts
        ]

        def spec(task: _Task) -> Any:
            action, lo, hi, shard = task
            if lo < 0:
                return due_window_query(None, found[0].start, action, shard)
            return due_window_query(found[lo].start, found[hi - 1].end, action, shard)

        with store_errors():
            counted = fan_out(first_pass, lambda t: self._docs.count(spec(t)))
            per_window = {a: [0] * len(found) for a in names}
            overdue = dict.fromkeys(names, 0)
            second_pass: list[_Task] = []
            for (action, lo, hi, shard), n in zip(first_pass, counted, strict=True):
                if lo < 0:
                    overdue[action] += n
                elif hi - lo == 1:
                    per_window[action][lo] += n
                elif n:  # a span with jobs: count each of its windows
                    second_pass += [(action, i, i + 1, shard) for i in range(lo, hi)]
            windowed = (
                fan_out(second_pass, lambda t: self._docs.count(spec(t))) if second_pass else []
            )
        for (action, lo, _, _), n in zip(second_pass, windowed, strict=True):
            per_window[action][lo] += n
        reads = count_reads(counted) + count_reads(windowed)
        return DueCounts({a: tuple(v) for a, v in per_window.items()}, overdue, reads)
