"""Forecasts: how many deferred jobs fall due in each window of a horizon, per action.

The calendar's counts (services/jobs/forecast.py draws the budgets and marks the windows over
them). Every figure is a count aggregation, never a streamed document: one per action per
window (per shard with JOBS_SHARDS > 1), plus one per action for the jobs already overdue, all
at the first count's read time so a job moving mid-way is counted once. Each bills at least
one read, plus one per 1,000 index entries it counts
(https://firebase.google.com/docs/firestore/pricing#aggregation_queries): a 30-day hourly
calendar of A actions bills 721 x A reads plus one per 1,000 pending jobs in the horizon.
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
        concurrently at one read time."""
        names = list(dict.fromkeys(actions))
        if not names or not found:
            return DueCounts({a: () for a in names}, {a: 0 for a in names}, 0)
        first = found[0]
        tasks: list[tuple[str, int, Part]] = [
            (action, i, shard)
            for action in names
            for i in range(-1, len(found))  # -1: overdue, before the first window
            for shard in self._docs.read_parts
        ]

        def count(task: tuple[str, int, Part], read_time: Any) -> int:
            action, i, shard = task
            if i < 0:
                spec = due_window_query(None, first.start, action, shard)
            else:
                spec = due_window_query(found[i].start, found[i].end, action, shard)
            return self._docs.count(spec, read_time=read_time)

        with store_errors():
            # The first count fixes the read time every other count answers at.
            head, *rest = tasks
            action, i, shard = head
            first_count, read_time = self._docs.count_at(
                due_window_query(None, first.start, action, shard)
            )
            counted = [first_count, *fan_out(rest, lambda task: count(task, read_time))]
        per_window = {a: [0] * len(found) for a in names}
        overdue = dict.fromkeys(names, 0)
        for (action, i, _), n in zip(tasks, counted, strict=True):
            if i < 0:
                overdue[action] += n
            else:
                per_window[action][i] += n
        return DueCounts(
            {a: tuple(v) for a, v in per_window.items()}, overdue, count_reads(counted)
        )
