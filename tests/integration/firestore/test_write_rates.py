"""The emulator's write-rate peaks per (collection, timestamp field, shard), from real commits."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

import requests

from emulators.firestore.server import Emulator

T0 = datetime(2026, 1, 1, tzinfo=UTC)


def _rows(stats: dict[str, Any], collection: str) -> dict[tuple[str, Any], dict[str, Any]]:
    return {
        (r["field"], r["shard"]): r for r in stats["write_rates"] if r["collection"] == collection
    }


def test_one_commit_counts_each_timestamp_field_once_per_document_by_shard(
    firestore_client: Any, firestore_stats: Any
) -> None:
    batch = firestore_client.batch()
    for n in range(30):
        batch.set(
            firestore_client.collection("jobs").document(f"j{n}"),
            {"due_at": T0 + timedelta(seconds=n), "shard": n % 3, "state": "deferred"},
        )
    batch.set(firestore_client.collection("jobs").document("plain"), {"state": "x"})
    batch.commit()

    rows = _rows(firestore_stats.get(), "jobs")
    # One commit has one commit time: all 30 writes fall in one second.
    assert {key: r["peak_writes_per_s"] for key, r in rows.items()} == {
        ("due_at", 0): 10,
        ("due_at", 1): 10,
        ("due_at", 2): 10,
    }
    assert {r["writes"] for r in rows.values()} == {10}


def test_documents_without_a_shard_count_under_none_and_deletes_not_at_all(
    firestore_client: Any, firestore_stats: Any
) -> None:
    col = firestore_client.collection("events")
    batch = firestore_client.batch()
    for n in range(5):
        batch.set(col.document(f"e{n}"), {"at": T0, "created": T0})
    batch.commit()
    batch = firestore_client.batch()
    for n in range(5):
        batch.delete(col.document(f"e{n}"))
    batch.commit()

    rows = _rows(firestore_stats.get(), "events")
    assert set(rows) == {("at", None), ("created", None)}
    assert rows[("at", None)]["writes"] == 5
    assert rows[("at", None)]["peak_writes_per_s"] == 5


def test_reset_clears_the_peaks_and_the_admin_stats_answer_carries_them(
    firestore_emulator: Emulator, firestore_client: Any, firestore_project: str
) -> None:
    firestore_client.collection("jobs").document("a").set({"due_at": T0, "shard": 4})
    url = f"{firestore_emulator.admin_url}/stats"
    answer = requests.get(url, params={"project": firestore_project}, timeout=10).json()
    assert answer["write_rates"] == [
        {"collection": "jobs", "field": "due_at", "shard": 4, "peak_writes_per_s": 1, "writes": 1}
    ]
    requests.delete(url, params={"project": firestore_project}, timeout=10).raise_for_status()
    assert firestore_emulator.stats(firestore_project)["write_rates"] == []
