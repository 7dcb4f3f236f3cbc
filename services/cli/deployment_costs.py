"""The monthly cost of one deployment at a job volume, from what the program registers: the
model `jobsctl plan` prints and docs/deploy.md's cost table is written from (infra/costs.py).

The counts that drive the billed items (Cloud Run services, alert conditions, scan gauges,
log-based metrics, Scheduler jobs) are counted by tests/infra/test_costs.py from the resources
the prod stack registers under mocks and compared with `PROD_COUNTS`, so the table cannot
describe a program that no longer exists. Every price is a list price in USD for a tier-1
region, cited beside it; the per-job figures are the repository's measurements
(docs/capacity.md) or stated assumptions.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from services.cli.mode_costs import (
    GIB_SECOND_USD,
    IDLE_RUN_S,
    MONTH_S,
    SCAN_GIB,
    SCAN_VCPU,
    VCPU_SECOND_USD,
)

RUNS_PER_MONTH = MONTH_S // 60  # the default schedule, one run a minute

# Cloud Run's request-based prices are mode_costs' (https://cloud.google.com/run/pricing);
# its free tier per billing account a month:
RUN_FREE_VCPU_S = 180_000
RUN_FREE_GIB_S = 360_000
# A worker push's wall time: a re-read, the action's Storage calls and 4-5 writes, ~20 ms each
# (assumed, not measured on Google: the local benchmark runs against emulators).
WORKER_REQUEST_S = 0.1
# Firestore Standard edition (https://cloud.google.com/firestore/pricing), per 100,000
# operations: regional location (e.g. europe-west1) and multi-region (eur3, nam5). TTL
# deletes are billed as deletes.
FS_READ = (0.03, 0.06)
FS_WRITE = (0.09, 0.18)
FS_DELETE = (0.01, 0.02)
FS_FREE_PER_DAY = (50_000, 20_000, 20_000)  # reads, writes, deletes
# A media job: 2 reads, 5 writes from due to completed (7.02 billed operations measured,
# docs/capacity.md), 1 write to schedule it, 1 TTL delete after retention.
JOB_READS, JOB_WRITES, JOB_DELETES = 2, 6, 1
# The idle scan: 4 reads a run, 12 reads and 2 writes every 15 min (docs/deploy.md above).
SCAN_READS = RUNS_PER_MONTH * 4 + 2_880 * 12
SCAN_WRITES = 2_880 * 2
# Pub/Sub: $40 per TiB of throughput beyond 10 GiB free, each message billed as at least 1 KB
# for the publish and again for each delivery (https://cloud.google.com/pubsub/pricing).
PUBSUB_TIB = 40.0
PUBSUB_FREE_GIB = 10
# Cloud Monitoring (https://cloud.google.com/stackdriver/pricing): $1.50 a month per alerting
# condition, $0.35 per million time series returned to conditions (one series per condition
# per evaluation, a minute apart, after the gauges' partitions are reduced); metric ingestion
# $0.258 per MiB beyond 150 MiB free, each gauge point billed as 8 bytes
# (https://cloud.google.com/monitoring/alerts/cost-control).
CONDITION_MONTH = 1.50
SERIES_PER_MILLION = 0.35
INGEST_FREE_MIB = 150
INGEST_MIB = 0.258
POINT_BYTES = 8
# Cloud Logging: $0.50 per GiB ingested beyond 50 GiB free per project
# (https://cloud.google.com/stackdriver/pricing). Per job: Cloud Run's request log entry of
# the push and the worker's own lines, 2-4 KiB together (inferred from the services' log
# lines; check the project's Logs Storage page after a day of traffic).
LOG_GIB = 0.50
LOG_FREE_GIB = 50
LOG_KIB_PER_JOB = (2.0, 4.0)
# Cloud Scheduler: $0.10 per job a month beyond 3 free per billing account
# (https://cloud.google.com/scheduler/pricing).
SCHEDULER_JOB = 0.10


@dataclass(frozen=True)
class Counts:
    """What the program registers that is billed by count."""

    services: int
    conditions: int
    gauges: int
    log_metrics: int
    scheduler_jobs: int


# The prod example stack with its deployer's settings (tests/infra/conftest.py): scan, worker,
# api; checked against the registered resources by tests/infra/test_costs.py.
PROD_COUNTS = Counts(services=3, conditions=11, gauges=14, log_metrics=9, scheduler_jobs=1)


VOLUMES = (1_000_000, 100_000_000)
DASH = " \N{EN DASH} "


@dataclass(frozen=True)
class Row:
    item: str
    reasoning: str
    low: float
    high: float


def _usd(value: float) -> str:
    return f"${value:,.0f}" if value >= 10 else f"${value:,.2f}"


def _busy_fraction(jobs: int) -> float:
    """The share of the month a worker instance serves at least one push, for pushes arriving
    at random (Poisson) and each lasting WORKER_REQUEST_S: 1 - exp(-rate x duration)."""
    return 1 - math.exp(-(jobs / MONTH_S) * WORKER_REQUEST_S)


def rows(jobs: int, counts: Counts) -> list[Row]:
    """The monthly cost items at `jobs` completed media jobs a month."""
    instance = SCAN_VCPU * VCPU_SECOND_USD + SCAN_GIB * GIB_SECOND_USD
    scan_s = RUNS_PER_MONTH * IDLE_RUN_S
    worker_s = _busy_fraction(jobs) * MONTH_S
    free_s = min(RUN_FREE_VCPU_S / SCAN_VCPU, RUN_FREE_GIB_S / SCAN_GIB)
    run_usd = max(0.0, scan_s + worker_s - free_s) * instance
    reads = jobs * JOB_READS + SCAN_READS
    writes = jobs * JOB_WRITES + SCAN_WRITES
    deletes = jobs * JOB_DELETES
    free = [30 * per_day for per_day in FS_FREE_PER_DAY]

    def firestore(index: int) -> float:
        billed = [max(0, n - f) for n, f in zip((reads, writes, deletes), free, strict=True)]
        prices = (FS_READ[index], FS_WRITE[index], FS_DELETE[index])
        return sum(n / 100_000 * p for n, p in zip(billed, prices, strict=True))

    pubsub_gib = jobs * 2 / 1024**2  # 1 KB published + 1 KB delivered
    pubsub_usd = max(0.0, pubsub_gib - PUBSUB_FREE_GIB) / 1024 * PUBSUB_TIB
    series = counts.conditions * RUNS_PER_MONTH
    alerting = counts.conditions * CONDITION_MONTH + series / 1e6 * SERIES_PER_MILLION
    gauge_mib = counts.gauges * RUNS_PER_MONTH * POINT_BYTES / 1024**2
    # A log-based metric writes at most one point per series a minute (its DELTA alignment).
    log_metric_mib = counts.log_metrics * RUNS_PER_MONTH * POINT_BYTES / 1024**2
    ingest = max(0.0, gauge_mib + log_metric_mib - INGEST_FREE_MIB) * INGEST_MIB

    def logging(kib: float) -> float:
        return max(0.0, jobs * kib / 1024**2 - LOG_FREE_GIB) * LOG_GIB

    return [
        Row(
            "Cloud Run (request-based)",
            f"{counts.services} services; scan {scan_s:,.0f} s (1 s a run); worker busy "
            f"{_busy_fraction(jobs):.1%} of the month ({WORKER_REQUEST_S:g} s a push); minus "
            f"{free_s:,.0f} free instance-s; ${instance:.8f} per busy s",
            run_usd,
            run_usd,
        ),
        Row(
            "Firestore operations",
            f"{JOB_READS} reads, {JOB_WRITES} writes, {JOB_DELETES} TTL delete per job + the "
            f"scan's {SCAN_READS:,} reads; regional{DASH}multi-region prices, after the daily "
            "free tier",
            firestore(0),
            firestore(1),
        ),
        Row(
            "Pub/Sub",
            f"{pubsub_gib:,.1f} GiB (1 KB publish + 1 KB push a job) beyond 10 GiB free",
            pubsub_usd,
            pubsub_usd,
        ),
        Row(
            "Monitoring alerting",
            f"{counts.conditions} conditions x ${CONDITION_MONTH:.2f} + {series:,} series "
            f"returned x ${SERIES_PER_MILLION}/M",
            alerting,
            alerting,
        ),
        Row(
            "Monitoring metrics",
            f"{counts.gauges} gauges + {counts.log_metrics} log-based metrics, a point a "
            f"minute each: {gauge_mib + log_metric_mib:.1f} MiB of {INGEST_FREE_MIB} free",
            ingest,
            ingest,
        ),
        Row(
            "Logging",
            f"{LOG_KIB_PER_JOB[0]:g}\N{EN DASH}{LOG_KIB_PER_JOB[1]:g} KiB a job beyond 50 GiB free",
            logging(LOG_KIB_PER_JOB[0]),
            logging(LOG_KIB_PER_JOB[1]),
        ),
        Row(
            "Cloud Scheduler",
            f"{counts.scheduler_jobs} job(s), 3 free per billing account",
            0.0,
            counts.scheduler_jobs * SCHEDULER_JOB,
        ),
    ]


def render(counts: Counts = PROD_COUNTS, volumes: tuple[int, ...] = VOLUMES) -> str:
    """The markdown table: one column per volume, low to high where the two differ."""
    columns = " | ".join(f"{v:,} jobs/month" for v in volumes)
    header = f"| item | {columns} | reasoning (at the last volume) |"
    lines = [header, "|---|" + "---|" * len(volumes) + "---|"]
    per_volume = [rows(v, counts) for v in volumes]
    for index, row in enumerate(per_volume[-1]):
        cells = []
        for figures in per_volume:
            r = figures[index]
            cells.append(_usd(r.low) if r.low == r.high else f"{_usd(r.low)}{DASH}{_usd(r.high)}")
        lines.append(f"| {row.item} | " + " | ".join(cells) + f" | {row.reasoning} |")
    totals = [(sum(r.low for r in figures), sum(r.high for r in figures)) for figures in per_volume]
    lines.append(
        "| **total** | "
        + " | ".join(f"**{_usd(low)}{DASH}{_usd(high)}**" for low, high in totals)
        + " | excludes storage, PITR and backups (below) |"
    )
    return "\n".join(lines)


def summary(volumes: tuple[int, ...] = VOLUMES, counts: Counts = PROD_COUNTS) -> list[str]:
    """One line per volume: the total, then each item (what `jobsctl plan` prints)."""
    lines = []
    for jobs in volumes:
        figures = rows(jobs, counts)
        low, high = sum(r.low for r in figures), sum(r.high for r in figures)
        items = ", ".join(
            f"{r.item} {_usd(r.low) if r.low == r.high else _usd(r.low) + DASH + _usd(r.high)}"
            for r in figures
        )
        lines.append(f"{jobs:,} jobs/month: {_usd(low)}{DASH}{_usd(high)} ({items})")
    return lines
