"""`jobsctl` run in-process against the Firestore (and Pub/Sub) emulators, output captured."""

from __future__ import annotations

import json
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from services.cli.app import main
from services.jobs.clock import FakeClock, SystemClock
from services.jobs.model import NewJob
from services.store.job_store import FirestoreJobStore


@dataclass(frozen=True)
class Run:
    code: int
    out: str
    err: str

    def json(self) -> Any:
        return json.loads(self.out)


Jobsctl = Callable[..., Run]


@pytest.fixture
def jobsctl(
    firestore_project: str, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> Jobsctl:
    """`jobsctl("list", "--state", "deferred")` → Run(code, out, err) for this test's project."""
    monkeypatch.setenv("JOBS_PROJECT", firestore_project)
    monkeypatch.setenv("JOBS_OPERATOR", "alice")

    def run(*argv: str) -> Run:
        capsys.readouterr()
        code = main(list(argv))
        captured = capsys.readouterr()
        return Run(code, captured.out, captured.err)

    return run


@pytest.fixture
def store(firestore_client: Any) -> FirestoreJobStore:
    return FirestoreJobStore(firestore_client, SystemClock())


@pytest.fixture
def seed(store: FirestoreJobStore) -> Callable[..., str]:
    """Schedule a job directly through the store: `seed("j1", due=timedelta(hours=-1))`."""

    def schedule(job_id: str, due: timedelta = timedelta(0), subject: str = "media-1") -> str:
        params = {"object": f"{subject}/source.mp4"}
        store.schedule(
            NewJob(job_id, "media.delete_source", subject, datetime.now(UTC) + due, params)
        )
        return job_id

    return schedule


@pytest.fixture
def past_store(firestore_client: Any) -> Iterator[FirestoreJobStore]:
    """A store whose clock reads one hour ago: its claims look abandoned to a real-time CLI."""
    yield FirestoreJobStore(firestore_client, FakeClock(datetime.now(UTC) - timedelta(hours=1)))
