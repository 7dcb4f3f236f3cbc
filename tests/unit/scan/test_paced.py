"""Paced runs over hand-written fakes on a FakeClock: the token bucket's rate, polling, the
cheap end when idle, the ramp's rate, and a partition's share of the budget."""

from __future__ import annotations

import dataclasses
import itertools
from datetime import timedelta

import pytest

from services.jobs.budget import (
    EnqueueBudget,
    ScanLimits,
    catch_up_ceiling,
    pace_rate,
    partition_share,
)
from services.jobs.clock import FakeClock
from services.jobs.control import Control
from services.jobs.ramp import Ramp
from services.scan.pacer import Pacer, pace_page
from services.scan.scanner import Scanner
from services.telemetry.metrics import InMemorySink
from tests.unit.scan.fakes import T0, FakePublisher, FakeStore

PACED = ScanLimits(
    time_budget_s=50,
    max_per_run=100_000,
    page_size=200,
    interval_s=60,
    claim_timeout_s=600,
    mode="paced",
    poll_s=5,
    end_when_idle=True,
)


def ids(count: int) -> list[str]:
    return [f"job-{i:05d}" for i in range(count)]


def paced_scanner(
    store: FakeStore, limits: ScanLimits = PACED
) -> tuple[Scanner, FakeClock, list[tuple[float, int]]]:
    """A scanner whose waits advance its FakeClock; records (seconds into the run, jobs) of
    every claim."""
    clock = FakeClock(T0)
    claims: list[tuple[float, int]] = []
    claim_due = store.claim_due

    def timed_claim(now, run_id, limit, **kwargs):  # type: ignore[no-untyped-def]
        claimed = claim_due(now, run_id, limit, **kwargs)
        claims.append(((clock.now() - T0).total_seconds(), len(claimed)))
        return claimed

    store.claim_due = timed_claim  # type: ignore[method-assign]
    scanner = Scanner(
        store,
        FakePublisher(),
        clock,
        limits,
        metrics=InMemorySink(),
        sleep=lambda s: clock.advance(timedelta(seconds=s)),
    )
    return scanner, clock, claims


def busiest_window(claims: list[tuple[float, int]], window_s: float) -> int:
    return max(sum(n for t, n in claims if start <= t < start + window_s) for start, _ in claims)


def test_a_paced_run_spreads_its_budget_over_its_time_budget() -> None:
    # 20 jobs/s x 60 s = 1,200 per run, claimed over the 50 s run: 24 jobs/s while it works.
    store = FakeStore(due=ids(5000), control=Control(catch_up_rate=20, claim_budget=100_000))
    scanner, clock, claims = paced_scanner(store)
    run = scanner.run()
    assert run.claimed == run.published == 1200
    assert run.mode == "paced" and run.rate_per_s == pytest.approx(24.0)
    assert run.stopped_because in ("budget", "time")
    # Never faster than the pace: no 10 s window above 24/s x 10 s plus one page (12).
    assert busiest_window(claims, 10.0) <= 24 * 10 + pace_page(24, 200)
    # And not slower: the budget is spent by the end of the time budget.
    assert claims[-1][0] <= 50.0
    assert (clock.now() - T0).total_seconds() <= 50.0 + 1e-6


def test_a_paced_run_that_starts_late_catches_up_within_one_and_a_half_times_the_rate() -> None:
    # Measured at production cadence: a first run whose claims began seconds late (a slow
    # first query) drained 188 of 200 jobs/s in its minute. Now the bucket aims at what is
    # left. Catching up at 1.35 x the rate instead of the pace's 1.2 x wins back 0.15 x the
    # rate for each second left: a run 4 s late (4.8 s of the rate) makes it up in 32 s.
    store = FakeStore(due=ids(5000), control=Control(catch_up_rate=20, claim_budget=100_000))
    scanner, clock, claims = paced_scanner(store)
    claim_due = store.claim_due
    late = [True]

    def slow_first(now, run_id, limit, **kwargs):  # type: ignore[no-untyped-def]
        if late[0]:
            late[0] = False
            clock.advance(timedelta(seconds=4))
        return claim_due(now, run_id, limit, **kwargs)

    store.claim_due = slow_first  # type: ignore[method-assign]
    run = scanner.run()
    assert run.claimed == 1200 and run.stopped_because == "budget"
    assert claims[-1][0] <= 50.0
    # The set rate is 20/s (1,200 a minute): no 10 s window above 1.5 x 20 x 10.
    assert busiest_window(claims, 10.0) <= 1.5 * 20 * 10


def test_the_catch_up_rate_stays_between_the_pace_and_the_ceiling() -> None:
    clock = FakeClock(T0)
    deadline = T0 + timedelta(seconds=50)
    pacer = Pacer(clock, lambda s: None, 24.0, 12, deadline, ceiling_per_s=27.0)
    # On schedule (aiming to be done a tick, 0.5 s, early): the pace.
    assert pacer.aim(1188) == pytest.approx(24.0)
    clock.advance(timedelta(seconds=10))
    assert pacer.aim(1200) == 27.0  # 1,200 in 39.5 s is 30/s: held at the ceiling
    assert pacer.aim(100) == 24.0  # ahead: never below the pace
    clock.set(deadline)
    assert pacer.aim(1200) == 24.0  # past the deadline: unchanged
    assert catch_up_ceiling(EnqueueBudget(12000, 12000, 200.0, 60.0, "cap")) == pytest.approx(270)


def test_a_one_pass_run_claims_its_budget_at_once() -> None:
    store = FakeStore(due=ids(5000), control=Control(catch_up_rate=20, claim_budget=100_000))
    scanner, clock, claims = paced_scanner(store, dataclasses.replace(PACED, mode="one-pass"))
    run = scanner.run()
    assert run.claimed == 1200 and run.rate_per_s == 0.0 and run.mode == "one-pass"
    assert clock.now() == T0  # no wait at all
    assert busiest_window(claims, 10.0) == 1200


def test_a_paced_run_that_polls_claims_work_that_becomes_due_while_it_lasts() -> None:
    store = FakeStore(due=ids(3), control=Control(catch_up_rate=20, claim_budget=100_000))
    limits = dataclasses.replace(PACED, end_when_idle=False)
    scanner, clock, claims = paced_scanner(store, limits)
    late = [f"late-{i}" for i in range(4)]

    def arrive() -> None:
        # Four jobs come due 20 s into the run.
        if (clock.now() - T0).total_seconds() >= 20 and late:
            store.due.extend(late)
            late.clear()

    store.on_claim = arrive
    run = scanner.run()
    assert run.claimed == 7
    assert run.stopped_because == "time"
    # One claim at once, then one every poll period (5 s) until the 50 s run ends.
    times = [t for t, _ in claims]
    assert times[0] == 0.0
    assert all(b - a >= 5.0 - 1e-6 for a, b in itertools.pairwise(times))
    assert 9 <= len(claims) <= 11
    # The late jobs were claimed by the first poll at or after 20 s, not a run later.
    assert next(t for t, n in claims if n == 4) <= 25.0


def test_a_cheap_paced_run_ends_as_soon_as_nothing_is_due() -> None:
    store = FakeStore(due=ids(3), control=Control(catch_up_rate=20, claim_budget=100_000))
    scanner, clock, claims = paced_scanner(store)
    run = scanner.run()
    assert run.claimed == 3 and run.stopped_because == "drained"
    assert len(claims) == 1 and clock.now() == T0


def test_a_cheap_paced_run_with_nothing_due_never_claims() -> None:
    store = FakeStore(due=[], control=Control(catch_up_rate=20, claim_budget=100_000))
    scanner, _, claims = paced_scanner(store)
    run = scanner.run()
    assert run.stopped_because == "drained" and claims == []


def test_a_ramp_climbs_by_half_every_five_minutes_to_the_set_rate() -> None:
    ramp = Ramp(started_at=T0, start_rate=80)
    assert ramp.rate_at(T0, 200) == 80
    assert ramp.rate_at(T0 + timedelta(seconds=299), 200) == 80
    assert ramp.rate_at(T0 + timedelta(minutes=5), 200) == 120
    assert ramp.rate_at(T0 + timedelta(minutes=10), 200) == 180
    assert ramp.rate_at(T0 + timedelta(minutes=15), 200) == 200
    assert ramp.rate_at(T0 + timedelta(days=3650), 200) == 200
    assert ramp.reaches_at(200) == T0 + timedelta(minutes=15)
    assert ramp.next_step(T0 + timedelta(minutes=6), 200) == (T0 + timedelta(minutes=10), 180)
    assert ramp.next_step(T0 + timedelta(minutes=16), 200) is None
    # Never above the set rate, even below the start.
    assert ramp.rate_at(T0, 50) == 50


def test_the_scan_applies_the_ramp_to_its_budget() -> None:
    control = Control(
        catch_up_rate=200, claim_budget=100_000, ramp=Ramp(started_at=T0, start_rate=80)
    )
    scanner, _clock, _ = paced_scanner(FakeStore(due=[], control=control))
    assert scanner.budget_for(control, T0).limit == 80 * 60
    assert scanner.budget_for(control, T0 + timedelta(minutes=5)).limit == 120 * 60
    assert scanner.budget_for(control, T0 + timedelta(hours=1)).limit == 200 * 60


@pytest.mark.parametrize(
    "ramp",
    [
        Ramp(started_at=T0, start_rate=0),
        Ramp(started_at=T0, step=2.0),
        Ramp(started_at=T0, every_s=60),
    ],
)
def test_a_ramp_faster_than_the_rule_is_refused(ramp: Ramp) -> None:
    assert ramp.problems()


def test_partitions_share_the_budget_instead_of_multiplying_it() -> None:
    budget = EnqueueBudget(1001, 5000, 20.0, 60.0, "rate")
    shares = [partition_share(budget, p, 4).limit for p in range(4)]
    assert shares == [251, 250, 250, 250] and sum(shares) == 1001
    assert partition_share(budget, 0, 1) is budget
    with pytest.raises(ValueError):
        partition_share(budget, 4, 4)


def test_pace_rate_spreads_the_budget_over_the_run() -> None:
    assert pace_rate(EnqueueBudget(12000, 12000, 200.0, 60.0, "cap"), 50) == 240


def test_the_bucket_never_holds_more_than_one_page() -> None:
    clock = FakeClock(T0)
    pacer = Pacer(
        clock, lambda s: clock.advance(timedelta(seconds=s)), 10.0, 5, T0 + timedelta(minutes=1)
    )
    assert pacer.take(5) == 5  # starts full
    clock.advance(timedelta(seconds=30))  # idle for 30 s: 300 tokens' worth, 5 kept
    assert pacer.take(5) == 5
    before = clock.now()
    assert pacer.take(5) == 5
    assert (clock.now() - before).total_seconds() == pytest.approx(0.5)
    clock.set(T0 + timedelta(minutes=1))
    assert pacer.take(1) == 0  # past the deadline: nothing


def test_with_partitions_the_cap_is_per_run_and_the_rate_is_shared() -> None:
    limits = dataclasses.replace(PACED, max_per_run=1000, partitions=4, shards=4)
    control = Control(catch_up_rate=50, claim_budget=100_000)
    scanner, _, _ = paced_scanner(FakeStore(due=[], control=control), limits)
    # 50/s x 60 s = 3,000 per interval, shared by the 4 partitions' runs (each under its
    # cap of 1,000): 750 each.
    assert [scanner.budget_for(control, T0, p).limit for p in range(4)] == [750] * 4
    fast = Control(catch_up_rate=500, claim_budget=100_000)
    # 500/s x 60 s = 30,000, above 4 caps: each partition's run claims its cap.
    assert [scanner.budget_for(fast, T0, p).limit for p in range(4)] == [1000] * 4
