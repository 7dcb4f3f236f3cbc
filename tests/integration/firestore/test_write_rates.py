"""The emulator's write-rate peaks per (collection, indexed timestamp field, shard), from real
commits: a field counts under shard None while an unsharded index (its single-field index, or a
composite without `shard` before it) holds it, under its shard for a sharded composite, and not
at all once no index of the active set holds it."""

from __future__ import annotations

from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
import requests

from emulators.firestore.server import Emulator

pytestmark = pytest.mark.builtin_emulator("write-rate counters")

T0 = datetime(2026, 1, 1, tzinfo=UTC)


def _rows(stats: dict[str, Any], collection: str) -> dict[tuple[str, Any], dict[str, Any]]:
    return {
        (r["field"], r["shard"]): r for r in stats["write_rates"] if r["collection"] == collection
    }


def _write_jobs(client: Any) -> None:
    batch = client.batch()
    for n in range(30):
        batch.set(
            client.collection("jobs").document(f"j{n}"),
            {
                "due_at": T0 + timedelta(seconds=n),
                "shard": n % 3,
                "state": "deferred",
                "created_at": T0,  # exempt at every N: never counted
                "claim": {"claimed_at": T0},  # in a composite index only
            },
        )
    batch.set(client.collection("jobs").document("plain"), {"state": "x"})
    batch.commit()


def test_one_shard_counts_the_unsharded_indexes_once_and_each_shard_of_the_sharded_ones(
    firestore_client: Any, firestore_stats: Any, shard_indexes: Callable[[int], None]
) -> None:
    shard_indexes(1)
    _write_jobs(firestore_client)
    rows = _rows(firestore_stats.get(), "jobs")
    # One commit has one commit time: all 30 writes fall in one second. due_at is held by its
    # single-field index and (state, due_at) — one range, shard None — and by (state, shard,
    # due_at) per shard; claim.claimed_at by (state, claim.claimed_at) and its sharded twin.
    assert {key: r["peak_writes_per_s"] for key, r in rows.items()} == {
        ("due_at", None): 30,
        ("due_at", 0): 10,
        ("due_at", 1): 10,
        ("due_at", 2): 10,
        ("claim.claimed_at", None): 30,
        ("claim.claimed_at", 0): 10,
        ("claim.claimed_at", 1): 10,
        ("claim.claimed_at", 2): 10,
    }


def test_above_one_shard_no_timestamp_counts_under_an_unsharded_range(
    firestore_client: Any, firestore_stats: Any, shard_indexes: Callable[[int], None]
) -> None:
    shard_indexes(4)
    _write_jobs(firestore_client)
    rows = _rows(firestore_stats.get(), "jobs")
    assert {key: r["writes"] for key, r in rows.items()} == {
        (field, shard): 10 for field in ("due_at", "claim.claimed_at") for shard in range(3)
    }


def test_a_collection_without_exemptions_counts_every_timestamp_unsharded_and_deletes_not(
    firestore_client: Any, firestore_stats: Any
) -> None:
    col = firestore_client.collection("events")
    batch = firestore_client.batch()
    for n in range(5):
        batch.set(col.document(f"e{n}"), {"at": T0, "created": T0, "shard": 1, "m": {"t": T0}})
    batch.commit()
    batch = firestore_client.batch()
    for n in range(5):
        batch.delete(col.document(f"e{n}"))
    batch.commit()

    rows = _rows(firestore_stats.get(), "events")
    assert set(rows) == {("at", None), ("created", None), ("m.t", None)}
    assert rows[("at", None)]["writes"] == 5
    assert rows[("at", None)]["peak_writes_per_s"] == 5


def test_reset_clears_the_peaks_and_the_admin_stats_answer_carries_them(
    firestore_emulator: Emulator, firestore_client: Any, firestore_project: str
) -> None:
    # No `state`: only (shard, due_at) and the single-field index hold due_at.
    firestore_client.collection("jobs").document("a").set({"due_at": T0, "shard": 4})
    url = f"{firestore_emulator.admin_url}/stats"
    answer = requests.get(url, params={"project": firestore_project}, timeout=10).json()
    rows = {(r["field"], r["shard"]): r["writes"] for r in answer["write_rates"]}
    assert rows == {("due_at", None): 1, ("due_at", 4): 1}
    requests.delete(url, params={"project": firestore_project}, timeout=10).raise_for_status()
    assert firestore_emulator.stats(firestore_project)["write_rates"] == []
