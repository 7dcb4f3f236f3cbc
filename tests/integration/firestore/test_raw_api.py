"""RPCs the high-level client rarely sends, exercised through its generated GAPIC layer."""

from __future__ import annotations

from typing import Any

import pytest
from google.api_core import exceptions


def _api(client: Any) -> Any:
    return client._firestore_api


def _root(client: Any) -> str:
    return f"{client._database_string}/documents"


def test_get_document_with_mask_and_not_found(firestore_client: Any) -> None:
    firestore_client.collection("jobs").document("a").set({"x": 1, "y": {"z": 2}})
    doc = _api(firestore_client).get_document(
        request={"name": f"{_root(firestore_client)}/jobs/a", "mask": {"field_paths": ["y.z"]}}
    )
    assert set(doc.fields) == {"y"}
    assert doc.fields["y"].map_value.fields["z"].integer_value == 2
    with pytest.raises(exceptions.NotFound):
        _api(firestore_client).get_document(request={"name": f"{_root(firestore_client)}/jobs/b"})


def test_create_document_assigns_an_id_and_refuses_duplicates(firestore_client: Any) -> None:
    api = _api(firestore_client)
    created = api.create_document(
        request={
            "parent": _root(firestore_client),
            "collection_id": "jobs",
            "document": {"fields": {"x": {"integer_value": 1}}},
        }
    )
    doc_id = created.name.rsplit("/", 1)[1]
    assert len(doc_id) == 20
    assert firestore_client.collection("jobs").document(doc_id).get().get("x") == 1
    request = {
        "parent": _root(firestore_client),
        "collection_id": "jobs",
        "document_id": doc_id,
        "document": {"fields": {}},
    }
    with pytest.raises(exceptions.AlreadyExists):
        api.create_document(request=request)


def test_update_document_with_mask_and_delete_document_with_precondition(
    firestore_client: Any,
) -> None:
    api = _api(firestore_client)
    ref = firestore_client.collection("jobs").document("a")
    ref.set({"x": 1, "y": 2})
    name = f"{_root(firestore_client)}/jobs/a"
    updated = api.update_document(
        request={
            "document": {"name": name, "fields": {"x": {"integer_value": 5}}},
            "update_mask": {"field_paths": ["x"]},
        }
    )
    assert updated.fields["x"].integer_value == 5
    assert ref.get().to_dict() == {"x": 5, "y": 2}
    with pytest.raises(exceptions.NotFound):
        api.delete_document(
            request={"name": name + "-missing", "current_document": {"exists": True}}
        )
    api.delete_document(request={"name": name, "current_document": {"exists": True}})
    assert not ref.get().exists


def test_batch_get_with_new_transaction_returns_it_first_and_locks_for_it(
    firestore_client: Any,
) -> None:
    ref = firestore_client.collection("jobs").document("a")
    ref.set({"n": 1})
    api = _api(firestore_client)
    responses = list(
        api.batch_get_documents(
            request={
                "database": firestore_client._database_string,
                "documents": [f"{_root(firestore_client)}/jobs/a"],
                "new_transaction": {"read_write": {}},
            }
        )
    )
    tid = responses[0].transaction
    assert tid
    found = [r.found for r in responses if r.found.name]
    assert found[0].fields["n"].integer_value == 1
    api.rollback(request={"database": firestore_client._database_string, "transaction": tid})


def test_read_only_transaction_at_a_read_time_sees_that_version(firestore_client: Any) -> None:
    ref = firestore_client.collection("jobs").document("a")
    first = ref.set({"n": 1})
    ref.set({"n": 2})
    api = _api(firestore_client)
    tid = api.begin_transaction(
        request={
            "database": firestore_client._database_string,
            "options": {"read_only": {"read_time": first.update_time}},
        }
    ).transaction
    transaction = firestore_client.transaction(read_only=True)
    transaction._id = tid
    assert ref.get(transaction=transaction).get("n") == 1
    api.rollback(request={"database": firestore_client._database_string, "transaction": tid})


def test_rollback_of_an_unknown_transaction_is_invalid_argument(firestore_client: Any) -> None:
    with pytest.raises(exceptions.InvalidArgument):
        _api(firestore_client).rollback(
            request={"database": firestore_client._database_string, "transaction": b"nope"}
        )
