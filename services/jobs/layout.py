"""The `ShardLayout`: the shard count the non-terminal job records were last written for, kept in
the control document, and the `ShardCensus` that says how many of them the shard queries reach.

With N > 1 every timestamp query names its shards (`shard == k` or `shard in [...]`), so a
non-terminal record whose `shard` is missing, or is >= N, is never claimed, reclaimed or counted
(docs/capacity.md, "Changing the shard count"). Firestore cannot query for a missing field, and
counting the records that lack one costs a read per 1,000 non-terminal records, so the scan
does not count them every run. It compares instead, every run and at no extra read, the
deployment's `JOBS_SHARDS` with this layout, which lives in the control document the scan
reads first anyway:

- `jobsctl backfill-shards --shards N --apply` records N (source `backfill`) once a pass has
  given every non-terminal record shard_of(id, N);
- the scan records its own N (source `adopted`) when the document has none: at N = 1 at once
  (the unsharded queries find every record), at N > 1 only once an exact census found every
  non-terminal record within 0..N-1.

A layout that differs from JOBS_SHARDS (at N > 1) means the shard count changed without the
backfill: the scan logs an ERROR every run and reports it as a gauge until a backfill for N
records N. Records with shard >= N, which that change (or a record written by a revision still
running the old N) leaves out of reach, are counted exactly by an index-backed query at every
housekeeping (`ShardCensus.out_of_range`).
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any, Literal

from services.jobs.shard import MAX_SHARDS

logger = logging.getLogger(__name__)

# The control document's map holding the layout (written by the backfill or the scan, never
# by an operator's `jobsctl control set`).
LAYOUT_FIELD = "shard_layout"

Source = Literal["backfill", "adopted"]
SOURCES: tuple[Source, ...] = ("backfill", "adopted")


@dataclass(frozen=True)
class ShardLayout:
    """Every non-terminal record had shard = shard_of(id, `shards`) at `at` (`backfill`), or
    was found within 0..shards-1 when the scan first recorded it (`adopted`)."""

    shards: int
    at: datetime
    by: str
    source: Source

    def to_document(self) -> dict[str, Any]:
        return {"shards": self.shards, "at": self.at, "by": self.by, "source": self.source}

    @classmethod
    def from_document(cls, data: Any) -> ShardLayout | None:
        """The stored layout, or None when absent. A malformed one is logged and read as
        absent: the scan then takes a census before it records a layout again (the safe side)."""
        if data is None:
            return None
        fields = data if isinstance(data, Mapping) else {}
        shards, at = fields.get("shards"), fields.get("at")
        source = fields.get("source")
        if (
            type(shards) is not int
            or not 1 <= shards <= MAX_SHARDS
            or not isinstance(at, datetime)
            or at.tzinfo is None
            or source not in SOURCES
        ):
            logger.error(
                "control document: %s is malformed; the scan takes a shard census",
                LAYOUT_FIELD,
                extra={"fields": {"event": "control_invalid", "setting": LAYOUT_FIELD}},
            )
            return None
        return cls(shards, at.astimezone(UTC), str(fields.get("by") or ""), source)

    def mismatch(self, shards: int) -> bool:
        """Whether a deployment with `shards` shards is running on records laid out for
        another count. At N = 1 nothing is ever out of reach (the unsharded queries name no
        shard), so there is no mismatch."""
        return shards > 1 and self.shards != shards

    def describe(self, shards: int) -> str:
        """One line for the ERROR log, `jobsctl stats` and `watch`."""
        if not self.mismatch(shards):
            return f"{self.shards} ({self.source} {self.at:%Y-%m-%d %H:%M}Z by {self.by})"
        return (
            f"records laid out for {self.shards} shard(s) ({self.source} "
            f"{self.at:%Y-%m-%d %H:%M}Z by {self.by}) but JOBS_SHARDS={shards}: "
            f"run `jobsctl backfill-shards --shards {shards} --apply`"
        )


@dataclass(frozen=True)
class ShardCensus:
    """Non-terminal records the shard queries of a deployment with `shards` shards miss.

    `out_of_range`: a numeric `shard` >= N (left by a lower N without the backfill, or written
    by a revision still on a higher N); one count aggregation, 1 read when there are none.
    `unreachable`: every non-terminal record outside 0..N-1 (out of range, without `shard`, a
    negative or non-numeric one), as the difference of two exact counts (every non-terminal
    record, and those with 0 <= shard < N); None when not taken (it bills a read per 1,000
    non-terminal records). At N = 1 both are 0 (no query names a shard)."""

    shards: int
    out_of_range: int
    unreachable: int | None = None

    @property
    def without_shard(self) -> int | None:
        """Unreachable records with no (or no numeric, or a negative) shard."""
        if self.unreachable is None:
            return None
        return max(self.unreachable - self.out_of_range, 0)

    @property
    def stranded(self) -> int:
        """The figure the gauge reports: every unreachable record counted."""
        return self.out_of_range if self.unreachable is None else self.unreachable


def mismatched(layout: ShardLayout | None, shards: int, stranded: int) -> bool:
    """What the `shard_layout_mismatch` gauge says: the layout differs from JOBS_SHARDS, or
    none is recorded while records are out of reach (at N = 1 never)."""
    if shards == 1:
        return False
    return layout.mismatch(shards) if layout is not None else stranded > 0


def layout_line(layout: ShardLayout | None, shards: int) -> str:
    """The layout as `jobsctl stats` and `watch` print it."""
    if layout is None:
        return (
            "not recorded (the scan records it at its next housekeeping when no record is out "
            "of reach; `jobsctl backfill-shards --apply` records it)"
        )
    return layout.describe(shards)
