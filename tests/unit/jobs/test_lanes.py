"""The claim lanes' arithmetic and the pause rule (services/jobs/lanes.py)."""

from __future__ import annotations

import math
from datetime import UTC, datetime, timedelta

import pytest

from services.jobs.actions import Action, Budget
from services.jobs.catalogue import Catalogue
from services.jobs.control import Control
from services.jobs.lanes import (
    MAX_LANES,
    MAX_PAUSE,
    MIN_PAUSE,
    PAUSE_SLACK,
    REST,
    ClaimFilter,
    PauseBook,
    active_pauses,
    claim_rates,
    key_parts,
    lane_key,
    lane_label,
    lane_limit,
    merged_pauses,
    pause_until,
    pauses_from_document,
    plan_lanes,
)

NOW = datetime(2026, 12, 1, 12, 0, tzinfo=UTC)


def _noop(request: object) -> object:
    raise AssertionError("never run here")


def action(name: str, rate: float | None = None) -> Action:
    return Action(name, run=_noop, budget=Budget(rate) if rate else None)  # type: ignore[arg-type]


def test_claim_rates_come_from_the_catalogue_budgets_and_the_lower_extra_wins() -> None:
    catalogue = Catalogue([action("a.limited", 5), action("b.free"), action("c.fast", 50)])
    assert claim_rates(catalogue) == {"a.limited": 5.0, "c.fast": 50.0}
    # A second source (an HTTP target's rate for its action) is one mapping more.
    assert claim_rates(catalogue, {"c.fast": 10, "b.free": 2}) == {
        "a.limited": 5.0,
        "b.free": 2.0,
        "c.fast": 10.0,
    }
    assert claim_rates(catalogue, {"a.limited": 8}) == {"a.limited": 5.0, "c.fast": 50.0}


def test_claim_rates_refuse_more_lanes_than_not_in_takes_and_non_positive_rates() -> None:
    many = Catalogue([action(f"a.n{i}", 1) for i in range(MAX_LANES + 1)])
    with pytest.raises(ValueError, match="at most 10"):
        claim_rates(many)
    with pytest.raises(ValueError, match="above 0"):
        claim_rates(Catalogue(), {"a.x": 0})


@pytest.mark.parametrize(
    ("rate", "catch_up", "interval", "cap", "expected"),
    [
        (5, 200, 60, 12_000, 300),  # the action's rate x interval
        (5, 2, 60, 12_000, 120),  # never above the catch-up rate
        (5, None, 60, 12_000, 300),  # no catch-up limit: the action's rate
        (500, 200, 60, 1_000, 1_000),  # never above the per-run cap
        (0.5, 200, 60, 1_000, 30),
        (0.01, 200, 60, 1_000, 0),  # less than one job an interval: none this run
    ],
)
def test_a_lanes_budget_is_its_rate_times_the_interval_under_the_catch_up_rate_and_cap(
    rate: float, catch_up: float | None, interval: float, cap: int, expected: int
) -> None:
    assert lane_limit(rate, catch_up, interval, cap) == expected


def test_without_rates_or_pauses_one_lane_claims_every_due_job_at_the_run_budget() -> None:
    (lane,) = plan_lanes({}, {}, NOW, rest_limit=1200, catch_up_rate=20, interval_s=60, cap=12_000)
    assert (lane.key, lane.limit, lane.claims.everything) == (REST, 1200, True)


def test_each_rated_action_gets_its_own_lane_and_the_rest_leaves_them_out() -> None:
    lanes = plan_lanes(
        {"a.limited": 5, "c.fast": 50},
        {},
        NOW,
        rest_limit=1200,
        catch_up_rate=20,
        interval_s=60,
        cap=12_000,
    )
    by_key = {lane.key: lane for lane in lanes}
    assert by_key["a.limited"].limit == 300
    assert by_key["a.limited"].claims == ClaimFilter(action="a.limited")
    assert by_key["c.fast"].limit == 1200  # 50/s, but never above the catch-up rate (20/s)
    assert by_key[REST].limit == 1200  # the catch-up budget is the rest's own
    assert by_key[REST].claims == ClaimFilter(exclude=("a.limited", "c.fast"))


def test_partitions_share_each_lanes_budget_as_they_share_the_run_budget() -> None:
    shares = [
        plan_lanes(
            {"a.limited": 5},
            {},
            NOW,
            rest_limit=0,
            catch_up_rate=20,
            interval_s=61,
            cap=12_000,
            partition=p,
            partitions=3,
        )[0].limit
        for p in range(3)
    ]
    assert shares == [102, 102, 101] and sum(shares) == 305


def test_a_paused_action_claims_nothing_until_its_pause_ends_and_the_rest_leaves_it_out() -> None:
    until = NOW + timedelta(seconds=30)
    pauses = {"a.limited": until, "b.free": until, "d.old": NOW - timedelta(seconds=1)}
    lanes = plan_lanes(
        {"a.limited": 5}, pauses, NOW, rest_limit=1200, catch_up_rate=20, interval_s=60, cap=9_999
    )
    by_key = {lane.key: lane for lane in lanes}
    assert (by_key["a.limited"].limit, by_key["a.limited"].paused_until) == (0, until)
    assert (by_key["b.free"].limit, by_key["b.free"].paused) == (0, True)
    assert "d.old" not in by_key  # an ended pause is no pause
    assert by_key[REST].claims.exclude == ("a.limited", "b.free")
    # At the pause's end the lane claims again.
    later = plan_lanes(
        {"a.limited": 5}, pauses, until, rest_limit=1200, catch_up_rate=20, interval_s=60, cap=9_999
    )
    assert [(lane.key, lane.limit) for lane in later] == [("a.limited", 300), (REST, 1200)]


def test_pauses_beyond_the_not_in_limit_wait_oldest_first() -> None:
    pauses = {f"p.a{i:02d}": NOW + timedelta(seconds=10 + i) for i in range(12)}
    lanes = plan_lanes(
        {"a.limited": 5}, pauses, NOW, rest_limit=10, catch_up_rate=20, interval_s=60, cap=100
    )
    assert len(lanes[-1].claims.exclude) == MAX_LANES
    assert "p.a00" in lanes[-1].claims.exclude and "p.a11" not in lanes[-1].claims.exclude


def test_a_pause_lasts_the_retry_after_within_bounds() -> None:
    assert pause_until(NOW, 30) == NOW + timedelta(seconds=30)
    assert pause_until(NOW, 0) == NOW + MIN_PAUSE
    assert pause_until(NOW, 86_400) == NOW + MAX_PAUSE
    assert pause_until(NOW, math.inf) == NOW + MAX_PAUSE


def test_a_pause_is_written_only_when_it_ends_later_than_the_stored_one() -> None:
    until = NOW + timedelta(seconds=30)
    first = merged_pauses({}, "a.x", until, NOW)
    assert first == {"a.x": until}
    # The same window again (a burst of 429s): nothing to write.
    assert merged_pauses(first, "a.x", until + PAUSE_SLACK, NOW) is None
    # A later window extends it; ended pauses are dropped from the map on the way.
    stale = {**first, "b.y": NOW - timedelta(seconds=1)}
    assert merged_pauses(stale, "a.x", until + timedelta(minutes=1), NOW) == {
        "a.x": until + timedelta(minutes=1)
    }
    assert active_pauses(stale, NOW) == {"a.x": until}


def test_a_worker_process_writes_one_pause_per_window_not_one_per_job() -> None:
    book = PauseBook()
    until = NOW + timedelta(seconds=30)
    assert book.needs_write("a.x", until)
    assert not any(book.needs_write("a.x", until + timedelta(seconds=s)) for s in range(5))
    assert book.needs_write("b.y", until)  # another action's own window
    assert book.needs_write("a.x", until + timedelta(seconds=60))  # the next window
    book.forget("a.x")  # a failed write is tried again
    assert book.needs_write("a.x", until)


def test_the_control_document_carries_the_pauses_and_drops_malformed_ones() -> None:
    until = NOW + timedelta(seconds=30)
    control = Control(action_pauses={"a.x": until})
    assert Control.from_document(control.to_document()).action_pauses == {"a.x": until}
    assert pauses_from_document({"a.x": "soon", "b.y": until, 3: until}) == {"b.y": until}
    assert pauses_from_document(None) == {}
    # An operator change keeps the pauses (the worker wrote them).
    changed = control.changed(by="op", reason="slower", at=NOW, catch_up_rate=5)
    assert Control.from_document(changed.to_document()).action_pauses == {"a.x": until}


HTTP = "http.request"
TRIALS = lane_key(HTTP, "trials")


def test_a_target_lane_key_names_its_action_and_target() -> None:
    assert TRIALS == "http.request/trials"
    assert key_parts(TRIALS) == (HTTP, "trials")
    assert key_parts("media.delete_source") == ("media.delete_source", None)
    assert lane_label(TRIALS) == "http.request target trials"
    assert lane_label(REST) == "rest" and lane_label(HTTP) == HTTP


def test_a_rated_target_is_a_lane_and_the_actions_other_targets_claim_with_the_rest() -> None:
    lanes = plan_lanes(
        {TRIALS: 5, "a.limited": 2},
        {},
        NOW,
        rest_limit=1200,
        catch_up_rate=20,
        interval_s=60,
        cap=12_000,
    )
    by_key = {lane.key: lane for lane in lanes}
    assert set(by_key) == {TRIALS, "a.limited", REST}
    assert by_key[TRIALS].claims == ClaimFilter(action=HTTP, target="trials")
    assert (by_key[TRIALS].limit, by_key[TRIALS].rate_per_s) == (300, 5)
    # http.request has no rate: its other targets' jobs are a further part of the rest, which
    # leaves the action out of its own not-in.
    rest = by_key[REST].claims
    assert rest.exclude == ("a.limited", HTTP) and by_key[REST].limit == 1200
    assert rest.also == (ClaimFilter(action=HTTP, exclude_targets=("trials",)),)
    assert rest.parts() == (ClaimFilter(exclude=("a.limited", HTTP)), *rest.also)


def test_a_rated_action_keeps_its_unrated_targets_in_its_own_lane() -> None:
    lanes = plan_lanes(
        {TRIALS: 5, HTTP: 10}, {}, NOW, rest_limit=1200, catch_up_rate=20, interval_s=60, cap=99_999
    )
    by_key = {lane.key: lane for lane in lanes}
    assert by_key[HTTP].claims == ClaimFilter(action=HTTP, exclude_targets=("trials",))
    assert by_key[HTTP].limit == 600
    assert by_key[REST].claims == ClaimFilter(exclude=(HTTP,))


def test_a_targets_pause_holds_that_target_only_and_its_actions_pause_holds_every_target() -> None:
    until = NOW + timedelta(seconds=30)
    later = NOW + timedelta(seconds=90)
    lanes = plan_lanes(
        {}, {TRIALS: until}, NOW, rest_limit=1200, catch_up_rate=20, interval_s=60, cap=9_999
    )
    by_key = {lane.key: lane for lane in lanes}
    assert (by_key[TRIALS].limit, by_key[TRIALS].paused_until) == (0, until)
    assert by_key[TRIALS].claims == ClaimFilter(action=HTTP, target="trials")
    assert by_key[REST].claims.also == (ClaimFilter(action=HTTP, exclude_targets=("trials",)),)
    # The action's own pause (an older worker's, say) holds its target lanes as well.
    both = plan_lanes(
        {TRIALS: 5},
        {HTTP: later, TRIALS: until},
        NOW,
        rest_limit=1200,
        catch_up_rate=20,
        interval_s=60,
        cap=9_999,
    )
    by_key = {lane.key: lane for lane in both}
    assert by_key[TRIALS].paused_until == later and by_key[HTTP].paused_until == later
    assert by_key[REST].claims == ClaimFilter(exclude=(HTTP,))
    # Once the pauses end, the target lane claims at its rate again.
    after = plan_lanes(
        {TRIALS: 5}, {TRIALS: until}, later, rest_limit=1, catch_up_rate=20, interval_s=60, cap=999
    )
    assert [(lane.key, lane.limit) for lane in after] == [(TRIALS, 300), (REST, 1)]


def test_target_lanes_count_against_the_not_in_limit_and_the_refusal_names_the_keys() -> None:
    targets = {lane_key(HTTP, f"t{i:02d}"): 1.0 for i in range(MAX_LANES)}
    # Ten target lanes of an action without a rate of its own weigh eleven: it is refused,
    # naming the key beyond the limit.
    with pytest.raises(ValueError, match="at most 10") as refused:
        claim_rates(Catalogue(), targets)
    assert "http.request/t09" in str(refused.value)
    assert "http.request/t08" not in str(refused.value).split("beyond the limit:")[1]
    nine = dict(list(targets.items())[:9])
    assert claim_rates(Catalogue(), nine) == nine


def test_claim_filters_refuse_targets_without_their_action() -> None:
    with pytest.raises(ValueError):
        ClaimFilter(target="trials")
    with pytest.raises(ValueError):
        ClaimFilter(action=HTTP, target="trials", exclude_targets=("b",))
    with pytest.raises(ValueError):
        ClaimFilter(also=(ClaimFilter(action=HTTP),))
