"""Pure rules of the emulator: backoff schedule, resource names, page tokens, fault plans."""

from __future__ import annotations

import grpc
import pytest

from emulators.pubsub import limits, names, pages
from emulators.pubsub.exceptions import InvalidArgument
from emulators.pubsub.faults import FaultPlan


@pytest.mark.parametrize(
    ("attempt", "expected"),
    [(1, 10.0), (2, 20.0), (3, 40.0), (6, 320.0), (7, 600.0), (50, 600.0), (10_000, 600.0)],
)
def test_backoff_doubles_from_minimum_and_is_capped_at_maximum(
    attempt: int, expected: float
) -> None:
    assert limits.backoff_s(attempt, 10.0, 600.0) == expected


def test_zero_minimum_backoff_means_immediate_redelivery() -> None:
    assert limits.backoff_s(5, 0.0, 600.0) == 0.0


@pytest.mark.parametrize(("minimum", "maximum"), [(-1.0, 10.0), (0.0, 601.0), (20.0, 10.0)])
def test_backoff_outside_production_range_is_refused(minimum: float, maximum: float) -> None:
    with pytest.raises(InvalidArgument):
        limits.check_backoff(minimum, maximum)


def test_resource_names_parse_into_project_and_id() -> None:
    parsed = names.subscription("projects/my-proj/subscriptions/worker-push")

    assert parsed == ("my-proj", "subscriptions", "worker-push")
    assert str(parsed) == "projects/my-proj/subscriptions/worker-push"


@pytest.mark.parametrize(
    "name",
    [
        "",
        "projects/p/topics",
        "projects/p/subscriptions/abc",
        "projects/p/topics/1abc",
        "projects/p/topics/googler",
        "projects/p/topics/has space",
        "projects/p/topics/abc/extra",
    ],
)
def test_malformed_topic_names_are_refused(name: str) -> None:
    with pytest.raises(InvalidArgument):
        names.topic(name)


def test_pages_cover_every_item_once() -> None:
    items = list(range(7))
    seen: list[int] = []
    token = ""
    while True:
        chunk, token = pages.page(items, 3, token)
        seen.extend(chunk)
        if not token:
            break

    assert seen == items


def test_foreign_page_token_is_refused() -> None:
    with pytest.raises(InvalidArgument):
        pages.page([1, 2], 1, "garbage")


def test_fault_plan_is_used_up_after_its_count() -> None:
    plan = FaultPlan()
    plan.add("Publish", status="unavailable", count=2)

    taken = [plan.take("Publish") for _ in range(3)]

    assert [f.status if f else None for f in taken] == [
        grpc.StatusCode.UNAVAILABLE,
        grpc.StatusCode.UNAVAILABLE,
        None,
    ]
    assert plan.take("Pull") is None


def test_fault_without_status_or_delay_is_refused() -> None:
    with pytest.raises(InvalidArgument):
        FaultPlan().add("Publish")
    with pytest.raises(InvalidArgument):
        FaultPlan().add("Publish", status="NOT_A_STATUS")
