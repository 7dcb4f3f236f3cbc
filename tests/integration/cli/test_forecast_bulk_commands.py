"""`jobsctl forecast` and `jobsctl bulk` on the emulator: the calendar's table and JSON, and an
action over a filter previewed, confirmed and applied with the operator in each history."""

from __future__ import annotations

from collections.abc import Callable
from datetime import UTC, datetime, timedelta

from services.jobs.state import State
from services.store.job_store import FirestoreJobStore
from tests.integration.cli.conftest import Jobsctl


def test_forecast_shows_the_hour_a_spike_falls_due(
    jobsctl: Jobsctl, seed: Callable[..., str]
) -> None:
    for n in range(6):
        seed(f"spike-{n}", due=timedelta(hours=5))
    seed("soon", due=timedelta(hours=1))
    run = jobsctl("forecast", "--horizon", "1d", "--json")
    assert run.code == 0, run.err
    data = run.json()
    spike_hour = (datetime.now(UTC) + timedelta(hours=5)).replace(minute=0, second=0, microsecond=0)
    index = data["windows"].index(spike_hour.isoformat())
    assert data["totals"][index] == 6 and sum(data["totals"]) == 7
    assert data["reads"] >= len(data["windows"])
    table = jobsctl("forecast", "--horizon", "1d")
    assert table.code == 0
    assert f"peak: 6 due at {spike_hour:%Y-%m-%d %H:%M}" in table.out
    assert "billed reads:" in table.out


def test_forecast_refuses_a_horizon_too_long_for_its_step(jobsctl: Jobsctl) -> None:
    run = jobsctl("forecast", "--horizon", "60d")
    assert run.code == 2 and "horizon: 1441 hours is more than 744 windows" in run.err


def test_bulk_previews_then_needs_the_count_typed_back_then_cancels_exactly_those(
    jobsctl: Jobsctl, seed: Callable[..., str], store: FirestoreJobStore
) -> None:
    for n in range(12):
        seed(f"cat-{n}", due=timedelta(hours=2), subject="media-cat")
    seed("dog", due=timedelta(hours=2), subject="media-dog")
    common = ("bulk", "cancel", "--state", "deferred", "--subject-prefix", "media-cat")
    preview = jobsctl(*common, "--json")
    assert preview.code == 0 and preview.json()["count"] == 12
    refused = jobsctl(*common, "--reason", "spam", "--apply", "--confirm-over", "10")
    assert refused.code == 2 and "confirm: type the number of jobs (12)" in refused.err
    applied = jobsctl(
        *common,
        "--reason",
        "spam",
        "--apply",
        "--confirm-over",
        "10",
        "--confirm",
        "12",
        "--batch",
        "5",
        "--json",
    )
    assert applied.code == 0, applied.err
    assert (applied.json()["changed"], applied.json()["batches"]) == (12, 3)
    job = store.get("cat-3")
    assert job is not None and job.state is State.CANCELLED
    assert job.history[-1].by == "operator:jobsctl:alice"
    dog = store.get("dog")
    assert dog is not None and dog.state is State.DEFERRED


def test_bulk_apply_needs_a_reason(jobsctl: Jobsctl) -> None:
    run = jobsctl("bulk", "cancel", "--state", "deferred", "--apply")
    assert run.code == 2 and "reason: required" in run.err
