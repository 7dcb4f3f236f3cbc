"""Bad requests get production's status codes, and the server keeps serving afterwards."""

from __future__ import annotations

import math
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


# Refusals production makes that Google's emulator does not (docs/emulators.md, "Google's
# emulators compared"): it takes a write to another database's document, and its gRPC server
# stops a request at 4 MiB with RESOURCE_EXHAUSTED (which the client retries) where
# production accepts up to 10 MiB and refuses more as INVALID_ARGUMENT.
GOOGLE_EMULATOR_TAKES = {
    "request over 10 MiB": "requests over 10 MiB are INVALID_ARGUMENT: "
    "https://cloud.google.com/firestore/quotas",
    "write to another database": "a commit writes only its own database's documents: "
    "https://cloud.google.com/firestore/docs/reference/rpc/google.firestore.v1#commitrequest",
}


@pytest.mark.parametrize(
    "case",
    [
        pytest.param(case, marks=pytest.mark.production_strict(GOOGLE_EMULATOR_TAKES[case]))
        if case in GOOGLE_EMULATOR_TAKES
        else case
        for case in sorted(BAD_REQUESTS)
    ],
)
def test_bad_request_is_invalid_argument_and_the_server_keeps_serving(
    firestore_client: Any, case: str
) -> None:
    with pytest.raises(exceptions.InvalidArgument):
        BAD_REQUESTS[case](firestore_client)
    ref = firestore_client.collection("jobs").document("ok")
    ref.set({"still": "serving"})
    assert ref.get().get("still") == "serving"
    assert not firestore_client.collection("jobs").document("a").get().exists


@pytest.mark.parametrize(
    "op", ["LESS_THAN", "LESS_THAN_OR_EQUAL", "GREATER_THAN", "GREATER_THAN_OR_EQUAL"]
)
@pytest.mark.parametrize(
    "value", [{"null_value": 0}, {"double_value": math.nan}], ids=["null", "NaN"]
)
def test_a_range_filter_against_null_or_nan_is_served_and_matches_nothing(
    firestore_client: Any, op: str, value: dict[str, Any]
) -> None:
    """Production accepts null and NaN with every operator (the Firebase SDKs dropped their
    own refusal to agree with the backend: https://github.com/firebase/firebase-js-sdk/pull/3960);
    a range filter against either matches no document, not even a null or NaN field (what
    Google's emulator answers)."""
    jobs = firestore_client.collection("jobs")
    for name, held in (("null", None), ("nan", math.nan), ("one", 1), ("text", "x")):
        jobs.document(name).set({"state": held})
    assert [
        r
        for r in _run_query(firestore_client, _field_filter("state", op, value))
        if r.document.name
    ] == []


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
