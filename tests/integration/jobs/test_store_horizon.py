"""The store refuses a due time outside horizon.py's window (1970-01-01 to ten years after its
clock's now) on schedule, schedule_many and reschedule, whoever calls it, and writes nothing."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest

from services.jobs.clock import FakeClock
from services.jobs.errors import ValidationError
from services.jobs.horizon import EARLIEST_DUE_AT, MAX_AHEAD
from services.jobs.model import NewJob
from services.store.job_store import FirestoreJobStore
from tests.integration.jobs.conftest import T0

PARAMS = {"bucket": "media-src", "object": "m/source.mp4"}
OUTSIDE = [
    datetime(1, 1, 1, tzinfo=UTC),
    EARLIEST_DUE_AT - timedelta(microseconds=1),
    T0 + MAX_AHEAD + timedelta(seconds=1),
    datetime(9999, 12, 31, tzinfo=UTC),
]


def job(job_id: str, due_at: datetime) -> NewJob:
    return NewJob(job_id, "media.delete_source", "m", due_at, PARAMS)


@pytest.mark.parametrize("due_at", OUTSIDE, ids=str)
def test_schedule_outside_the_horizon_is_refused(
    store: FirestoreJobStore, clock: FakeClock, due_at: datetime
) -> None:
    with pytest.raises(ValidationError, match="due_at"):
        store.schedule(job("far", due_at))
    assert store.get("far") is None
    [outcome, _] = store.schedule_many([job("far-many", due_at), job("near", T0)])
    assert isinstance(outcome, ValidationError)
    assert store.get("far-many") is None and store.get("near") is not None


def test_the_edges_are_accepted_and_reschedule_obeys_the_same_rule(
    store: FirestoreJobStore,
) -> None:
    assert store.schedule(job("first", EARLIEST_DUE_AT)).created
    assert store.schedule(job("last", T0 + MAX_AHEAD)).created
    with pytest.raises(ValidationError, match="more than 10 years ahead"):
        store.reschedule("first", T0 + MAX_AHEAD + timedelta(days=1), "later", "operator:me")
    stored = store.get("first")
    assert stored is not None and stored.due_at == EARLIEST_DUE_AT
