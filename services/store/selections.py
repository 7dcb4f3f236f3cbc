"""Selections: the jobs an operator's filter matches, counted and paged at one read time.

What a bulk action runs over (services/jobs/bulk.py): `count_matching` is the preview (a count
aggregation when the query alone decides, 1 read per 1,000 matches; otherwise every
candidate the query returns is read and checked, 1 read each), and its read time is where
`matching_page` reads every page, so the pages hold exactly the jobs the preview counted.
Pages go in (due_at, job ID) order with a cursor; with JOBS_SHARDS > 1 one page per shard,
merged. Nothing here writes: the changes are the single-job operations' own.
"""

from __future__ import annotations

from datetime import datetime
from typing import Any

from services.jobs.bulk import JobFilter, MatchPage
from services.jobs.errors import InvalidRecord
from services.jobs.shard import Part, fan_out
from services.store.documents import Documents, decoded
from services.store.merge import merged
from services.store.queries import decode_cursor, encode_cursor, filter_query
from services.store.transactions import store_errors

# Candidates read per request when counting a filter the query cannot decide alone.
_COUNT_PAGE = 1000


class Selections:
    """The operator's filters: the preview count and the pages a bulk action runs over."""

    def __init__(self, docs: Documents) -> None:
        self._docs = docs

    def count_matching(self, job_filter: JobFilter) -> tuple[int, datetime]:
        """How many jobs `job_filter` matches, and the read time that count is at."""
        f = job_filter
        parts = self._docs.read_parts

        def spec(shard: Part) -> Any:
            return filter_query(f.state, f.action, f.due_from, f.due_before, shard=shard)

        with store_errors():
            count, read_time = self._docs.count_at(spec(parts[0]))
            if len(parts) > 1:
                others = fan_out(parts[1:], lambda s: self._docs.count(spec(s), read_time))
                count += sum(others)
            if read_time is None:  # nothing answered a result: an empty collection
                read_time = self._docs.clock.now()
            if f.queried_only:
                return count, read_time
            matched = 0
            cursor: str | None = None
            while True:
                page = self.matching_page(f, read_time=read_time, cursor=cursor, limit=_COUNT_PAGE)
                matched += len(page.jobs)
                if page.next_cursor is None:
                    return matched, read_time
                cursor = page.next_cursor

    def matching_page(
        self, job_filter: JobFilter, *, read_time: datetime | None, cursor: str | None, limit: int
    ) -> MatchPage:
        """The next `limit` documents of `job_filter`'s query after `cursor`, read at
        `read_time` (None: now, for a listing), with those passing the whole filter decoded (a
        record that cannot be decoded is left out: a scan moves it aside)."""
        f = job_filter
        after = decode_cursor(cursor) if cursor else None

        def page(shard: Part) -> list[Any]:
            spec = filter_query(
                f.state,
                f.action,
                f.due_from,
                f.due_before,
                limit=limit + 1,
                after=after,
                shard=shard,
            )
            return list(self._docs.stream(spec, read_time=read_time))

        with store_errors():
            pages = fan_out(self._docs.read_parts, page)
        scanned = sum(len(p) for p in pages)
        snapshots = merged(pages, "due_at", limit + 1)
        more = len(snapshots) > limit
        snapshots = snapshots[:limit]
        jobs = []
        cursors = []
        for snapshot in snapshots:
            try:
                job = decoded(snapshot)
            except InvalidRecord:
                continue
            if f.matches(job):
                jobs.append(job)
                cursors.append(encode_cursor(snapshot.get("due_at"), snapshot.id))
        next_cursor = None
        if more:
            last = snapshots[-1]
            next_cursor = encode_cursor(last.get("due_at"), last.id)
        return MatchPage(tuple(jobs), tuple(cursors), next_cursor, scanned)
