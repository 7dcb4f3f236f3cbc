"""Summarising one scan run: the tally kept while it runs, and the shapes it is reported in.

The same numbers go to four places: the HTTP response, the one log line per run (event
`scan_run`, which the SCAN_RUNS log-based metric counts), the metrics sink, and the
`scan_runs` document. They are all rendered from one `ScanRun` so they cannot disagree.
"""

from __future__ import annotations

import threading
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any, Literal

from services.jobs.lanes import LaneBudget
from services.store.runs import MAX_FAILED_IDS, ScanRun
from services.telemetry import metrics

# budget/time/drained: why claiming stopped; paused/dry_run: nothing was claimed; contention:
# another run held the due records; unavailable: Firestore or Pub/Sub could not be reached;
# overlap: another live run holds this partition's lease, so this one claimed nothing;
# duplicate: this scheduled execution already ran or is running
# (services/store/partition_leases.py).
StopReason = Literal[
    "budget",
    "time",
    "drained",
    "paused",
    "dry_run",
    "contention",
    "unavailable",
    "overlap",
    "duplicate",
    "clock_skew",
]
STOP_REASONS: tuple[StopReason, ...] = (
    "budget",
    "time",
    "drained",
    "paused",
    "dry_run",
    "contention",
    "unavailable",
    "overlap",
    "duplicate",
    "clock_skew",
)


@dataclass(frozen=True)
class RunBacklog:
    """What the store reported about due and stuck work at the end of the run."""

    due_count: int = 0
    oldest_overdue_age_s: float = 0.0
    stuck_claims: int = 0
    stale_enqueued: int = 0
    oldest_enqueued_age_s: float = 0.0
    # The shard check (services/scan/shard_check.py): non-terminal records no shard query
    # reaches, and whether JOBS_SHARDS differs from the records' layout.
    shard_stranded: int = 0
    shard_layout_mismatch: bool = False


@dataclass
class RunTally:
    """Counts a run accumulates; publish outcomes may be recorded from several threads."""

    claimed: int = 0
    published: int = 0
    publish_failed: int = 0
    reclaimed: int = 0
    # Published, but the record had moved on (reclaimed and re-claimed) before we marked it:
    # the worker will drop the message as stale. Counted so it is visible, never hidden.
    mark_lost: int = 0
    # reclaim_expired lost a race with another run's reclaimer; this run claimed anyway.
    reclaim_contended: bool = False
    claim_to_enqueue_latency_s: float = 0.0
    failed_ids: list[str] = field(default_factory=list)
    # Undecodable job documents this run moved aside (claim, mark, reclaim or due_at check).
    quarantined_ids: set[str] = field(default_factory=set)
    # Per claim lane (services/jobs/lanes.py), when the run has lanes: its budget, rate,
    # pause, claims and stop reason (empty: one lane, every due job, as before lanes).
    lanes: dict[str, dict[str, Any]] = field(default_factory=dict)
    _lock: threading.Lock = field(default_factory=threading.Lock, repr=False)

    def add_claimed(self, count: int, lane: str | None = None) -> None:
        with self._lock:
            self.claimed += count
            if lane is not None and lane in self.lanes:
                self.lanes[lane]["claimed"] += count

    def add_lane(self, lane: LaneBudget) -> None:
        with self._lock:
            self.lanes[lane.key] = {
                "claimed": 0,
                "budget": lane.limit,
                "rate_per_s": lane.rate_per_s,
                "paused_until": lane.paused_until,
                "stopped_because": "paused" if lane.paused else "",
            }

    def lane_stopped(self, lane: str, reason: str) -> None:
        with self._lock:
            if lane in self.lanes:
                self.lanes[lane]["stopped_because"] = reason

    def add_published(self, latency_s: float) -> None:
        with self._lock:
            self.published += 1
            self.claim_to_enqueue_latency_s = max(self.claim_to_enqueue_latency_s, latency_s)

    def add_failed(self, job_id: str) -> None:
        with self._lock:
            self.publish_failed += 1
            if len(self.failed_ids) < MAX_FAILED_IDS:
                self.failed_ids.append(job_id)

    def add_quarantined(self, job_id: str) -> None:
        with self._lock:
            self.quarantined_ids.add(job_id)

    def add_mark_lost(self) -> None:
        with self._lock:
            self.mark_lost += 1

    def finish(
        self,
        *,
        run_id: str,
        started_at: datetime,
        finished_at: datetime,
        stopped_because: StopReason,
        paused: bool,
        dry_run: bool,
        budget: int,
        backlog: RunBacklog,
        mode: str = "one-pass",
        partition: int = 0,
        rate_per_s: float = 0.0,
        note: str = "",
        execution: str | None = None,
    ) -> ScanRun:
        with self._lock:
            return ScanRun(
                run_id=run_id,
                started_at=started_at,
                finished_at=finished_at,
                stopped_because=stopped_because,
                paused=paused,
                dry_run=dry_run,
                budget=budget,
                claimed=self.claimed,
                published=self.published,
                publish_failed=self.publish_failed,
                reclaimed=self.reclaimed,
                reclaim_contended=self.reclaim_contended,
                due_count=backlog.due_count,
                oldest_overdue_age_s=backlog.oldest_overdue_age_s,
                stuck_claims=backlog.stuck_claims,
                stale_enqueued=backlog.stale_enqueued,
                oldest_enqueued_age_s=backlog.oldest_enqueued_age_s,
                shard_stranded=backlog.shard_stranded,
                shard_layout_mismatch=backlog.shard_layout_mismatch,
                claim_to_enqueue_latency_s=self.claim_to_enqueue_latency_s,
                failed_ids=tuple(self.failed_ids),
                quarantined=len(self.quarantined_ids),
                mode=mode,
                partition=partition,
                rate_per_s=rate_per_s,
                note=note,
                execution=execution,
                lanes={key: dict(lane) for key, lane in self.lanes.items()},
            )


# The response and the log line carry exactly these keys, in this order.
SUMMARY_KEYS = (
    "run_id",
    "paused",
    "dry_run",
    "claimed",
    "published",
    "publish_failed",
    "reclaimed",
    "due_count",
    "oldest_overdue_age_s",
    "stuck_claims",
    "stale_enqueued",
    "oldest_enqueued_age_s",
    "quarantined",
    "shard_stranded",
    "shard_layout_mismatch",
    "budget",
    "duration_s",
    "drain_rate_per_s",
    "stopped_because",
    "mode",
    "partition",
    "rate_per_s",
    "note",
)


def response_body(run: ScanRun) -> dict[str, Any]:
    """The 200 JSON body of a scan request."""
    values: dict[str, Any] = {
        "run_id": run.run_id,
        "paused": run.paused,
        "dry_run": run.dry_run,
        "claimed": run.claimed,
        "published": run.published,
        "publish_failed": run.publish_failed,
        "reclaimed": run.reclaimed,
        "due_count": run.due_count,
        "oldest_overdue_age_s": round(run.oldest_overdue_age_s, 3),
        "stuck_claims": run.stuck_claims,
        "stale_enqueued": run.stale_enqueued,
        "oldest_enqueued_age_s": round(run.oldest_enqueued_age_s, 3),
        "quarantined": run.quarantined,
        "shard_stranded": run.shard_stranded,
        "shard_layout_mismatch": run.shard_layout_mismatch,
        "budget": run.budget,
        "duration_s": round(run.duration_s, 3),
        # The ask: every summary shows how fast this run drained the backlog.
        "drain_rate_per_s": round(run.drain_rate_per_s, 3),
        "stopped_because": run.stopped_because,
        # one-pass or paced; a paced run's claim rate (0 for one-pass: as fast as it goes).
        "mode": run.mode,
        "partition": run.partition,
        "rate_per_s": round(run.rate_per_s, 3),
        # Why an overlap or duplicate claimed nothing (empty otherwise).
        "note": run.note,
    }
    return {key: values[key] for key in SUMMARY_KEYS}


def log_fields(run: ScanRun) -> dict[str, Any]:
    """The structured fields of the one log line per run (same numbers as the response)."""
    fields = response_body(run)
    fields[metrics.LOG_EVENT] = metrics.EVENT_SCAN_RUN
    fields["claim_to_enqueue_latency_s"] = round(run.claim_to_enqueue_latency_s, 3)
    if run.reclaim_contended:
        fields["reclaim_contended"] = True
    if run.failed_ids:
        fields["failed_ids"] = list(run.failed_ids)
    if run.execution:
        fields["execution"] = run.execution
    if run.lanes:
        fields["lanes"] = lane_fields(run)
        fields["actions_paused"] = run.actions_paused
    return fields


def lane_fields(run: ScanRun) -> dict[str, dict[str, Any]]:
    """The run's lanes as JSON: per lane its claims, budget, rate, stop reason and pause."""
    return {
        key: {
            **lane,
            "paused_until": lane["paused_until"].isoformat() if lane.get("paused_until") else None,
        }
        for key, lane in run.lanes.items()
    }


def scan_report(run: ScanRun) -> metrics.ScanReport:
    """The gauges for the metrics sink."""
    return metrics.ScanReport(
        run_id=run.run_id,
        oldest_overdue_age_s=run.oldest_overdue_age_s,
        due_count=run.due_count,
        stuck_claims=run.stuck_claims,
        claimed=run.claimed,
        published=run.published,
        publish_failed=run.publish_failed,
        reclaimed=run.reclaimed,
        claim_to_enqueue_latency_s=run.claim_to_enqueue_latency_s,
        stale_enqueued=run.stale_enqueued,
        oldest_enqueued_age_s=run.oldest_enqueued_age_s,
        quarantined=run.quarantined,
        shard_stranded=run.shard_stranded,
        shard_layout_mismatch=int(run.shard_layout_mismatch),
        actions_paused=run.actions_paused,
        partition=run.partition,
    )
