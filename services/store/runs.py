"""The `scan_runs` collection: one document per scan run, kept for a while (TTL on expire_at).

The scan writes a run's counts, duration, stop reason and the IDs whose publish failed; the
operator CLI reads them back to see the drain rate after a pause. Document ID = run ID. A run
that failed (the scan answered 500 or 503) also carries its `failure`: the status, an error kind
and a bounded message; the scan's HTTP entry point writes it, best effort (when Firestore itself
is down that write fails too, and the scan's log line is the only record).
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

# A failure's message is an exception's text (a gRPC status can carry a long debug string);
# the run document keeps its head.
MAX_FAILURE_MESSAGE = 500


class RunLogError(Exception):
    """The scan run log could not be read or written."""


@dataclass(frozen=True)
class RunFailure:
    """Why a run failed: the HTTP status the scan answered, an error kind (`firestore_unavailable`,
    `firestore_refused`, `pubsub_unavailable`, `crashed`) and the error's message, bounded."""

    status: int
    kind: str
    message: str

    @classmethod
    def of(cls, status: int, kind: str, message: str) -> RunFailure:
        return cls(status, kind, bounded(message, MAX_FAILURE_MESSAGE))

    def to_document(self) -> dict[str, Any]:
        return {"status": self.status, "kind": self.kind, "message": self.message}

    @classmethod
    def from_document(cls, data: Mapping[str, Any]) -> RunFailure:
        return cls.of(int(data["status"]), str(data["kind"]), str(data.get("message", "")))


def bounded(text: str, limit: int) -> str:
    """`text`, cut to at most `limit` characters with an ellipsis when it was longer."""
    return text if len(text) <= limit else text[: limit - 1] + "…"


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
    # Non-terminal records no shard query reaches, and whether JOBS_SHARDS differs from the
    # shard layout the records were written for (services/jobs/layout.py).
    shard_stranded: int = 0
    shard_layout_mismatch: bool = False
    failure: RunFailure | None = None  # set when the scan answered 500 or 503 for this run
    mode: str = "one-pass"  # one-pass or paced (docs/scan.md, "Modes")
    partition: int = 0  # the partition whose shards the run claimed
    rate_per_s: float = 0.0  # a paced run's claim rate (0: one-pass, as fast as it goes)
    note: str = ""  # why an overlap or duplicate claimed nothing
    execution: str | None = None  # the Cloud Scheduler execution (job@schedule time), if any
    # Per claim lane (services/jobs/lanes.py): an action with a rate, a paused action, or "*"
    # (the rest) -> claimed, budget, rate_per_s, stopped_because, paused_until. Empty for a run
    # without lanes (no action has a rate and none is paused).
    lanes: Mapping[str, Mapping[str, Any]] = field(default_factory=dict)

    @property
    def actions_paused(self) -> int:
        """How many actions' claims a dependency's Retry-After held back in this run."""
        return sum(1 for lane in self.lanes.values() if lane.get("paused_until"))

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
            "shard_stranded": self.shard_stranded,
            "shard_layout_mismatch": self.shard_layout_mismatch,
            "drain_rate_per_s": self.drain_rate_per_s,
            "failed_ids": list(self.failed_ids[:MAX_FAILED_IDS]),
            "failed_ids_truncated": len(self.failed_ids) > MAX_FAILED_IDS,
            "failure": self.failure.to_document() if self.failure else None,
            "mode": self.mode,
            "partition": self.partition,
            "rate_per_s": self.rate_per_s,
            "note": self.note,
            "execution": self.execution,
            "lanes": {key: dict(lane) for key, lane in self.lanes.items()},
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
            shard_stranded=int(data.get("shard_stranded") or 0),
            shard_layout_mismatch=bool(data.get("shard_layout_mismatch", False)),
            failure=RunFailure.from_document(failure) if (failure := data.get("failure")) else None,
            mode=str(data.get("mode") or "one-pass"),
            partition=int(data.get("partition") or 0),
            rate_per_s=float(data.get("rate_per_s") or 0.0),
            note=str(data.get("note") or ""),
            execution=str(execution) if (execution := data.get("execution")) else None,
            lanes=_lanes(data.get("lanes")),
        )


class ScanRunLog:
    """Writes and reads `scan_runs` documents with a `google.cloud.firestore.Client`.

    `timeout_s` bounds each write (each attempt, and its retries to twice that), so recording a
    failed run while Firestore is down cannot hold the scan's answer for the client's minute.
    """

    def __init__(
        self,
        client: Any,
        *,
        retention: timedelta,
        collection: str = schema.SCAN_RUNS,
        timeout_s: float | None = None,
    ) -> None:
        if retention <= timedelta(0):
            raise ValueError(f"retention must be positive, got {retention}")
        self._client = client
        self._retention = retention
        self._collection = collection
        self._bounds: dict[str, Any] = {}
        if timeout_s is not None:
            from services.store.bounds import CallBounds

            # A set is idempotent, so the read bounds' retry of transient errors is safe here.
            self._bounds = CallBounds(timeout_s).kwargs

    def record(self, run: ScanRun) -> None:
        """Write (or overwrite) the document of `run`."""
        doc = self._client.collection(self._collection).document(run.run_id)
        try:
            doc.set(run.to_document(self._retention), **self._bounds)
        except gexc.GoogleAPIError as exc:  # a call's error, or RetryError once bounds run out
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


def _lanes(data: Any) -> dict[str, dict[str, Any]]:
    """The stored lanes; anything malformed is left out (an old document has none)."""
    if not isinstance(data, Mapping):
        return {}
    lanes: dict[str, dict[str, Any]] = {}
    for key, lane in data.items():
        if not isinstance(lane, Mapping):
            continue
        until = lane.get("paused_until")
        rate = lane.get("rate_per_s")
        lanes[str(key)] = {
            "claimed": int(lane.get("claimed") or 0),
            "budget": int(lane.get("budget") or 0),
            "rate_per_s": float(rate) if isinstance(rate, int | float) else None,
            "stopped_because": str(lane.get("stopped_because") or ""),
            "paused_until": _utc(until) if isinstance(until, datetime) else None,
        }
    return lanes


def _utc(value: datetime) -> datetime:
    return value if value.tzinfo else value.replace(tzinfo=UTC)
