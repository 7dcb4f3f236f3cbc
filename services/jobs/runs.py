"""The `scan_runs` collection: one document per scan run, kept for a while (TTL on expire_at).

The scan writes a run's counts, duration, stop reason and the IDs whose publish failed; the
operator CLI reads them back to see the drain rate after a pause. Document ID = run ID.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from typing import Any

from google.api_core import exceptions as gexc

from services.jobs import schema

logger = logging.getLogger(__name__)

# A run can fail thousands of publishes when Pub/Sub is down; the document keeps a sample
# (the records themselves carry the error), so it stays far below Firestore's 1 MiB limit.
MAX_FAILED_IDS = 100


class RunLogError(Exception):
    """The scan run log could not be read or written."""


@dataclass(frozen=True)
class ScanRun:
    """What one scan run did and saw."""

    run_id: str
    started_at: datetime
    finished_at: datetime
    stopped_because: str
    paused: bool = False
    dry_run: bool = False
    budget: int = 0
    claimed: int = 0
    published: int = 0
    publish_failed: int = 0
    reclaimed: int = 0
    reclaim_contended: bool = False
    due_count: int = 0
    oldest_overdue_age_s: float = 0.0
    stuck_claims: int = 0
    claim_to_enqueue_latency_s: float = 0.0
    failed_ids: tuple[str, ...] = field(default=())
    stale_enqueued: int = 0
    oldest_enqueued_age_s: float = 0.0
    quarantined: int = 0  # undecodable job documents moved aside (failed, invalid_record)

    @property
    def duration_s(self) -> float:
        return max(0.0, (self.finished_at - self.started_at).total_seconds())

    @property
    def drain_rate_per_s(self) -> float:
        """Jobs published per second of this run (0 for a run that took no time)."""
        duration = self.duration_s
        return self.published / duration if duration > 0 else 0.0

    def to_document(self, retention: timedelta) -> dict[str, Any]:
        """The Firestore document; `expire_at` = finished_at + retention (the TTL field)."""
        return {
            "run_id": self.run_id,
            "started_at": self.started_at,
            "finished_at": self.finished_at,
            "duration_s": self.duration_s,
            "stopped_because": self.stopped_because,
            "paused": self.paused,
            "dry_run": self.dry_run,
            "budget": self.budget,
            "claimed": self.claimed,
            "published": self.published,
            "publish_failed": self.publish_failed,
            "reclaimed": self.reclaimed,
            "reclaim_contended": self.reclaim_contended,
            "due_count": self.due_count,
            "oldest_overdue_age_s": self.oldest_overdue_age_s,
            "stuck_claims": self.stuck_claims,
            "claim_to_enqueue_latency_s": self.claim_to_enqueue_latency_s,
            "stale_enqueued": self.stale_enqueued,
            "oldest_enqueued_age_s": self.oldest_enqueued_age_s,
            "quarantined": self.quarantined,
            "drain_rate_per_s": self.drain_rate_per_s,
            "failed_ids": list(self.failed_ids[:MAX_FAILED_IDS]),
            "failed_ids_truncated": len(self.failed_ids) > MAX_FAILED_IDS,
            schema.EXPIRE_AT: self.finished_at + retention,
        }

    @classmethod
    def from_document(cls, data: Mapping[str, Any]) -> ScanRun:
        return cls(
            run_id=str(data["run_id"]),
            started_at=_utc(data["started_at"]),
            finished_at=_utc(data["finished_at"]),
            stopped_because=str(data["stopped_because"]),
            paused=bool(data.get("paused", False)),
            dry_run=bool(data.get("dry_run", False)),
            budget=int(data.get("budget", 0)),
            claimed=int(data.get("claimed", 0)),
            published=int(data.get("published", 0)),
            publish_failed=int(data.get("publish_failed", 0)),
            reclaimed=int(data.get("reclaimed", 0)),
            reclaim_contended=bool(data.get("reclaim_contended", False)),
            due_count=int(data.get("due_count", 0)),
            oldest_overdue_age_s=float(data.get("oldest_overdue_age_s", 0.0)),
            stuck_claims=int(data.get("stuck_claims", 0)),
            claim_to_enqueue_latency_s=float(data.get("claim_to_enqueue_latency_s", 0.0)),
            failed_ids=tuple(str(i) for i in data.get("failed_ids", ())),
            stale_enqueued=int(data.get("stale_enqueued", 0)),
            oldest_enqueued_age_s=float(data.get("oldest_enqueued_age_s", 0.0)),
            quarantined=int(data.get("quarantined", 0)),
        )


class ScanRunLog:
    """Writes and reads `scan_runs` documents with a `google.cloud.firestore.Client`."""

    def __init__(
        self, client: Any, *, retention: timedelta, collection: str = schema.SCAN_RUNS
    ) -> None:
        if retention <= timedelta(0):
            raise ValueError(f"retention must be positive, got {retention}")
        self._client = client
        self._retention = retention
        self._collection = collection

    def record(self, run: ScanRun) -> None:
        """Write (or overwrite) the document of `run`."""
        doc = self._client.collection(self._collection).document(run.run_id)
        try:
            doc.set(run.to_document(self._retention))
        except gexc.GoogleAPICallError as exc:
            raise RunLogError(f"could not record scan run {run.run_id}: {exc}") from exc

    def get(self, run_id: str) -> ScanRun | None:
        try:
            snapshot = self._client.collection(self._collection).document(run_id).get()
        except gexc.GoogleAPICallError as exc:
            raise RunLogError(f"could not read scan run {run_id}: {exc}") from exc
        data = snapshot.to_dict() if snapshot.exists else None
        return ScanRun.from_document(data) if data else None

    def recent(self, limit: int = 20) -> list[ScanRun]:
        """The latest `limit` runs, newest first."""
        from google.cloud import firestore

        query = (
            self._client.collection(self._collection)
            .order_by("started_at", direction=firestore.Query.DESCENDING)
            .limit(limit)
        )
        try:
            return [ScanRun.from_document(s.to_dict() or {}) for s in query.stream()]
        except gexc.GoogleAPICallError as exc:
            raise RunLogError(f"could not list scan runs: {exc}") from exc


def _utc(value: datetime) -> datetime:
    return value if value.tzinfo else value.replace(tzinfo=UTC)
