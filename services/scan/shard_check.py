"""The `ShardCheck`: whether the job records are laid out for this deployment's JOBS_SHARDS, and
how many non-terminal records no shard query reaches (services/jobs/layout.py).

Every run compares JOBS_SHARDS with the shard layout in the control document it has just read
(no read of its own): a difference at N > 1 means the shard count changed without
`jobsctl backfill-shards` for it. The scan does not refuse to run then: it keeps claiming every
record its queries reach (refusing would strand those too, and a revision that refused to start
would leave the api and worker on the new N and the scan on the old one). It reports instead,
every run until the backfill for N has recorded N: an ERROR line (event `shard_layout`), the
`shard_layout_mismatch` gauge and its alert, the run summary, `jobsctl stats` and `watch`.

The records out of reach are counted at housekeeping (`JOBS_SCAN_HOUSEKEEPING_INTERVAL_S`),
with N > 1: shard >= N by one count aggregation (1 read when there are none); while the control
document has no layout yet, exactly (every record outside 0..N-1, without a shard too: a read
per 1,000 non-terminal records), and once that census finds none the scan records N as the
layout (`adopted`). With N = 1 nothing is ever out of reach and the scan records layout 1 at
its first housekeeping, so a later change to N > 1 without the backfill is reported. Runs
between housekeepings repeat the figure the last housekeeping measured (kept in its mark).
"""

from __future__ import annotations

import dataclasses
import logging
from dataclasses import dataclass
from datetime import datetime
from typing import TYPE_CHECKING

from services.jobs import errors
from services.jobs.control import Control, HousekeepingMark
from services.jobs.layout import ShardLayout
from services.scan.errors import StoreRefused, StoreUnreachable
from services.scan.summary import RunBacklog
from services.telemetry.metrics import EVENT_SHARD_LAYOUT, LOG_EVENT

if TYPE_CHECKING:
    from services.store.job_store import FirestoreJobStore

logger = logging.getLogger(__name__)

# Who the scan's adopted layout names as its author.
ADOPTED_BY = "scan"


@dataclass(frozen=True)
class ShardFigures:
    """What one run reports: records out of reach, whether the layout differs from (or, with
    records out of reach, is not known for) JOBS_SHARDS, and that last unknown case."""

    stranded: int = 0
    mismatch: bool = False
    unknown: bool = False


class ShardCheck:
    """Stateless over the control document, so overlapping runs and instances agree."""

    def __init__(self, store: FirestoreJobStore, shards: int) -> None:
        self._store = store
        self._shards = shards

    def figures(
        self, control: Control, now: datetime, *, census: bool, last: HousekeepingMark | None
    ) -> ShardFigures:
        """This run's figures: a census (and, without a layout, its adoption) when `census`
        (a housekeeping run), else the last housekeeping's count with today's comparison."""
        layout = control.shard_layout
        if census:
            try:
                layout, found = self._census(layout, now)
            except errors.StoreUnavailable as exc:
                raise StoreUnreachable(f"cannot take the shard census: {exc}") from exc
            except errors.StoreRejected as exc:
                raise StoreRefused(f"cannot take the shard census: {exc}") from exc
        else:
            figures = last.backlog if last is not None else {}
            found = ShardFigures(
                stranded=int(figures.get("shard_stranded", 0)),
                unknown=layout is None and bool(figures.get("shard_layout_unknown", 0)),
            )
        mismatch = layout.mismatch(self._shards) if layout is not None else found.unknown
        result = dataclasses.replace(found, mismatch=mismatch)
        self._report(result, layout)
        return result

    @staticmethod
    def apply(backlog: RunBacklog, figures: ShardFigures) -> RunBacklog:
        return dataclasses.replace(
            backlog, shard_stranded=figures.stranded, shard_layout_mismatch=figures.mismatch
        )

    def _census(
        self, layout: ShardLayout | None, now: datetime
    ) -> tuple[ShardLayout | None, ShardFigures]:
        if self._shards == 1:
            # Nothing is out of reach at N = 1: no query, only the layout recorded once.
            if layout is None:
                layout = self._adopt(now)
            return layout, ShardFigures()
        if layout is not None:
            return layout, ShardFigures(self._store.shard_census(exact=False).out_of_range)
        census = self._store.shard_census(exact=True)
        if census.stranded:
            return None, ShardFigures(census.stranded, unknown=True)
        return self._adopt(now), ShardFigures()

    def _adopt(self, now: datetime) -> ShardLayout:
        stored = self._store.adopt_shard_layout(
            ShardLayout(self._shards, now, ADOPTED_BY, "adopted")
        )
        if stored.source == "adopted" and stored.at == now:
            logger.info(
                "recorded the shard layout: %s shard(s)",
                self._shards,
                extra={"fields": {"reason": "shard_layout_adopted", "shards": self._shards}},
            )
        return stored

    def _report(self, figures: ShardFigures, layout: ShardLayout | None) -> None:
        if not (figures.mismatch or figures.stranded):
            return
        if layout is not None and figures.mismatch:
            why = layout.describe(self._shards)
        elif figures.unknown:
            why = (
                f"no shard layout recorded and {figures.stranded:,} non-terminal job(s) outside "
                f"shards 0-{self._shards - 1}: run `jobsctl backfill-shards --shards "
                f"{self._shards} --apply`"
            )
        else:
            why = (
                f"{figures.stranded:,} non-terminal job(s) with shard >= JOBS_SHARDS="
                f"{self._shards}: run `jobsctl backfill-shards --shards {self._shards} --apply`"
            )
        # Every run until fixed: these jobs are never claimed, reclaimed or counted otherwise.
        logger.error(
            "job records out of the shard queries' reach: %s",
            why,
            extra={
                "fields": {
                    LOG_EVENT: EVENT_SHARD_LAYOUT,
                    "shards": self._shards,
                    "layout_shards": layout.shards if layout is not None else None,
                    "shard_stranded": figures.stranded,
                    "shard_layout_mismatch": figures.mismatch,
                }
            },
        )
