"""Stores for the jobs integration tests: the real client on the built-in emulator, a FakeClock,
and a query observer that fails the test on any query no declared index serves."""

from __future__ import annotations

import threading
from collections.abc import Callable
from datetime import UTC, datetime, timedelta

import pytest
from google.cloud import firestore

from services.jobs import schema
from services.jobs.clock import FakeClock
from services.jobs.model import NewJob
from services.jobs.record import Job
from services.store.job_store import FirestoreJobStore
from services.store.queries import QuerySpec

T0 = datetime(2026, 1, 1, tzinfo=UTC)
ACTION = "media.delete_source"


class QueryLog:
    """Every query spec a store ran; refuses at once a shape that the index set of a
    deployment with `shards` shards does not serve, or that is not one of its query shapes."""

    def __init__(self, shards: int = 1) -> None:
        self.specs: list[QuerySpec] = []
        self._shapes = schema.query_shapes(shards)
        self._indexes, self._exemptions = schema.index_definitions(shards)

    def __call__(self, spec: QuerySpec) -> None:
        assert spec.shape in self._shapes, f"{spec.shape} is not a declared query shape"
        served = schema.is_served(spec.shape, self._indexes, self._exemptions)
        assert served, f"no declared index serves {spec.shape}"
        self.specs.append(spec)


@pytest.fixture
def clock() -> FakeClock:
    return FakeClock(T0)


@pytest.fixture
def query_log() -> QueryLog:
    return QueryLog()


@pytest.fixture
def store(
    firestore_client: firestore.Client, clock: FakeClock, query_log: QueryLog
) -> FirestoreJobStore:
    return FirestoreJobStore(firestore_client, clock, query_observer=query_log)


def params_for(job_id: str) -> dict[str, str]:
    """Params that fit media.delete_source's schema (services/jobs/params.py)."""
    return {"bucket": "media-src", "object": f"media-{job_id}/source.mp4"}


def new_job(job_id: str, due_at: datetime = T0, **extra: object) -> NewJob:
    return NewJob(job_id, ACTION, f"media-{job_id}", due_at, params_for(job_id), **extra)  # type: ignore[arg-type]


@pytest.fixture
def seed(firestore_client: firestore.Client, clock: FakeClock) -> Callable[..., list[str]]:
    """Write many deferred jobs fast with batched writes (what schedule would write)."""

    def write(count: int, due_at: datetime = T0, prefix: str = "job") -> list[str]:
        ids = [f"{prefix}-{n:06d}" for n in range(count)]
        for start in range(0, count, 500):
            batch = firestore_client.batch()
            for job_id in ids[start : start + 500]:
                job = Job.create(new_job(job_id, due_at).validated(), clock.now())
                batch.set(
                    firestore_client.collection(schema.JOBS).document(job_id), job.to_document()
                )
            batch.commit()
        return ids

    return write


def run_together(callers: int, target: Callable[[int], None]) -> list[BaseException]:
    """`target(i)` for each caller on its own thread, released at once by a barrier; the
    errors they raised (none lost inside a thread)."""
    errors: list[BaseException] = []
    start = threading.Barrier(callers)

    def run(index: int) -> None:
        try:
            start.wait()
            target(index)
        except BaseException as exc:  # reported to the test
            errors.append(exc)

    threads = [threading.Thread(target=run, args=(i,)) for i in range(callers)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    return errors


LEASE = timedelta(minutes=5)
WORKER = "worker-1"
