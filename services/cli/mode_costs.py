"""What each way of running the scan costs and gives: drain time, due→claim latency, and the
monthly cost of the scan's instance time and its Firestore reads (`jobsctl plan`).

Three modes at the deployment's interval I (docs/scan.md, "Modes"):
- one-pass: each run claims its budget B = min(cap, rate x I) as fast as the scan goes, then
  ends. The backlog drains at B / I; a job that comes due waits for the next run: up to I.
- paced, cheap (JOBS_SCAN_END_WHEN_IDLE): each run claims B over its time budget T at B / T per
  second and ends once nothing is due: the same drain rate, the same latency when idle, no
  burst.
- paced, polling: as above, but a run polls every P seconds for its whole T: a job that comes
  due while a run works waits up to P; one that comes due in the gap of I - T waits for the
  next run; an instance works T of every I, busy or not.

Prices are list prices (USD), without free tiers, so the figures compare the modes; check the
pages for your region: Cloud Run request-based billing (what the stack deploys; each mode also
prints what instance-based billing would cost) per vCPU-second and GiB-second
(https://cloud.google.com/run/pricing), Firestore document reads
(https://cloud.google.com/firestore/pricing).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

CLOUD_RUN_PRICING_URL = "https://cloud.google.com/run/pricing"
FIRESTORE_PRICING_URL = "https://cloud.google.com/firestore/pricing"
# Cloud Run, request-based billing, tier 1 region (the page above): what the stack deploys
# (infra/cloudrun.py, `cpu_idle`).
VCPU_SECOND_USD = 0.000024
GIB_SECOND_USD = 0.0000025
# Instance-based billing (`scanInstanceBilling: true`), the same page: the instance's whole
# life is billed, and an idle instance lives up to 15 minutes
# (https://cloud.google.com/run/docs/configuring/billing-settings), so a scan called more
# often than that never scales in.
INSTANCE_VCPU_SECOND_USD = 0.000018
INSTANCE_GIB_SECOND_USD = 0.000002
IDLE_INSTANCE_LIFE_S = 900
# Firestore Standard edition, document reads, per 100,000 (the page above; multi-region).
READS_PER_100K_USD = 0.06
# The deployed scan: 1 vCPU, 512 MiB (infra defaults `cpu`, `memory`).
SCAN_VCPU = 1.0
SCAN_GIB = 0.5
# An idle run: a request that reads the control document and finds nothing due, billed to the
# next 100 ms; 1 s is a pessimistic round figure.
IDLE_RUN_S = 1.0
IDLE_RUN_READS = 2  # control document + the due probe (docs/scan.md, "Cost per run")
# A housekeeping run every 15 min: 12 reads more (docs/scan.md).
HOUSEKEEPING_READS_PER_MONTH = 2880 * 12
# How fast one scan process claims in a one-pass burst (the issue's ~1,000 claims/s on real
# Firestore; the emulator here measured 294-370 jobs/s: docs/scan.md).
ONE_PASS_CLAIMS_PER_S = 1000.0
MONTH_S = 30 * 86400


@dataclass(frozen=True)
class ModePlan:
    """One mode's figures, and the arithmetic that gave each."""

    mode: str
    drain_s: int
    drain_rate_per_s: float
    claim_rate_per_s: float  # per second while a run claims (its burst, or its pace)
    latency_p50_s: float
    latency_p99_s: float
    instance_s_per_month: float
    reads_per_month: float
    cost_usd_per_month: float
    arithmetic: tuple[str, ...]


def _latency_quantile(q: float, interval_s: float, active_s: float, poll_s: float | None) -> float:
    """The q-quantile of due→claim wait for a job that comes due at a uniform time, with no
    backlog: in the active part of a run (polling) it waits up to `poll_s`; otherwise until
    the next run starts."""
    if poll_s is None or active_s <= 0:
        return q * interval_s
    active = active_s / interval_s
    # Mixture: with probability `active` uniform on [0, P]; else uniform on [0, I - T].
    gap = interval_s - active_s

    def cdf(w: float) -> float:
        return active * min(1.0, w / poll_s) + (1 - active) * (min(1.0, w / gap) if gap else 1.0)

    low, high = 0.0, max(poll_s, gap)
    for _ in range(60):
        mid = (low + high) / 2
        if cdf(mid) < q:
            low = mid
        else:
            high = mid
    return high


def plan_modes(
    backlog: int,
    rate_per_s: float,
    cap: int,
    interval_s: float,
    time_budget_s: float,
    poll_s: float,
    shards: int = 1,
) -> list[ModePlan]:
    """The three modes at one interval, rate and cap (validated by plan.plan_drain)."""
    budget = min(cap, math.floor(rate_per_s * interval_s + 1e-9))
    drain_rate = budget / interval_s
    drain_s = math.ceil(backlog / drain_rate) if backlog and drain_rate else 0
    runs = MONTH_S / interval_s
    probes = max(1, math.ceil(shards / 30)) if shards > 1 else 1
    plans = []
    budget_line = (
        f"budget = min(cap {cap:,}, {rate_per_s:g}/s x {interval_s:g} s) = {budget:,} per run; "
        f"drain = {backlog:,} / ({budget:,} / {interval_s:g} s) = {drain_s:,} s"
    )
    price = SCAN_VCPU * VCPU_SECOND_USD + SCAN_GIB * GIB_SECOND_USD

    def cost(instance_s: float, reads: float) -> tuple[float, str]:
        usd = instance_s * price + reads / 100_000 * READS_PER_100K_USD
        return usd, (
            f"cost = {instance_s:,.0f} s x ({SCAN_VCPU:g} vCPU x ${VCPU_SECOND_USD} + "
            f"{SCAN_GIB:g} GiB x ${GIB_SECOND_USD:.7f}) + {reads:,.0f} reads x "
            f"${READS_PER_100K_USD}/100k = ${usd:,.2f} ({CLOUD_RUN_PRICING_URL}, "
            f"{FIRESTORE_PRICING_URL})"
        )

    instance_price = SCAN_VCPU * INSTANCE_VCPU_SECOND_USD + SCAN_GIB * INSTANCE_GIB_SECOND_USD
    # Under instance-based billing the scan's instance is billed all month when runs come
    # closer together than an idle instance lives (the mode does not matter then).
    always_on = interval_s <= IDLE_INSTANCE_LIFE_S
    instance_line = (
        f"instance-based billing instead (scanInstanceBilling): {MONTH_S:,} s x "
        f"${instance_price:.6f} = ${MONTH_S * instance_price:,.2f}: the instance never scales "
        f"in at a {interval_s:g} s interval"
        if always_on
        else "instance-based billing instead (scanInstanceBilling): billed for each run's "
        f"instance life, up to {IDLE_INSTANCE_LIFE_S} s idle after it"
    )
    idle_reads = runs * (IDLE_RUN_READS + probes - 1) + HOUSEKEEPING_READS_PER_MONTH
    idle_s = runs * IDLE_RUN_S
    # one-pass
    burst_s = backlog / ONE_PASS_CLAIMS_PER_S
    usd, cost_line = cost(idle_s + burst_s, idle_reads)
    plans.append(
        ModePlan(
            "one-pass",
            drain_s,
            drain_rate,
            ONE_PASS_CLAIMS_PER_S,
            _latency_quantile(0.5, interval_s, 0, None),
            _latency_quantile(0.99, interval_s, 0, None),
            idle_s + burst_s,
            idle_reads,
            usd,
            (
                budget_line,
                f"claims in bursts of {budget:,} at the scan's speed (~{ONE_PASS_CLAIMS_PER_S:,.0f}"
                "/s), then idle",
                f"latency: next run, uniform over {interval_s:g} s: p50 {interval_s / 2:g} s, "
                f"p99 {0.99 * interval_s:g} s",
                f"instance = {runs:,.0f} runs x {IDLE_RUN_S:g} s + {burst_s:,.0f} s of bursts",
                cost_line,
                instance_line,
            ),
        )
    )
    pace = budget / time_budget_s if time_budget_s else 0.0
    drain_instance_s = drain_s * time_budget_s / interval_s
    # paced, cheap
    usd, cost_line = cost(idle_s + drain_instance_s, idle_reads)
    plans.append(
        ModePlan(
            "paced (end when idle)",
            drain_s,
            drain_rate,
            pace,
            _latency_quantile(0.5, interval_s, 0, None),
            _latency_quantile(0.99, interval_s, 0, None),
            idle_s + drain_instance_s,
            idle_reads,
            usd,
            (
                budget_line,
                f"pace = {budget:,} / {time_budget_s:g} s = {pace:,.1f}/s while a run claims",
                "latency: as one-pass when idle (a run ends once nothing is due)",
                f"instance = {runs:,.0f} runs x {IDLE_RUN_S:g} s + the drain's {drain_s:,} s x "
                f"{time_budget_s:g}/{interval_s:g}",
                cost_line,
                instance_line,
            ),
        )
    )
    # paced, polling
    polls = time_budget_s / poll_s if poll_s else 0.0
    # control + lease (1 read) + one due query per poll (x the probes above 1 shard).
    poll_reads = runs * (2 + polls * probes) + HOUSEKEEPING_READS_PER_MONTH
    busy_s = runs * time_budget_s
    usd, cost_line = cost(busy_s, poll_reads)
    p50 = _latency_quantile(0.5, interval_s, time_budget_s, poll_s)
    p99 = _latency_quantile(0.99, interval_s, time_budget_s, poll_s)
    plans.append(
        ModePlan(
            "paced (polling)",
            drain_s,
            drain_rate,
            pace,
            p50,
            p99,
            busy_s,
            poll_reads,
            usd,
            (
                budget_line,
                f"pace = {budget:,} / {time_budget_s:g} s = {pace:,.1f}/s while a run claims",
                f"latency: due while a run works ({time_budget_s:g} of {interval_s:g} s) waits "
                f"<= {poll_s:g} s, in the gap <= {interval_s - time_budget_s:g} s: p50 "
                f"{p50:.1f} s, p99 {p99:.1f} s",
                f"instance = {runs:,.0f} runs x {time_budget_s:g} s; reads = runs x (2 + "
                f"{polls:g} polls)",
                cost_line,
                instance_line,
            ),
        )
    )
    return plans
