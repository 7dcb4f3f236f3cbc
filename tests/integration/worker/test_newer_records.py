"""Forward compatibility at the worker (issue 24 finding 2): a push for a record written by a
simulated next version (a schema_version above this one's, an unknown state, an unknown state
in one history entry) is answered 503 so Pub/Sub redelivers it, logged once as
`job_from_newer_version`, and neither recorded as rejected nor written: the document keeps its
update_time. Before this change the worker acknowledged it (200) and recorded it as an
`invalid_record` rejection, dropping the newer version's job on a rollback."""

from __future__ import annotations

import logging
from typing import Any

import pytest
from google.cloud import firestore

from services.jobs import schema
from services.jobs.record import SCHEMA_VERSION
from services.telemetry import metrics
from tests.integration.worker.harness import WorkerHarness, envelope

# What a next version might write, as changes to an enqueued record this version wrote.
NEXT_VERSION: dict[str, dict[str, Any]] = {
    "schema_bump": {"schema_version": SCHEMA_VERSION + 1, "priority_class": "gold"},
    "unknown_state": {"state": "paused_by_policy"},
}


def _next_version_record(
    worker: WorkerHarness, client: firestore.Client, job_id: str
) -> tuple[int, Any]:
    """An enqueued job changed as the next version would write it: (generation, update_time)."""
    worker.schedule(job_id, worker.upload(f"src/{job_id}.mp4"))
    claimed = worker.claim_one(job_id)
    worker.enqueue(claimed)
    ref = client.collection(schema.JOBS).document(job_id)
    if job_id in NEXT_VERSION:
        ref.update(NEXT_VERSION[job_id])
    else:
        history = list((ref.get().to_dict() or {})["history"])
        history.append({**history[-1], "from": "enqueued", "to": "paused_by_policy"})
        ref.update({"history": history})
    return claimed.generation, ref.get().update_time


@pytest.mark.parametrize("job_id", [*NEXT_VERSION, "history_entry"])
def test_a_push_for_a_newer_record_is_redelivered_logged_and_leaves_it_untouched(
    worker: WorkerHarness,
    firestore_client: firestore.Client,
    caplog: pytest.LogCaptureFixture,
    job_id: str,
) -> None:
    generation, written = _next_version_record(worker, firestore_client, job_id)
    before = firestore_client.collection(schema.JOBS).document(job_id).get().to_dict()

    with caplog.at_level(logging.INFO):
        first = worker.post(envelope(job_id, generation))
        again = worker.post(envelope(job_id, generation, delivery_attempt=2))

    assert [first.status_code, again.status_code] == [503, 503]
    assert first.json()["outcome"] == "newer_record"
    assert worker.rejected_documents() == []
    after = firestore_client.collection(schema.JOBS).document(job_id).get()
    assert after.update_time == written and after.to_dict() == before
    assert worker.objects() == {f"src/{job_id}.mp4"}  # nothing acted on it
    events = [
        r
        for r in caplog.records
        if getattr(r, "fields", {}).get(metrics.LOG_EVENT) == metrics.EVENT_JOB_FROM_NEWER_VERSION
    ]
    assert len(events) == 2  # one per delivery: the metric counts deliveries that met one
    assert {r.levelno for r in events} == {logging.ERROR}
