"""A scan run's claim lanes over the fakes: a limited action claims its rate x interval, the
others the catch-up budget, a paused action nothing (services/jobs/lanes.py)."""

from __future__ import annotations

from datetime import timedelta

from services.jobs.budget import ScanLimits
from services.jobs.clock import FakeClock
from services.jobs.control import Control
from services.jobs.lanes import REST, ClaimFilter
from services.scan.scanner import Scanner
from services.scan.summary import log_fields
from services.telemetry.metrics import InMemorySink
from tests.unit.scan.fakes import T0, FakePublisher, FakeStore

LIMITS = ScanLimits(
    time_budget_s=30, max_per_run=2_000, page_size=100, interval_s=60, claim_timeout_s=120
)
LIMITED, OTHER = "trials.expire", "media.delete_source"


def backlog(count: int) -> FakeStore:
    """`count` due jobs of each action, the limited action's all older (first in line)."""
    limited = [f"lim-{i:04d}" for i in range(count)]
    other = [f"oth-{i:04d}" for i in range(count)]
    return FakeStore(
        due=limited + other,
        actions={job_id: LIMITED for job_id in limited},
        control=Control(catch_up_rate=20),
    )


def scanner(store: FakeStore, rates: dict[str, float]) -> tuple[Scanner, InMemorySink]:
    sink = InMemorySink()
    clock = FakeClock(T0)
    return Scanner(store, FakePublisher(), clock, LIMITS, metrics=sink, rates=rates), sink


def claimed_of(store: FakeStore, prefix: str) -> int:
    return sum(1 for job_id in store.enqueued if job_id.startswith(prefix))


def test_a_limited_action_claims_its_rate_and_its_backlog_never_starves_the_others() -> None:
    store = backlog(3_000)
    run = scanner(store, {LIMITED: 5})[0].run()
    # 5/s x 60 s for the limited action; the catch-up budget (20/s x 60 s) for the rest,
    # although every limited job is older than every other one.
    assert claimed_of(store, "lim-") == 300
    assert claimed_of(store, "oth-") == 1_200
    assert run.claimed == 1_500
    assert run.lanes[LIMITED]["claimed"] == 300 and run.lanes[LIMITED]["budget"] == 300
    assert run.lanes[REST]["claimed"] == 1_200
    assert run.lanes[LIMITED]["stopped_because"] == "budget"
    assert ClaimFilter(exclude=(LIMITED,)) in store.claim_filters


def test_without_rates_a_run_claims_as_before_oldest_first() -> None:
    store = backlog(1_000)
    run = scanner(store, {})[0].run()
    assert claimed_of(store, "lim-") == 1_000 and claimed_of(store, "oth-") == 200
    assert run.lanes == {} and "lanes" not in log_fields(run)
    assert set(store.claim_filters) == {ClaimFilter()}


def test_a_paused_action_is_not_claimed_until_its_pause_ends_and_the_others_are() -> None:
    store = backlog(500)
    until = T0 + timedelta(seconds=30)
    store.control = Control(catch_up_rate=20, action_pauses={LIMITED: until})
    scan, sink = scanner(store, {LIMITED: 5})
    run = scan.run()
    assert claimed_of(store, "lim-") == 0 and claimed_of(store, "oth-") == 500
    assert run.lanes[LIMITED]["paused_until"] == until
    assert run.lanes[LIMITED]["stopped_because"] == "paused"
    assert run.actions_paused == 1 and sink.reports[-1].actions_paused == 1
    fields = log_fields(run)
    assert fields["lanes"][LIMITED]["paused_until"] == until.isoformat()
    assert fields["actions_paused"] == 1
    # No claim query of the limited action ran, and the rest left it out.
    assert ClaimFilter(action=LIMITED) not in store.claim_filters


def test_an_unrated_action_is_paused_too_and_left_out_of_the_rest() -> None:
    store = backlog(200)
    store.control = Control(catch_up_rate=20, action_pauses={OTHER: T0 + timedelta(seconds=30)})
    run = scanner(store, {})[0].run()
    assert claimed_of(store, "oth-") == 0 and claimed_of(store, "lim-") == 200
    assert run.lanes[OTHER]["budget"] == 0 and run.actions_paused == 1
