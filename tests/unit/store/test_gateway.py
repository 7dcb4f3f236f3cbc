"""The gateway's query stream outside a transaction resumes after a transient error mid-stream
(after the last document it yielded, with the limit less what came), as the high-level
client's `stream` does; inside a transaction the error raises. Against a recording stand-in
for the GAPIC client: a stream that breaks half-way cannot be staged on the emulator."""

from __future__ import annotations

from collections.abc import Iterator
from datetime import UTC, datetime
from typing import Any

import pytest
from google.api_core import exceptions as api_exceptions
from google.auth.credentials import AnonymousCredentials
from google.cloud import firestore
from google.cloud.firestore_v1.types import firestore as rpc

from services.store import gateway as gateway_module
from services.store.bounds import CallBounds
from services.store.database import Database
from services.store.gateway import STREAM_RESUMES, Gateway
from services.store.queries import due_query

NOW = datetime(2026, 3, 1, 12, tzinfo=UTC)
DOCUMENTS = "projects/p/databases/(default)/documents"


class _Api:
    """run_query answering from `answers`, one list of documents per call; a list that ends
    with an exception raises it after yielding the documents before it."""

    def __init__(self, answers: list[list[Any]]) -> None:
        self.requests: list[Any] = []
        self._answers = iter(answers)

    def run_query(self, request: Any, **_: Any) -> Iterator[Any]:
        self.requests.append(type(request).pb(request))
        answer = next(self._answers)

        def stream() -> Iterator[Any]:
            for item in answer:
                if isinstance(item, Exception):
                    raise item
                response = rpc.RunQueryResponse.pb()()
                response.document.name = f"{DOCUMENTS}/jobs/{item}"
                response.document.fields["due_at"].timestamp_value.FromDatetime(NOW)
                yield rpc.RunQueryResponse.wrap(response)

        return stream()


def _gateway(monkeypatch: pytest.MonkeyPatch, api: _Api) -> Gateway:
    client = firestore.Client(project="p", credentials=AnonymousCredentials())
    database = Database(api, "p")  # type: ignore[arg-type]
    monkeypatch.setattr(gateway_module, "for_client", lambda client, name: database)
    return Gateway(client, None, CallBounds(timeout_s=1))


def test_a_broken_stream_resumes_after_the_last_document(monkeypatch: pytest.MonkeyPatch) -> None:
    api = _Api([["a", "b", api_exceptions.ServiceUnavailable("gone")], ["c"]])
    ids = [job_id for job_id, _ in _gateway(monkeypatch, api).query(due_query(NOW, 5))]
    assert ids == ["a", "b", "c"]
    first, resumed = api.requests
    assert not first.structured_query.HasField("start_at")
    cursor = resumed.structured_query.start_at
    assert not cursor.before
    assert (
        cursor.values[0].timestamp_value
        == first.structured_query.where.composite_filter.filters[
            1
        ].field_filter.value.timestamp_value
    )
    assert cursor.values[1].reference_value == f"{DOCUMENTS}/jobs/b"
    assert [o.field.field_path for o in resumed.structured_query.order_by] == ["due_at", "__name__"]
    assert resumed.structured_query.limit.value == 3


def test_resumes_are_bounded(monkeypatch: pytest.MonkeyPatch) -> None:
    broken = [["a", api_exceptions.ServiceUnavailable("gone")]] * (STREAM_RESUMES + 1)
    api = _Api(broken)
    with pytest.raises(api_exceptions.ServiceUnavailable):
        list(_gateway(monkeypatch, api).query(due_query(NOW, 50)))
    assert len(api.requests) == STREAM_RESUMES + 1


def test_inside_a_transaction_a_broken_stream_raises(monkeypatch: pytest.MonkeyPatch) -> None:
    api = _Api([["a", api_exceptions.ServiceUnavailable("gone")], ["b"]])
    with pytest.raises(api_exceptions.ServiceUnavailable):
        list(_gateway(monkeypatch, api).query(due_query(NOW, 5), transaction=b"t1"))
    assert len(api.requests) == 1
    assert api.requests[0].transaction == b"t1"


def test_a_refusal_is_not_resumed(monkeypatch: pytest.MonkeyPatch) -> None:
    api = _Api([["a", api_exceptions.InvalidArgument("no")], ["b"]])
    with pytest.raises(api_exceptions.InvalidArgument):
        list(_gateway(monkeypatch, api).query(due_query(NOW, 5)))
    assert len(api.requests) == 1
