"""The lease rules on a stored lease document (the Firestore side: tests/integration/scan)."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

from services.store.partition_leases import decide, lease_document_id

NOW = datetime(2026, 6, 1, 12, 0, tzinfo=UTC)
KEY = "scan@2026-06-01T12:00:00+00:00"


def held(until: datetime, execution: str | None = KEY, **more: object) -> dict[str, object]:
    return {"partition": 0, "holder": "run-a", "until": until, "execution": execution, **more}


def test_a_free_or_expired_lease_may_be_taken() -> None:
    assert decide(None, NOW, KEY) is None
    assert decide(held(NOW - timedelta(seconds=1)), NOW, "other") is None
    assert decide({"holder": None, "until": NOW + timedelta(hours=1)}, NOW, None) is None


def test_a_live_lease_refuses_another_run_as_an_overlap() -> None:
    refused = decide(held(NOW + timedelta(seconds=30)), NOW, None)
    assert refused is not None and refused.reason == "overlap" and refused.holder == "run-a"
    assert "leased by run run-a until 2026-06-01T12:00:30Z" in refused.describe()


def test_the_same_execution_is_a_duplicate_while_it_runs_and_after_it_finished() -> None:
    running = decide(held(NOW + timedelta(seconds=30)), NOW, KEY)
    assert running is not None and running.reason == "duplicate"
    finished = {"holder": None, "until": NOW, "finished": [KEY], "finished_by": "run-a"}
    after = decide(finished, NOW + timedelta(minutes=5), KEY)
    assert after is not None and after.reason == "duplicate" and after.holder == "run-a"
    # A run that failed is not remembered as finished: Cloud Scheduler's retry runs.
    assert decide({**finished, "finished": []}, NOW, KEY) is None


def test_lease_documents_are_per_partition() -> None:
    assert lease_document_id(0) == "lease-0" and lease_document_id(3) == "lease-3"
