"""The record's size as Firestore counts it, and the headroom a job's life needs (issue 33,
finding 2): every record `schedule` accepts leaves it; one written past `schedule` that does not
is named by the field that makes it large."""

from __future__ import annotations

from datetime import UTC, datetime

import pytest

from services.api.errors import field_of
from services.jobs import schema
from services.jobs.ids import MAX_ID_BYTES
from services.jobs.limits import (
    LIFE_BYTES,
    MAX_DOCUMENT_BYTES,
    document_bytes,
    json_bytes,
    life_headroom_problem,
    stored_bytes,
)
from services.jobs.model import MAX_PARAMS_BYTES, MAX_SUBJECT_BYTES, NewJob
from services.jobs.record import Job

T0 = datetime(2026, 1, 1, tzinfo=UTC)


def test_a_document_is_counted_as_firestores_storage_size_page_counts_it() -> None:
    # https://cloud.google.com/firestore/docs/storage-size: the page's example fields (71
    # bytes), in a top-level collection "tasks": name 6 + 11 + 16, + 32.
    fields = {
        "type": "Personal",
        "done": False,
        "priority": 1,
        "description": "Learn Cloud Firestore",
    }
    assert sum(stored_bytes(k) + stored_bytes(v) for k, v in fields.items()) == 71
    assert document_bytes("tasks", "my_task_id", fields) == 33 + 71 + 32


def _largest_schedulable(params: dict[str, object]) -> dict[str, object]:
    """The record `schedule` writes, every field at its bound, with `params` (any action's
    params within the generic bound: an action's schema only narrows them)."""
    assert json_bytes(params) <= MAX_PARAMS_BYTES
    job_id = "j" * MAX_ID_BYTES
    new = NewJob(job_id, "media.delete_source", "s" * MAX_SUBJECT_BYTES, T0, {"object": "o"})
    document = Job.create(new.validated(), T0).to_document()
    document["params"] = params
    document["idempotency_key"] = "k" * MAX_ID_BYTES
    document["producer"] = "p" * 320  # an email address at its longest
    return document


@pytest.mark.parametrize(
    "unit",
    [
        "x",  # text: a JSON byte is one stored byte
        [0],  # one-digit integers: 2 JSON bytes (with the comma) stored as 8
        [{}],  # empty maps: 3 JSON bytes, counted here as 32
    ],
    ids=["text", "integers", "empty-maps"],
)
def test_every_record_schedule_accepts_has_room_for_its_whole_life(
    unit: str | list[object],
) -> None:
    def params(count: int) -> dict[str, object]:
        return {"object": "m/o.mp4", "f": unit * count}

    count = 1  # the most units the generic 16 KiB bound on params lets through
    while json_bytes(params(count * 2)) <= MAX_PARAMS_BYTES:
        count *= 2
    step = count
    while step:
        if json_bytes(params(count + step)) <= MAX_PARAMS_BYTES:
            count += step
        step //= 2
    document = _largest_schedulable(params(count))
    assert life_headroom_problem(schema.JOBS, "j" * MAX_ID_BYTES, document) is None


def test_a_record_too_large_for_its_life_is_named_by_its_largest_field() -> None:
    document = _largest_schedulable({"object": "m/o.mp4"})
    document["params"] = {"note": "x" * (MAX_DOCUMENT_BYTES - LIFE_BYTES)}  # past schedule
    problem = life_headroom_problem(schema.JOBS, "j", document)
    assert problem is not None
    assert problem.startswith("params makes the record of job 'j' ")
    assert str(MAX_DOCUMENT_BYTES - LIFE_BYTES) in problem
    assert field_of(problem) == "params"  # the API's 400 names the field


def test_the_fields_a_life_writes_do_not_count_against_the_record() -> None:
    # A record that already holds a large result or progress is within its bounds: the life
    # replaces those fields, it never adds a second one.
    document = _largest_schedulable({"object": "m/o.mp4"})
    document["progress"] = {"note": "x" * (MAX_DOCUMENT_BYTES - LIFE_BYTES)}
    assert life_headroom_problem(schema.JOBS, "j", document) is None
