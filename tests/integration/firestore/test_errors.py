"""Bad requests get production's status codes, and the server keeps serving afterwards."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest
from google.api_core import exceptions
from google.cloud.firestore_v1.types import document, query, write


def _raw(client: Any) -> Any:
    return client._firestore_api


def _db(client: Any) -> str:
    return str(client._database_string)


def _doc(client: Any, path: str) -> str:
    return f"{_db(client)}/documents/{path}"


def _run_query(client: Any, structured: dict[str, Any]) -> list[Any]:
    return list(
        _raw(client).run_query(
            request={"parent": _db(client) + "/documents", "structured_query": structured}
        )
    )


def _field_filter(field: str, op: str, value: dict[str, Any]) -> dict[str, Any]:
    return {
        "from_": [{"collection_id": "jobs"}],
        "where": {"field_filter": {"field": {"field_path": field}, "op": op, "value": value}},
    }


def _commit(client: Any, writes: list[Any]) -> Any:
    return _raw(client).commit(request={"database": _db(client), "writes": writes})


def _update(client: Any, path: str, fields: dict[str, Any], mask: list[str] | None = None) -> Any:
    w = write.Write(update=document.Document(name=_doc(client, path), fields=fields))
    if mask is not None:
        w.update_mask = {"field_paths": mask}
    return w


BAD_REQUESTS: dict[str, Callable[[Any], Any]] = {
    "document name with an odd number of segments": lambda c: _raw(c).get_document(
        request={"name": _doc(c, "jobs")}
    ),
    "document name with an empty segment": lambda c: _raw(c).get_document(
        request={"name": _doc(c, "jobs//a")}
    ),
    "document id reserved by __x__": lambda c: _raw(c).get_document(
        request={"name": _doc(c, "jobs/__bad__")}
    ),
    "database name without databases segment": lambda c: _raw(c).commit(
        request={"database": "projects/p", "writes": []}
    ),
    "in filter with an empty array": lambda c: _run_query(
        c, _field_filter("state", "IN", {"array_value": {}})
    ),
    "range filter against null": lambda c: _run_query(
        c, _field_filter("state", "GREATER_THAN", {"null_value": 0})
    ),
    "in filter with a scalar": lambda c: _run_query(
        c, _field_filter("state", "IN", {"string_value": "x"})
    ),
    "filter with an invalid field path": lambda c: _run_query(
        c, _field_filter("a..b", "EQUAL", {"integer_value": 1})
    ),
    "filter on __name__ with a string": lambda c: _run_query(
        c, _field_filter("__name__", "EQUAL", {"string_value": "x"})
    ),
    "negative limit": lambda c: _run_query(
        c, {"from_": [{"collection_id": "jobs"}], "limit": {"value": -1}}
    ),
    "update mask with an invalid field path": lambda c: _commit(
        c, [_update(c, "jobs/a", {"a": {"integer_value": 1}}, ["a..b"])]
    ),
    "reserved field name": lambda c: _commit(
        c, [_update(c, "jobs/a", {"__secret__": {"integer_value": 1}})]
    ),
    "array directly inside an array": lambda c: _commit(
        c,
        [
            _update(
                c,
                "jobs/a",
                {"a": {"array_value": {"values": [{"array_value": {"values": []}}]}}},
            )
        ],
    ),
    "document over 1 MiB": lambda c: _commit(
        c, [_update(c, "jobs/a", {"blob": {"bytes_value": b"x" * (1024 * 1024 + 10)}})]
    ),
    "request over 10 MiB": lambda c: _commit(
        c,
        [
            _update(c, f"jobs/d{i}", {"blob": {"bytes_value": b"x" * (900 * 1024)}})
            for i in range(12)
        ],
    ),
    "write to another database": lambda c: _commit(
        c, [write.Write(delete="projects/other/databases/(default)/documents/jobs/a")]
    ),
    "unknown transaction": lambda c: _raw(c).commit(
        request={"database": _db(c), "writes": [], "transaction": b"no-such-transaction"}
    ),
}


@pytest.mark.parametrize("case", sorted(BAD_REQUESTS))
def test_bad_request_is_invalid_argument_and_the_server_keeps_serving(
    firestore_client: Any, case: str
) -> None:
    with pytest.raises(exceptions.InvalidArgument):
        BAD_REQUESTS[case](firestore_client)
    ref = firestore_client.collection("jobs").document("ok")
    ref.set({"still": "serving"})
    assert ref.get().get("still") == "serving"
    assert not firestore_client.collection("jobs").document("a").get().exists


def test_unimplemented_methods_answer_unimplemented(firestore_client: Any) -> None:
    with pytest.raises(exceptions.MethodNotImplemented):
        list(
            _raw(firestore_client).partition_query(
                request={
                    "parent": _db(firestore_client) + "/documents",
                    "structured_query": query.StructuredQuery(),
                    "partition_count": 2,
                }
            )
        )
    assert firestore_client.collection("jobs").document("x").get().exists is False


def test_concurrent_bad_and_good_requests_do_not_disturb_each_other(
    firestore_client: Any,
) -> None:
    import threading

    errors: list[BaseException] = []

    def good(i: int) -> None:
        try:
            ref = firestore_client.collection("jobs").document(f"g{i}")
            ref.set({"i": i})
            assert ref.get().get("i") == i
        except BaseException as exc:
            errors.append(exc)

    def bad(_: int) -> None:
        try:
            BAD_REQUESTS["document name with an odd number of segments"](firestore_client)
        except exceptions.InvalidArgument:
            return
        except BaseException as exc:
            errors.append(exc)

    threads = [threading.Thread(target=good if i % 2 else bad, args=(i,)) for i in range(20)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert errors == []
    assert len(list(firestore_client.collection("jobs").stream())) == 10
