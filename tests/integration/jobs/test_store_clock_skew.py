"""A worker whose clock is far from Firestore's never takes a lease (issue 33, finding 8):
`start` compares the clock with the read_time of the read it makes anyway, and refuses with
ClockSkewed (the worker answers 503) beyond the store's `max_clock_skew`. Without the check, a
worker 90 s ahead took over a live 60 s lease and cost a max_attempts-1 job its only run."""

from __future__ import annotations

import logging
from datetime import UTC, datetime, timedelta

import pytest
from google.cloud import firestore

from services.jobs.clock import FakeClock
from services.jobs.errors import ClockSkewed, StoreUnavailable
from services.jobs.model import NewJob
from services.jobs.state import State
from services.store.job_store import FirestoreJobStore
from services.telemetry.metrics import EVENT_CLOCK_SKEW, LOG_EVENT
from tests.fixtures.store import mark_enqueued
from tests.integration.jobs.conftest import ACTION, params_for

LEASE = timedelta(seconds=60)
TOLERANCE = timedelta(seconds=10)


def _store(client: firestore.Client, offset: timedelta) -> FirestoreJobStore:
    """A store on a clock `offset` from the emulator's (the machine's) time."""
    clock = FakeClock(datetime.now(UTC) + offset)
    return FirestoreJobStore(client, clock, max_clock_skew=TOLERANCE)


def _enqueued(store: FirestoreJobStore, job_id: str) -> int:
    now = store.clock.now()
    store.schedule(
        NewJob(job_id, ACTION, f"media-{job_id}", now, params_for(job_id), max_attempts=1)
    )
    (claim,) = store.claim_due(now, "run-1", 10)
    mark_enqueued(store, job_id, claim.generation, f"msg-{job_id}")
    return claim.generation


def test_a_worker_90_seconds_ahead_does_not_take_over_a_live_lease(
    firestore_client: firestore.Client, caplog: pytest.LogCaptureFixture
) -> None:
    right = _store(firestore_client, timedelta(0))
    generation = _enqueued(right, "j")
    held = right.start("j", generation, LEASE, "worker-right")
    ahead = _store(firestore_client, timedelta(seconds=90))

    refused = r"ahead of Firestore's.*take-over refused"
    with caplog.at_level(logging.ERROR), pytest.raises(ClockSkewed, match=refused):
        ahead.start("j", generation, LEASE, "worker-ahead")

    job = right.get("j")
    assert job is not None
    assert (job.state, job.attempt, job.lease_token) == (State.RUNNING, 1, held.lease_token)
    (line,) = [
        r.fields  # type: ignore[attr-defined]
        for r in caplog.records
        if getattr(r, "fields", {}).get(LOG_EVENT) == EVENT_CLOCK_SKEW
    ]
    assert line["refused"] == "take-over"
    # The worker answers a StoreUnavailable with 503: Pub/Sub redelivers, maybe elsewhere.
    assert issubclass(ClockSkewed, StoreUnavailable)


def test_a_worker_far_behind_takes_no_lease_either(firestore_client: firestore.Client) -> None:
    # Its lease would end 90 s early in Firestore's time: another delivery would take over
    # while it still acts. The start's commit time tells: the start is given back at once
    # (enqueued, same attempt) for Pub/Sub's redelivery.
    right = _store(firestore_client, timedelta(0))
    generation = _enqueued(right, "j")
    behind = _store(firestore_client, timedelta(seconds=-90))
    with pytest.raises(ClockSkewed, match=r"behind Firestore's.*start refused"):
        behind.start("j", generation, LEASE, "worker-behind")
    job = right.get("j")
    assert job is not None
    assert (job.state, job.attempt, job.lease_token) == (State.ENQUEUED, 1, None)
    assert job.last_error is not None and job.last_error.code == "clock_skew"
    assert right.start("j", generation, LEASE, "worker-right").state is State.RUNNING


def test_a_worker_within_the_tolerance_starts(firestore_client: firestore.Client) -> None:
    right = _store(firestore_client, timedelta(seconds=2))
    generation = _enqueued(right, "j")
    assert right.start("j", generation, LEASE, "worker").state is State.RUNNING
