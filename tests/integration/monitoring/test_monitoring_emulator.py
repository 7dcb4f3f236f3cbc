"""The Monitoring emulator through the official `MetricServiceClient`: what it serves (the
oldest-unacked-age series of one subscription, sampled every 60 s, visible 120 s later, newest
point first) and what it refuses, with the status codes Google's API uses."""

from __future__ import annotations

from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
from google.api_core import exceptions as gexc
from google.cloud import monitoring_v3

from emulators.monitoring.server import MonitoringEmulator, start
from services.jobs.clock import FakeClock
from services.scan.queue_age import OLDEST_UNACKED_AGE, MonitoringQueueAge, monitoring_client

T0 = datetime(2026, 6, 1, 12, 0, tzinfo=UTC)
PROJECT = "p1"
PATH = f"projects/{PROJECT}/subscriptions/jobs-push"


@pytest.fixture
def clock() -> FakeClock:
    return FakeClock(T0)


@pytest.fixture
def oldest() -> dict[str, float | None]:
    return {PATH: None, f"projects/{PROJECT}/subscriptions/other": None}


@pytest.fixture
def emulator(clock: FakeClock, oldest: dict[str, float | None]) -> Iterator[MonitoringEmulator]:
    emulator = start(lambda: oldest, clock=lambda: clock.now().timestamp(), autosample=False)
    try:
        yield emulator
    finally:
        emulator.stop()


@pytest.fixture
def client(emulator: MonitoringEmulator) -> Any:
    return monitoring_client(emulator.address)


def _list(client: Any, clock: FakeClock, filter: str, **request: Any) -> list[Any]:
    interval = monitoring_v3.TimeInterval(
        start_time=clock.now() - timedelta(minutes=10), end_time=clock.now()
    )
    return list(
        client.list_time_series(
            request={
                "name": f"projects/{PROJECT}",
                "filter": filter,
                "interval": interval,
                **request,
            }
        )
    )


def _filter(subscription: str = "jobs-push") -> str:
    return (
        f'metric.type = "{OLDEST_UNACKED_AGE}" AND resource.type = "pubsub_subscription" AND '
        f'resource.labels.subscription_id = "{subscription}"'
    )


def test_points_appear_every_sample_only_once_visible_newest_first(
    emulator: MonitoringEmulator, client: Any, clock: FakeClock, oldest: dict[str, float | None]
) -> None:
    oldest[PATH] = (T0 - timedelta(seconds=30)).timestamp()
    assert emulator.samples.tick()  # the first sample is taken at once
    clock.advance(timedelta(seconds=59))
    assert not emulator.samples.tick()  # the next one a period later
    clock.advance(timedelta(seconds=1))
    assert emulator.samples.tick()
    assert _list(client, clock, _filter()) == []  # 120 s after its sample, not before

    clock.advance(timedelta(seconds=120))
    (series,) = _list(client, clock, _filter())

    assert series.resource.labels["subscription_id"] == "jobs-push"
    assert series.metric.type == OLDEST_UNACKED_AGE
    assert [p.value.int64_value for p in series.points] == [90, 30]
    assert series.points[0].interval.end_time == T0 + timedelta(seconds=60)
    age = MonitoringQueueAge(client, PROJECT, "jobs-push", clock).oldest_unacked()
    assert age is not None and age.oldest_unacked_age_s == 90


def test_an_empty_subscription_reads_zero_and_another_subscription_is_not_listed(
    emulator: MonitoringEmulator, client: Any, clock: FakeClock
) -> None:
    emulator.samples.sample()
    clock.advance(timedelta(seconds=120))
    (series,) = _list(client, clock, _filter())
    assert [p.value.int64_value for p in series.points] == [0]
    assert _list(client, clock, _filter("missing")) == []


@pytest.mark.parametrize(
    ("filter", "error"),
    [
        ("", gexc.InvalidArgument),
        ("metric.type = ", gexc.InvalidArgument),
        ('resource.type = "pubsub_subscription"', gexc.InvalidArgument),
        (
            'metric.type = "pubsub.googleapis.com/subscription/num_undelivered_messages"',
            gexc.MethodNotImplemented,
        ),
        (
            f'metric.type = "{OLDEST_UNACKED_AGE}" AND metric.labels.x = "y"',
            gexc.MethodNotImplemented,
        ),
    ],
)
def test_what_it_does_not_serve_is_refused_with_googles_codes(
    client: Any, clock: FakeClock, filter: str, error: type[Exception]
) -> None:
    with pytest.raises(error):
        _list(client, clock, filter)


def test_a_missing_end_time_an_aggregation_and_other_methods_are_refused(client: Any) -> None:
    with pytest.raises(gexc.InvalidArgument):
        list(client.list_time_series(request={"name": f"projects/{PROJECT}", "filter": _filter()}))
    with pytest.raises(gexc.MethodNotImplemented):
        list(
            client.list_time_series(
                request={
                    "name": f"projects/{PROJECT}",
                    "filter": _filter(),
                    "interval": {"end_time": T0},
                    "aggregation": {"alignment_period": {"seconds": 60}},
                }
            )
        )
    with pytest.raises(gexc.MethodNotImplemented):
        client.list_metric_descriptors(request={"name": f"projects/{PROJECT}"})


def test_an_unavailable_api_reads_as_no_age(clock: FakeClock) -> None:
    # Nothing listens there: the source says "unknown" and the rescue is skipped, never raised.
    client = monitoring_client("127.0.0.1:9")
    source = MonitoringQueueAge(client, PROJECT, "jobs-push", clock, timeout_s=2.0)
    assert source.oldest_unacked() is None
