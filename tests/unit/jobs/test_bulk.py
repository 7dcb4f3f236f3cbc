"""The bulk logic (services/jobs/bulk.py) on the fake store: bad input names its field, a job
that moved on is skipped with the state machine's reason, the typed confirmation, the stop."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest

from services.jobs.bulk import (
    BulkKind,
    Change,
    JobFilter,
    Progress,
    check_preview,
    replay_id,
    run_batch,
)
from services.jobs.clock import FakeClock
from services.jobs.errors import ValidationError
from services.jobs.model import NewJob
from services.jobs.state import State
from tests.unit.jobs.bulk_fake import MemoryBulkStore

T0 = datetime(2026, 1, 1, tzinfo=UTC)


def planted(count: int) -> MemoryBulkStore:
    store = MemoryBulkStore(FakeClock(T0))
    for n in range(count):
        params = {"bucket": "media-src", "object": f"o-{n}"}
        store.schedule(NewJob(f"j-{n:03d}", "media.delete_source", f"s-{n}", T0, params))
    return store


@pytest.mark.parametrize(
    ("fields", "problem"),
    [
        ({}, "state: required"),
        ({"state": "sleeping"}, "state: 'sleeping' is not a state"),
        ({"state": "deferred", "due_from": "tomorrow"}, "due_from: 'tomorrow' is not an ISO"),
        (
            {"state": "deferred", "due_before": "2026-01-01T00:00"},
            "due_before: '2026-01-01T00:00' has no offset",
        ),
        (
            {
                "state": "deferred",
                "due_from": "2026-01-02T00:00Z",
                "due_before": "2026-01-01T00:00Z",
            },
            "due_before: must be after due_from",
        ),
    ],
)
def test_a_bad_filter_names_its_field(fields: dict[str, str], problem: str) -> None:
    with pytest.raises(ValidationError, match=problem):
        JobFilter.parse(fields)


def test_a_filter_reads_back_what_it_writes() -> None:
    job_filter = JobFilter.parse(
        {
            "state": "deferred",
            "action": "a",
            "subject_prefix": "m-",
            "due_from": "2026-01-01T00:00Z",
        }
    )
    assert JobFilter.parse(job_filter.as_fields()) == job_filter


@pytest.mark.parametrize(
    ("args", "problem"),
    [
        (("erase", "x"), "kind: 'erase' is not one of"),
        (("cancel", " "), "reason: required"),
        (("reschedule", "x"), "give exactly one of"),
        (("reschedule", "x", "2026-01-01T00:00Z", "1h"), "give exactly one of"),
        (("reschedule", "x", "", "soon"), "offset: "),
    ],
)
def test_a_bad_change_names_its_field(args: tuple[str, ...], problem: str) -> None:
    with pytest.raises(ValidationError, match=problem):
        Change.parse(*args)


def test_an_offset_may_move_earlier() -> None:
    assert Change.parse("reschedule", "x", offset="-2h").offset == timedelta(hours=-2)


def test_a_job_that_moved_on_since_the_preview_is_skipped_with_its_reason() -> None:
    store = planted(3)
    job_filter = JobFilter(State.DEFERRED)
    _, read_time = store.count_matching(job_filter)
    store.cancel("j-001", "meanwhile", "someone")
    batch = run_batch(
        store,
        job_filter,
        Change(BulkKind.CANCEL, "x"),
        by="ops",
        operation="op",
        read_time=read_time,
        cursor=None,
        now=T0,
    )
    assert batch.changed == ("j-000", "j-002")
    ((job_id, why),) = batch.skipped
    assert job_id == "j-001" and "cancelled" in why
    progress = Progress(3)
    progress.add(batch)
    assert (progress.changed, progress.skipped, progress.handled) == (2, 1, 3)


def test_the_stop_is_asked_before_each_job() -> None:
    store = planted(5)
    job_filter = JobFilter(State.DEFERRED)
    _, read_time = store.count_matching(job_filter)
    asked: list[int] = []

    def stop() -> bool:
        asked.append(1)
        return len(asked) > 2

    batch = run_batch(
        store,
        job_filter,
        Change(BulkKind.CANCEL, "x"),
        by="ops",
        operation="op",
        read_time=read_time,
        cursor=None,
        now=T0,
        stop=stop,
    )
    assert batch.stopped and not batch.done and batch.changed == ("j-000", "j-001")
    assert [j.state for j in store.jobs.values()].count(State.CANCELLED) == 2


def test_an_old_preview_is_refused() -> None:
    store = planted(1)
    _, read_time = store.count_matching(JobFilter(State.DEFERRED))
    with pytest.raises(ValidationError, match="read_time: the preview is older than 55 minutes"):
        run_batch(
            store,
            JobFilter(State.DEFERRED),
            Change(BulkKind.CANCEL, "x"),
            by="ops",
            operation="op",
            read_time=read_time,
            cursor=None,
            now=T0 + timedelta(hours=1),
        )


def test_more_than_the_threshold_needs_the_exact_count_typed() -> None:
    check_preview(10, "", threshold=10)
    check_preview(1500, "1,500", threshold=10)
    with pytest.raises(ValidationError, match=r"confirm: type the number of jobs \(1500\)"):
        check_preview(1500, "150", threshold=10)


def test_a_replay_id_too_long_for_a_document_is_refused() -> None:
    assert replay_id("j", "abc") == "j.replay-abc"
    with pytest.raises(ValidationError, match="job_id: "):
        replay_id("x" * 1500, "abc")
