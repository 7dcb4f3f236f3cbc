"""Failures on the emulators: publish errors, outages, and a crash between claim and publish.
No ID is ever dropped: each job ends up published exactly once."""

from __future__ import annotations

import socket
from collections.abc import Callable, Iterator
from concurrent import futures
from datetime import timedelta
from typing import Any

import pytest

from services.edge.publisher import Publisher
from services.jobs.clock import FakeClock
from services.jobs.state import State
from tests.integration.scan.conftest import T0, TOPIC, Rig


def job_ids(count: int) -> list[str]:
    return [f"job-{n:06d}" for n in range(count)]


@pytest.mark.builtin_emulator("fault injection")
def test_failed_publishes_go_back_to_deferred_with_the_error_and_publish_once_later(
    scan_rig: Callable[..., Rig], pubsub_emulator: Any
) -> None:
    # Small batches: the one injected Publish failure fails one batch, not the whole page.
    first = scan_rig(max_per_run=10, page_size=10)
    publisher = Publisher.create(first.project, TOPIC, timeout_s=5, max_messages=5)
    rig = scan_rig(max_per_run=10, page_size=10, clock=first.clock, publisher=publisher)
    ids = rig.seed(10)
    pubsub_emulator.inject_fault("Publish", "PERMISSION_DENIED", count=1)
    summary = rig.scan()
    jobs = {i: rig.store.get(i) for i in ids}
    failed = sorted(i for i, j in jobs.items() if j and j.state is State.DEFERRED)
    assert 1 <= len(failed) <= 5
    assert (summary["claimed"], summary["published"], summary["publish_failed"]) == (
        10,
        10 - len(failed),
        len(failed),
    )
    run = rig.runs.get(summary["run_id"])
    assert run is not None and sorted(run.failed_ids) == failed
    for job_id in failed:
        job = jobs[job_id]
        assert job is not None and job.last_error is not None
        assert job.last_error.code == "PERMISSION_DENIED"
        last = job.history[-1]
        assert (last.from_state, last.to_state) == (State.CLAIMED, State.DEFERRED)
        assert "publish failed" in last.reason
    assert set(rig.pull()) == set(ids) - set(failed)

    later = rig.scan()
    n = len(failed)
    assert (later["claimed"], later["published"], later["publish_failed"]) == (n, n, 0)
    pulled = rig.pull()
    assert set(pulled) == set(ids) and set(pulled.values()) == {1}
    assert [rig.generations[i] for i in failed] == [[2]] * n  # the retry is a new claim
    assert rig.states(ids) == {"enqueued": 10}


@pytest.mark.builtin_emulator("fault injection")
def test_transient_publish_errors_are_retried_within_the_publish_timeout(
    scan_rig: Callable[..., Rig], pubsub_emulator: Any
) -> None:
    rig = scan_rig(max_per_run=20, page_size=20)
    ids = rig.seed(20)
    pubsub_emulator.inject_fault("Publish", "UNAVAILABLE", count=2)
    summary = rig.scan()
    assert (summary["published"], summary["publish_failed"]) == (20, 0)
    assert set(rig.pull()) == set(ids)


@pytest.mark.builtin_emulator("fault injection")
def test_a_run_whose_every_publish_fails_answers_503_and_drops_no_job(
    scan_rig: Callable[..., Rig], pubsub_emulator: Any
) -> None:
    rig = scan_rig(max_per_run=100, page_size=20)
    ids = rig.seed(50)
    pubsub_emulator.inject_fault("Publish", "PERMISSION_DENIED", count=1000)
    response = rig.post()
    body = response.get_json()
    assert response.status_code == 503
    assert body["error"] == "pubsub unavailable"
    # The first page failed entirely, so the run stopped rather than churn the backlog.
    assert (body["claimed"], body["publish_failed"], body["stopped_because"]) == (
        20,
        20,
        "unavailable",
    )
    assert rig.states(ids) == {"deferred": 50}
    assert len(rig.sink.reports) == 1  # the failed run is still measured and reported
    pubsub_emulator.clear_faults()
    assert rig.scan()["published"] == 50
    assert set(rig.pull().values()) == {1}


@pytest.fixture
def dead_address() -> Iterator[str]:
    """A 127.0.0.1 port nothing listens on (bound, then closed)."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    yield f"127.0.0.1:{port}"


def test_unreachable_pubsub_answers_503_and_keeps_the_jobs(
    scan_rig: Callable[..., Rig], monkeypatch: pytest.MonkeyPatch, dead_address: str
) -> None:
    first = scan_rig()
    with monkeypatch.context() as patch:
        patch.setenv("PUBSUB_EMULATOR_HOST", dead_address)
        publisher = Publisher.create(first.project, TOPIC, timeout_s=1.0)
    rig = scan_rig(clock=first.clock, publisher=publisher, page_size=10)
    ids = rig.seed(10)
    response = rig.post()
    assert response.status_code == 503
    assert response.get_json()["error"] == "pubsub unavailable"
    jobs = [rig.store.get(i) for i in ids]
    assert all(j and j.state is State.DEFERRED and j.last_error for j in jobs)


@pytest.mark.builtin_emulator("fault injection")
def test_refused_firestore_is_a_configuration_error_not_an_outage(
    scan_rig: Callable[..., Rig], firestore_emulator: Any, caplog: pytest.LogCaptureFixture
) -> None:
    # Issue 11 point 11: a missing role answered 503 "firestore unavailable".
    rig = scan_rig()
    rig.seed(3)
    firestore_emulator.inject_fault("BatchGetDocuments", "PERMISSION_DENIED")
    try:
        response = rig.post()
    finally:
        firestore_emulator.clear_faults()
    assert response.status_code == 500
    assert response.get_json()["error"] == "firestore refused"
    assert "PermissionDenied" in response.get_json()["detail"]
    events = [getattr(r, "fields", {}).get("event") for r in caplog.records]
    assert "store_rejected" in events
    assert "firestore unavailable" not in caplog.text
    assert rig.pull() == {}


class Crash(BaseException):
    """The process dying (OOM, SIGKILL) right after the claim committed."""


class CrashingPublisher:
    timeout_s = 1.0

    def publish(self, job_id: str, generation: int, run_id: str) -> futures.Future[str]:
        raise Crash(f"died before publishing {job_id}")

    def close(self) -> None:
        return None


def test_a_crash_between_claim_and_publish_is_reclaimed_after_the_timeout_and_published_once(
    scan_rig: Callable[..., Rig],
) -> None:
    clock = FakeClock(T0 + timedelta(minutes=1))
    # Direct: the crash is a BaseException raised through Flask's test client in this process.
    crashing = scan_rig(
        clock=clock, publisher=CrashingPublisher(), page_size=10, max_per_run=10, cloud_run=False
    )
    ids = crashing.seed(10)
    with pytest.raises(Crash):
        crashing.post()
    assert crashing.states(ids) == {"claimed": 10}

    rig = scan_rig(clock=clock, page_size=10, max_per_run=10)
    early = rig.scan()  # within the claim timeout: the claims are left alone
    assert (early["reclaimed"], early["claimed"], early["stuck_claims"]) == (0, 0, 0)

    clock.advance(timedelta(seconds=rig.settings.claim_timeout_s + 1))
    measured = rig.scan('{"dry_run": true}')
    assert (measured["stuck_claims"], measured["reclaimed"]) == (10, 0)

    summary = rig.scan()
    assert (summary["reclaimed"], summary["claimed"], summary["published"]) == (10, 10, 10)
    pulled = rig.pull()
    assert set(pulled) == set(ids) and set(pulled.values()) == {1}
    assert {tuple(g) for g in rig.generations.values()} == {(2,)}
    for job_id in ids:
        job = rig.store.get(job_id)
        assert job is not None and job.state is State.ENQUEUED
        audit = [h for h in job.history if h.by.startswith("reclaimer")]
        assert len(audit) == 1
        assert (audit[0].from_state, audit[0].to_state) == (State.CLAIMED, State.DEFERRED)
