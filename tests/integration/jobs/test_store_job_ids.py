"""schedule refuses every job ID the worker's envelope would refuse, and writes nothing."""

from __future__ import annotations

from typing import Any

import pytest

from services.jobs.errors import ValidationError
from services.store.job_store import FirestoreJobStore
from services.worker.envelope import job_id_from
from services.worker.errors import MalformedDelivery
from tests.integration.jobs.conftest import new_job

UNDELIVERABLE = [
    " leading-space",
    "trailing-space ",
    "tab\tinside",
    "\ttab-first",
    "new\nline",
    "carriage\rreturn",
    "nul\x00inside",
    "bell\x07",
    "delete\x7f",
    "c1\x85control",
    "trailing-nbsp\u00a0",
    "\u2003em-space-first",
]


@pytest.mark.builtin_emulator("billing counters")
@pytest.mark.parametrize("job_id", UNDELIVERABLE, ids=repr)
def test_schedule_refuses_a_job_id_the_worker_could_not_receive_and_writes_nothing(
    store: FirestoreJobStore, firestore_stats: Any, job_id: str
) -> None:
    with pytest.raises(MalformedDelivery):
        job_id_from(job_id.encode("utf-8"))
    firestore_stats.reset()
    with pytest.raises(ValidationError, match="job ID"):
        store.schedule(new_job(job_id))
    assert firestore_stats.get()["document_writes"] == 0
    assert store.get(job_id) is None
