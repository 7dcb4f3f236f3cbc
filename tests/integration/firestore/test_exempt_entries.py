"""A strict emulator keeps single-field entries only for the fields its index set leaves
indexed, as production does, written through the real client: the jobs collection's exempted
fields hold none, and serving the project from another deployment's set moves them."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

import pytest
from google.cloud.firestore_v1.base_query import FieldFilter

from emulators.firestore.server import Emulator
from services.jobs import schema

DUE = datetime(2027, 1, 1, tzinfo=UTC)
FIELDS = {"state": "deferred", "due_at": DUE, "shard": 0, "subject": "s", "params": {"b": 1}}


def _with_entries(emulator: Emulator, project: str) -> set[str]:
    db = emulator.engine.databases[(project, "(default)")]
    return {
        ".".join(path)
        for (cid, path), by_value in db.eq_index.items()
        if cid == schema.JOBS and by_value
    }


def _indexed(shards: int) -> set[str]:
    """The fields of FIELDS (and inside its maps) no exemption of that deployment covers."""
    exempt = {e.field for e in schema.index_definitions(shards)[1] if e.collection == schema.JOBS}
    paths = {
        *FIELDS,
        *(f"{k}.{inner}" for k, v in FIELDS.items() if isinstance(v, dict) for inner in v),
    }
    return {p for p in paths if p.split(".")[0] not in exempt}


@pytest.mark.builtin_emulator("reads the built-in engine's index entries")
def test_exempted_fields_hold_no_single_field_entries(
    firestore_emulator: Emulator, firestore_client: Any, firestore_project: str, shard_indexes: Any
) -> None:
    jobs = firestore_client.collection(schema.JOBS)
    jobs.document("a").set(FIELDS)
    assert _indexed(1) == {"state", "due_at"}  # what N = 1 queries lean on
    assert _with_entries(firestore_emulator, firestore_project) == _indexed(1)
    shard_indexes(4)  # the services' queries at N = 4: due_at exempt too
    assert _indexed(4) == {"state"}
    assert _with_entries(firestore_emulator, firestore_project) == _indexed(4)
    query = jobs.where(filter=FieldFilter("state", "==", "deferred"))
    assert [s.id for s in query.stream()] == ["a"]
