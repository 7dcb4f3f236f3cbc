"""schedule refuses every job ID the worker's envelope would refuse, and writes nothing; a
record written past schedule with such an ID is quarantined by the claim (or the rescue),
never published (issue 33, finding 3)."""

from __future__ import annotations

from datetime import timedelta
from typing import Any

import pytest
from google.cloud import firestore

from services.jobs import schema
from services.jobs.clock import FakeClock
from services.jobs.errors import InvalidRecord, ValidationError
from services.jobs.record import Job
from services.jobs.transitions import INVALID_RECORD
from services.store.job_store import FirestoreJobStore
from services.worker.envelope import job_id_from
from services.worker.errors import MalformedDelivery
from tests.fixtures.store import stored_document
from tests.integration.jobs.conftest import T0, new_job

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


# What Firestore accepts as a document ID but a job ID may not be (finding 3's reproduction).
WRITTEN_PAST_SCHEDULE = [" lead", "trail ", "tab\tin", "new\nline", "bell\x07", "del\x7f"]


def _write_by_hand(client: firestore.Client, job_id: str, **changes: Any) -> None:
    """A deferred record as a producer in another language (or a migration) would write it,
    past `schedule`'s checks: the document of a valid job, stored under `job_id`."""
    job = Job.create(new_job("valid-id").validated(), T0 - timedelta(minutes=1))
    client.collection(schema.JOBS).document(job_id).set(job.replaced(**changes).to_document())


def test_a_record_with_an_invalid_job_id_is_quarantined_at_claim_and_never_published(
    store: FirestoreJobStore, firestore_client: firestore.Client
) -> None:
    for job_id in WRITTEN_PAST_SCHEDULE:
        _write_by_hand(firestore_client, job_id)
    store.schedule(new_job("good-1"))
    store.schedule(new_job("good-2"))
    seen: list[str] = []

    claimed = store.claim_due(
        store.clock.now(), "run-1", 10, page_size=3, on_quarantine=seen.append
    )

    assert sorted(c.job_id for c in claimed) == ["good-1", "good-2"]
    assert sorted(seen) == sorted(WRITTEN_PAST_SCHEDULE)
    for job_id in WRITTEN_PAST_SCHEDULE:
        raw = stored_document(firestore_client, job_id)
        assert raw is not None
        assert (raw["state"], raw["last_error"]["code"]) == ("failed", INVALID_RECORD)
        assert "job ID" in raw["last_error"]["message"]
        assert raw["quarantine"]["from_state"] == "deferred"
        assert raw["history"][-1]["to"] == "failed"
        with pytest.raises(InvalidRecord, match="job ID"):
            store.get(job_id)
    assert store.claim_due(store.clock.now(), "run-2", 10) == []


def test_an_enqueued_record_with_an_invalid_job_id_is_quarantined_not_rescued_again(
    store: FirestoreJobStore, firestore_client: firestore.Client, clock: FakeClock
) -> None:
    # Published by an older scan (no ID check at claim): the worker acknowledged it as
    # bad_job_id, so it stays enqueued until the rescue finds it.
    for job_id in WRITTEN_PAST_SCHEDULE:
        _write_by_hand(firestore_client, job_id)
    firestore_client.collection(schema.JOBS).document(" lead").update(
        {"state": "enqueued", "enqueued_at": T0 - timedelta(hours=1), "message_id": "m-1"}
    )
    clock.advance(timedelta(hours=2))

    report = store.reclaim_expired(
        clock.now(), timedelta(minutes=5), 10, "reclaimer", enqueued_timeout=timedelta(minutes=10)
    )

    assert " lead" in report.quarantined
    raw = stored_document(firestore_client, " lead")
    assert raw is not None and (raw["state"], raw["last_error"]["code"]) == (
        "failed",
        INVALID_RECORD,
    )
    assert store.claim_due(clock.now(), "run-1", 10) == []
