"""Writes and point reads through the real google-cloud-firestore client."""

from __future__ import annotations

import datetime as dt
from typing import Any

import pytest
from google.api_core import exceptions
from google.cloud import firestore


def test_set_then_get_returns_the_fields_and_timestamps(firestore_client: Any) -> None:
    ref = firestore_client.collection("jobs").document("j1")
    result = ref.set({"state": "deferred", "attempt": 0, "params": {"a": 1}})
    snap = ref.get()
    assert snap.exists
    assert snap.to_dict() == {"state": "deferred", "attempt": 0, "params": {"a": 1}}
    assert snap.update_time == result.update_time
    assert snap.create_time == result.update_time


def test_get_of_a_missing_document_reports_it_missing(firestore_client: Any) -> None:
    snap = firestore_client.collection("jobs").document("nope").get()
    assert not snap.exists


def test_merge_set_updates_only_the_named_fields(firestore_client: Any) -> None:
    ref = firestore_client.collection("jobs").document("j1")
    ref.set({"a": 1, "m": {"x": 1, "y": 2}})
    ref.set({"b": 2, "m": {"y": 3}}, merge=True)
    assert ref.get().to_dict() == {"a": 1, "b": 2, "m": {"x": 1, "y": 3}}


def test_update_with_dotted_paths_and_delete_field(firestore_client: Any) -> None:
    ref = firestore_client.collection("jobs").document("j1")
    ref.set({"a": 1, "m": {"x": 1, "y": 2}})
    ref.update({"m.x": 10, "a": firestore.DELETE_FIELD, "`odd.name`": True})
    assert ref.get().to_dict() == {"m": {"x": 10, "y": 2}, "odd.name": True}


def test_update_of_a_missing_document_is_not_found(firestore_client: Any) -> None:
    with pytest.raises(exceptions.NotFound):
        firestore_client.collection("jobs").document("missing").update({"a": 1})


def test_create_of_an_existing_document_already_exists(firestore_client: Any) -> None:
    ref = firestore_client.collection("jobs").document("j1")
    ref.create({"a": 1})
    with pytest.raises(exceptions.AlreadyExists):
        ref.create({"a": 2})
    assert ref.get().to_dict() == {"a": 1}


def test_update_time_precondition_mismatch_fails_precondition(firestore_client: Any) -> None:
    ref = firestore_client.collection("jobs").document("j1")
    first = ref.set({"a": 1})
    ref.set({"a": 2})
    with pytest.raises(exceptions.FailedPrecondition):
        stale = firestore_client.write_option(last_update_time=first.update_time)
        ref.update({"a": 3}, option=stale)
    current = ref.get()
    ref.update({"a": 4}, option=firestore_client.write_option(last_update_time=current.update_time))
    assert ref.get().get("a") == 4


# Production's status for a precondition time no version can have yet is documented
# (INVALID_ARGUMENT), its wording is not: the built-in emulator says "in the future", Google's
# "greater than the stored version"; either names the cause.
FUTURE = "in the future|greater than the stored version"


def test_update_time_precondition_in_the_future_is_an_invalid_argument(
    firestore_client: Any,
) -> None:
    ref = firestore_client.collection("jobs").document("j1")
    written = ref.set({"a": 1})
    future = written.update_time + dt.timedelta(hours=1)
    option = firestore_client.write_option(last_update_time=future)
    with pytest.raises(exceptions.InvalidArgument, match=FUTURE):
        ref.update({"a": 2}, option=option)
    with pytest.raises(exceptions.InvalidArgument, match=FUTURE):
        ref.delete(option=option)
    missing = firestore_client.collection("jobs").document("missing")
    # On a missing document the two emulators check in different orders: the built-in one
    # refuses the future time first, Google's the version mismatch ("the stored version (0)
    # does not match the required base version"); production documents neither order.
    with pytest.raises((exceptions.InvalidArgument, exceptions.FailedPrecondition)):
        missing.update({"a": 2}, option=option)
    assert not missing.get().exists
    assert ref.get().to_dict() == {"a": 1}


def test_update_time_precondition_mismatch_names_both_versions(firestore_client: Any) -> None:
    ref = firestore_client.collection("jobs").document("j1")
    first = ref.set({"a": 1})
    second = ref.set({"a": 2})
    stale = firestore_client.write_option(last_update_time=first.update_time)
    with pytest.raises(exceptions.FailedPrecondition) as caught:
        ref.update({"a": 3}, option=stale)
    stored = second.update_time.timestamp_pb()
    wanted = first.update_time.timestamp_pb()
    assert (
        f"the stored version ({stored.seconds * 1_000_000 + stored.nanos // 1000}) does not "
        f"match the required base version ({wanted.seconds * 1_000_000 + wanted.nanos // 1000})"
    ) in caught.value.message


def test_delete_removes_and_delete_with_exists_precondition_fails_when_missing(
    firestore_client: Any,
) -> None:
    ref = firestore_client.collection("jobs").document("j1")
    ref.set({"a": 1})
    ref.delete()
    assert not ref.get().exists
    ref.delete()  # deleting a missing document is not an error
    with pytest.raises(exceptions.NotFound):
        ref.delete(option=firestore_client.write_option(exists=True))


def test_field_transforms_apply_at_commit(firestore_client: Any) -> None:
    ref = firestore_client.collection("jobs").document("j1")
    ref.set({"n": 5, "hi": 3, "lo": 3, "tags": ["a", "b"], "f": 1.5})
    result = ref.update(
        {
            "n": firestore.Increment(2),
            "f": firestore.Increment(1),
            "hi": firestore.Maximum(7),
            "lo": firestore.Minimum(1),
            "tags": firestore.ArrayUnion(["b", "c"]),
            "at": firestore.SERVER_TIMESTAMP,
            "new": firestore.Increment(4),
        }
    )
    data = ref.get().to_dict()
    assert data["n"] == 7 and data["f"] == 2.5 and data["new"] == 4
    assert data["hi"] == 7 and data["lo"] == 1
    assert data["tags"] == ["a", "b", "c"]
    # REQUEST_TIME has millisecond precision (ServerValue, google.firestore.v1): the time the
    # request was processed, at or before the commit's microsecond update_time.
    at = data["at"]
    assert at.microsecond % 1000 == 0
    assert result.update_time - dt.timedelta(seconds=5) <= at <= result.update_time
    ref.update({"tags": firestore.ArrayRemove(["a", "c"])})
    assert ref.get().get("tags") == ["b"]


# Production refuses an array directly inside an array
# (https://cloud.google.com/firestore/docs/concepts/data-types, "Array"); Google's emulator
# stores one, in a set as in a transform.
NESTED_ARRAY = pytest.mark.production_strict(
    "an array directly in an array is refused: "
    "https://cloud.google.com/firestore/docs/concepts/data-types"
)


@pytest.mark.parametrize("transform", [firestore.ArrayUnion, firestore.ArrayRemove])
@pytest.mark.parametrize(
    "element",
    [
        pytest.param(["nested"], id="an array", marks=NESTED_ARRAY),
        pytest.param({"__reserved__": 1}, id="a map with a reserved name"),
        pytest.param(
            {"inner": {"list": [["nested"]]}},
            id="an array in an array in a map",
            marks=NESTED_ARRAY,
        ),
    ],
)
def test_an_array_transform_refuses_elements_a_set_would_refuse(
    firestore_client: Any, transform: Any, element: Any
) -> None:
    ref = firestore_client.collection("jobs").document("j1")
    ref.set({"tags": ["a"]})
    with pytest.raises(exceptions.InvalidArgument):
        ref.set({"tags": [element]})  # what the transform's result would hold
    with pytest.raises(exceptions.InvalidArgument):
        ref.update({"tags": transform([element])})
    assert ref.get().get("tags") == ["a"]


def test_batch_commit_is_atomic(firestore_client: Any) -> None:
    jobs = firestore_client.collection("jobs")
    jobs.document("exists").set({"a": 1})
    batch = firestore_client.batch()
    batch.set(jobs.document("new"), {"a": 1})
    batch.create(jobs.document("exists"), {"a": 2})
    with pytest.raises(exceptions.AlreadyExists):
        batch.commit()
    assert not jobs.document("new").get().exists
    assert jobs.document("exists").get().get("a") == 1


def test_batch_commit_returns_one_result_per_write_and_a_commit_time(
    firestore_client: Any,
) -> None:
    jobs = firestore_client.collection("jobs")
    batch = firestore_client.batch()
    for i in range(3):
        batch.set(jobs.document(f"d{i}"), {"i": i})
    batch.delete(jobs.document("gone"))
    results = batch.commit()
    assert len(results) == 4
    assert batch.commit_time is not None
    assert results[0].update_time == batch.commit_time


def test_get_all_reports_found_and_missing_with_a_field_mask(firestore_client: Any) -> None:
    jobs = firestore_client.collection("jobs")
    jobs.document("a").set({"x": 1, "y": 2})
    refs = [jobs.document("a"), jobs.document("b")]
    snaps = {s.id: s for s in firestore_client.get_all(refs, field_paths=["x"])}
    assert snaps["a"].to_dict() == {"x": 1}
    assert not snaps["b"].exists


def test_read_time_reads_return_the_old_version(firestore_client: Any) -> None:
    ref = firestore_client.collection("jobs").document("a")
    first = ref.set({"v": 1})
    ref.set({"v": 2})
    old = ref.get(read_time=first.update_time)
    assert old.get("v") == 1
    before = first.update_time - dt.timedelta(microseconds=1)
    assert not ref.get(read_time=before).exists
    query = firestore_client.collection("jobs").where(filter=firestore.FieldFilter("v", "==", 1))
    assert [d.id for d in query.stream(read_time=first.update_time)] == ["a"]
    assert [d.id for d in query.stream()] == []


def test_list_documents_includes_missing_parents_of_subcollections(firestore_client: Any) -> None:
    jobs = firestore_client.collection("jobs")
    jobs.document("a").set({"x": 1})
    jobs.document("ghost").collection("runs").document("r1").set({"x": 1})
    ids = sorted(d.id for d in jobs.list_documents())
    assert ids == ["a", "ghost"]
    paged = sorted(d.id for d in jobs.list_documents(page_size=1))
    assert paged == ["a", "ghost"]


def test_list_collection_ids_at_root_and_under_a_document(firestore_client: Any) -> None:
    firestore_client.collection("jobs").document("a").set({"x": 1})
    firestore_client.collection("control").document("c").set({"x": 1})
    firestore_client.collection("jobs").document("a").collection("runs").document("r").set({})
    assert sorted(c.id for c in firestore_client.collections()) == ["control", "jobs"]
    doc = firestore_client.collection("jobs").document("a")
    assert [c.id for c in doc.collections()] == ["runs"]


def test_projects_are_isolated(firestore_emulator: Any, firestore_client: Any) -> None:
    firestore_client.collection("jobs").document("a").set({"x": 1})
    other = firestore.Client(project=firestore_client.project + "-other")
    try:
        assert not other.collection("jobs").document("a").get().exists
    finally:
        other.close()


def test_recursive_delete_removes_documents_and_subcollections(firestore_client: Any) -> None:
    jobs = firestore_client.collection("jobs")
    for i in range(12):
        jobs.document(f"j{i}").set({"i": i})
        jobs.document(f"j{i}").collection("runs").document("r").set({"x": 1})
    firestore_client.collection("control").document("c").set({"paused": False})
    assert firestore_client.recursive_delete(jobs, chunk_size=5) == 24
    assert [c.id for c in firestore_client.collections()] == ["control"]
    assert list(firestore_client.collection_group("runs").stream()) == []


def test_a_write_that_changes_no_field_keeps_the_update_time(firestore_client: Any) -> None:
    # WriteResult.update_time: "If the write did not actually change the document, this will
    # be the previous update_time."
    # (https://cloud.google.com/firestore/docs/reference/rpc/google.firestore.v1#writeresult)
    ref = firestore_client.collection("jobs").document("j1")
    first = ref.set({"a": 1, "m": {"x": [1, 2]}, "t": dt.datetime(2026, 1, 1, tzinfo=dt.UTC)})
    same = ref.update({"m": {"x": [1, 2]}, "a": 1})
    assert same.update_time == first.update_time == ref.get().update_time
    moved = ref.update({"m": {"x": [1, 3]}})
    assert moved.update_time > first.update_time
    assert ref.get().create_time == first.update_time
