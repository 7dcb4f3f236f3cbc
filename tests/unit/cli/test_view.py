"""The live view's arithmetic: the drain rate runs measured, each run's rates, the ETA."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

from services.cli.view import Snapshot, drain_rate, effective_run_rate
from services.jobs.budget import enqueue_budget
from services.jobs.control import Control
from services.jobs.results import Stats
from services.jobs.state import State
from services.store.runs import ScanRun

T0 = datetime(2026, 12, 1, tzinfo=UTC)


def run(n: int, published: int, every_s: float = 5, took_s: float = 1) -> ScanRun:
    at = T0 + timedelta(seconds=every_s * n)
    return ScanRun(f"r{n}", at, at + timedelta(seconds=took_s), "budget", published=published)


def test_the_drain_rate_counts_the_gaps_between_runs() -> None:
    runs = [run(3, 50), run(2, 50), run(1, 50), run(0, 50)]  # newest first, as listed
    rate = drain_rate(runs)
    assert rate.per_s == 10.0 and rate.runs == 4 and rate.span_s == 15
    assert drain_rate(runs[:1]).per_s is None


def test_burst_and_effective_rates_differ_by_what_they_divide_by() -> None:
    newer, older = run(1, 50), run(0, 50)
    assert newer.drain_rate_per_s == 50.0  # burst: 50 in its own second
    assert effective_run_rate(newer, older) == 10.0  # 50 in the 5 s since the previous started
    assert effective_run_rate(older, None) is None


def _snapshot(due: int, paused: bool, runs: tuple[ScanRun, ...]) -> Snapshot:
    stats = Stats(None, due, 0, 0, {s: 0 for s in State})
    control = Control(paused=paused, catch_up_rate=10)
    budget = enqueue_budget(1000, 5, rate_per_s=10)
    return Snapshot(T0, stats, control, budget, runs, 600)


def test_the_eta_uses_the_measured_rate_else_the_set_one_and_none_while_paused() -> None:
    measured = (run(2, 100), run(1, 100), run(0, 100))  # 200 in 10 s: 20/s
    assert _snapshot(100, False, measured).eta_s == 5.0
    assert _snapshot(100, False, ()).eta_s == 10.0  # the set rate: 50 per 5 s
    assert _snapshot(100, True, measured).eta_s is None
    assert _snapshot(0, True, ()).eta_s == 0.0
