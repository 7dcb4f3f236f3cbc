"""Forward compatibility (issue 24 finding 2): records written by a simulated next version of
the code (a schema_version above this one's with a field it does not know, an unknown state,
an unknown state in one history entry) meet today's decoder in every path that quarantines
(claim, reclaim, quarantine itself) and are left exactly as found, logged with their own
event; a record of a known version that is really malformed is still quarantined."""

from __future__ import annotations

import logging
from datetime import timedelta
from typing import Any

import pytest
from google.cloud import firestore

from services.jobs import schema
from services.jobs.clock import FakeClock
from services.jobs.errors import InvalidRecord, NewerRecord
from services.jobs.record import SCHEMA_VERSION, decode_job
from services.jobs.state import Role
from services.store.job_store import FirestoreJobStore
from services.telemetry import metrics
from tests.integration.jobs.conftest import T0, new_job

# What a next version might write, as changes to a record this version wrote.
NEXT_VERSION: dict[str, dict[str, Any]] = {
    "schema_bump": {"schema_version": SCHEMA_VERSION + 1, "priority_class": "gold"},
    "unknown_state": {"state": "paused_by_policy"},
}


def _raw(client: firestore.Client, job_id: str) -> dict[str, Any]:
    return client.collection(schema.JOBS).document(job_id).get().to_dict() or {}


def _write_next_version(store: FirestoreJobStore, client: firestore.Client) -> list[str]:
    ids = []
    for name, change in NEXT_VERSION.items():
        store.schedule(new_job(name, T0))
        client.collection(schema.JOBS).document(name).update(change)
        ids.append(name)
    store.schedule(new_job("history_entry", T0))
    raw = _raw(client, "history_entry")
    history = list(raw["history"])
    history.append({**history[-1], "from": "deferred", "to": "paused_by_policy"})
    client.collection(schema.JOBS).document("history_entry").update({"history": history})
    ids.append("history_entry")
    return ids


def test_todays_decoder_names_a_next_version_record_newer_not_malformed(
    store: FirestoreJobStore, firestore_client: firestore.Client
) -> None:
    for job_id in _write_next_version(store, firestore_client):
        with pytest.raises(NewerRecord):
            decode_job(job_id, _raw(firestore_client, job_id))


def test_claim_reclaim_and_quarantine_leave_a_newer_record_untouched_and_log_it(
    store: FirestoreJobStore,
    firestore_client: firestore.Client,
    clock: FakeClock,
    caplog: pytest.LogCaptureFixture,
) -> None:
    ids = _write_next_version(store, firestore_client)
    before = {job_id: _raw(firestore_client, job_id) for job_id in ids}
    clock.set(T0 + timedelta(hours=2))
    quarantined: list[str] = []
    with caplog.at_level(logging.ERROR):
        claimed = store.claim_due(clock.now(), "run-1", 10, on_quarantine=quarantined.append)
        report = store.reclaim_expired(clock.now(), timedelta(minutes=10), 10, "run-1")
        moved = [store._docs.quarantine(job_id, Role.SCAN, "run-1") for job_id in ids]
    assert [c.job_id for c in claimed] == []  # the two decodable-looking ones were left
    assert quarantined == [] and report.quarantined == () and moved == [False] * 3
    assert {job_id: _raw(firestore_client, job_id) for job_id in ids} == before
    events = [
        getattr(r, "fields", {}).get(metrics.LOG_EVENT) == metrics.EVENT_JOB_FROM_NEWER_VERSION
        for r in caplog.records
    ]
    assert sum(events) >= 3


def test_a_malformed_record_of_a_known_version_is_still_quarantined(
    store: FirestoreJobStore, firestore_client: firestore.Client
) -> None:
    store.schedule(new_job("broken", T0))
    firestore_client.collection(schema.JOBS).document("broken").update({"state": 42})
    with pytest.raises(InvalidRecord) as raised:
        decode_job("broken", _raw(firestore_client, "broken"))
    assert not isinstance(raised.value, NewerRecord)
    assert store._docs.quarantine("broken", Role.SCAN, "run-1")
    assert _raw(firestore_client, "broken")["state"] == "failed"
