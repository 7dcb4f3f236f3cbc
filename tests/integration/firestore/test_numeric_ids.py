"""Numeric document IDs (__id<n>__) sort before string IDs, as in production: the client's
recursive() and recursive_delete() start their range at __id-9223372036854775808__."""

from __future__ import annotations

from typing import Any

from google.cloud.firestore_v1.field_path import FieldPath


def test_recursive_delete_removes_every_auto_id_document_and_its_subcollections(
    firestore_client: Any,
) -> None:
    jobs = firestore_client.collection("jobs")
    refs = [jobs.document() for _ in range(120)]  # auto IDs: letters and digits
    assert any(r.id[0].isdigit() or r.id[0].isupper() for r in refs)
    batch = firestore_client.batch()
    for ref in refs:
        batch.set(ref, {"n": 1})
    for ref in refs[:10]:
        batch.set(ref.collection("history").document(), {"n": 2})
    batch.commit()
    other = firestore_client.collection("jobs2").document("Z")
    other.set({"kept": True})
    deleted = firestore_client.recursive_delete(jobs)
    assert deleted == 130
    assert list(jobs.stream()) == []
    assert list(firestore_client.collection_group("history").stream()) == []
    assert other.get().exists  # a collection whose name merely starts the same is untouched


def test_recursive_query_returns_all_descendants_whatever_their_first_character(
    firestore_client: Any,
) -> None:
    jobs = firestore_client.collection("jobs")
    ids = ["0abc", "9z", "Abc", "Zed", "_x", "abc", "zzz", "~tilde"]
    for doc_id in ids:
        jobs.document(doc_id).set({"n": 1})
    jobs.document("Abc").collection("sub").document("1").set({"n": 2})
    found = [s.reference.path for s in jobs.recursive().stream()]
    assert sorted(found) == sorted([f"jobs/{i}" for i in ids] + ["jobs/Abc/sub/1"])


def test_a_numeric_id_cursor_sorts_before_every_string_id_and_by_number(
    firestore_client: Any,
) -> None:
    jobs = firestore_client.collection("jobs")
    for doc_id in ("0", "A", "a"):
        jobs.document(doc_id).set({"n": 1})
    by_name = jobs.order_by(FieldPath.document_id())
    start = {FieldPath.document_id(): "__id5__"}
    assert [s.id for s in by_name.start_at(start).stream()] == ["0", "A", "a"]
    assert [s.id for s in by_name.end_at(start).stream()] == []
    before_all = {FieldPath.document_id(): "__id-3__"}
    cursor = by_name.start_at(before_all).end_before({FieldPath.document_id(): "__id7__"})
    assert list(cursor.stream()) == []
