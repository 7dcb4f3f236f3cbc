"""The store reaches Firestore through the public GAPIC client, and for unary calls through the
gateway's own callables over its transport (tests/unit/store/test_unary_calls.py); this fails loudly
(naming what moved) when a client release changes the public surface it uses, before a deploy finds
out: the RPC methods and their `request`/`retry`/`timeout`/`metadata` arguments, the request and
answer fields, proto-plus's `pb`/`wrap`, the transport's `channel`, the snapshot's constructor. It
also holds the runner to the high-level client's retry semantics (begin, commit, ABORTED begun again
naming the first attempt, rollback on any error) and the error translation to what fixes each
status."""

from __future__ import annotations

import inspect
from collections.abc import Iterator
from typing import Any

import pytest
from google.api_core import exceptions as api_exceptions
from google.auth.credentials import AnonymousCredentials
from google.cloud import firestore
from google.cloud.firestore_v1.services.firestore import FirestoreClient
from google.cloud.firestore_v1.services.firestore.transports import FirestoreGrpcTransport
from google.cloud.firestore_v1.types import firestore as rpc
from google.cloud.firestore_v1.types import query as query_types
from google.cloud.firestore_v1.types import write as write_types

from services.jobs.errors import LostRace, StoreMisconfigured, StoreRejected, StoreUnavailable
from services.store.bounds import CallBounds
from services.store.database import DEFAULT_DATABASE, Database, connect
from services.store.gateway import Gateway
from services.store.transactions import (
    TRANSACTION_ATTEMPTS,
    Transaction,
    TransactionRunner,
    is_deadline,
    translated,
)

# Each GAPIC method the gateway calls, with the request fields it sets.
METHODS: dict[str, tuple[type, tuple[str, ...]]] = {
    "get_document": (rpc.GetDocumentRequest, ("name",)),
    "batch_get_documents": (
        rpc.BatchGetDocumentsRequest,
        ("database", "documents", "transaction", "read_time"),
    ),
    "run_query": (rpc.RunQueryRequest, ("parent", "structured_query", "transaction", "read_time")),
    "run_aggregation_query": (
        rpc.RunAggregationQueryRequest,
        ("parent", "structured_aggregation_query", "read_time"),
    ),
    "commit": (rpc.CommitRequest, ("database", "writes", "transaction")),
    "batch_write": (rpc.BatchWriteRequest, ("database", "writes")),
    "begin_transaction": (rpc.BeginTransactionRequest, ("database", "options")),
    "rollback": (rpc.RollbackRequest, ("database", "transaction")),
}
# The answer fields the gateway reads.
ANSWERS: dict[type, tuple[str, ...]] = {
    rpc.BatchGetDocumentsResponse: ("found", "missing", "read_time"),
    rpc.RunQueryResponse: ("document", "read_time"),
    rpc.RunAggregationQueryResponse: ("result", "read_time"),
    rpc.CommitResponse: ("write_results", "commit_time"),
    rpc.BatchWriteResponse: ("write_results", "status"),
    rpc.BeginTransactionResponse: ("transaction",),
    write_types.WriteResult: ("update_time",),
}


@pytest.mark.parametrize("name", sorted(METHODS))
def test_every_rpc_the_gateway_calls_still_takes_request_retry_timeout_and_metadata(
    name: str,
) -> None:
    method = getattr(FirestoreClient, name, None)
    assert callable(method), f"FirestoreClient.{name} is gone"
    parameters = inspect.signature(method).parameters
    for argument in ("request", "retry", "timeout", "metadata"):
        assert argument in parameters, f"FirestoreClient.{name} no longer takes {argument}="
    request, fields = METHODS[name]
    raw = request.pb()
    for field in fields:
        assert field in raw.DESCRIPTOR.fields_by_name, f"{request.__name__}.{field} is gone"
    assert callable(request.wrap) and callable(request.pb)


def test_the_answer_fields_the_gateway_reads_are_still_there() -> None:
    for message, fields in ANSWERS.items():
        descriptor = message.pb().DESCRIPTOR
        for field in fields:
            assert field in descriptor.fields_by_name, f"{message.__name__}.{field} is gone"
    structured = query_types.StructuredQuery.pb().DESCRIPTOR
    for field in ("from_", "where", "order_by", "start_at", "limit"):
        assert field in structured.fields_by_name, f"StructuredQuery.{field} is gone"


def test_the_transport_still_takes_a_channel_and_the_snapshot_its_arguments() -> None:
    transport = inspect.signature(FirestoreGrpcTransport).parameters
    assert "channel" in transport and "host" in transport
    assert "transport" in inspect.signature(FirestoreClient).parameters
    snapshot = list(inspect.signature(firestore.DocumentSnapshot).parameters)
    assert snapshot[:6] == [
        "reference",
        "data",
        "exists",
        "read_time",
        "create_time",
        "update_time",
    ], snapshot


def test_the_emulator_gets_an_insecure_channel_and_the_owner_token() -> None:
    database = connect("p", environ={"FIRESTORE_EMULATOR_HOST": "127.0.0.1:1"})
    assert database.path == f"projects/p/databases/{DEFAULT_DATABASE}"
    assert ("authorization", "Bearer owner") in database.metadata
    assert ("google-cloud-resource-prefix", database.path) in database.metadata
    named = connect("p", "other", environ={"FIRESTORE_EMULATOR_HOST": "127.0.0.1:1"})
    assert named.documents == "projects/p/databases/other/documents"
    assert named.name("jobs", "j-1") == "projects/p/databases/other/documents/jobs/j-1"
    with pytest.raises(ValueError):
        Database(database.api, "p/q")


def test_statuses_map_to_errors_by_what_fixes_them() -> None:
    assert type(translated(api_exceptions.InvalidArgument("too big"))) is StoreRejected
    for refusal in (
        api_exceptions.PermissionDenied("no role"),
        api_exceptions.FailedPrecondition("needs an index"),
        api_exceptions.NotFound("no database"),
    ):
        assert type(translated(refusal)) is StoreMisconfigured
    assert type(translated(api_exceptions.ServiceUnavailable("down"))) is StoreUnavailable
    wrapped = api_exceptions.RetryError("gave up", api_exceptions.PermissionDenied("no role"))
    assert type(translated(wrapped)) is StoreMisconfigured
    late = api_exceptions.RetryError("gave up", api_exceptions.DeadlineExceeded("slow"))
    assert is_deadline(late) and is_deadline(api_exceptions.DeadlineExceeded("slow"))


# --- the runner's retry semantics, against a recording stand-in for the gateway --------------


class _Recorder:
    """The transaction half of `Gateway`, recording each call; `commits` says what each
    commit does in turn (None: succeeds)."""

    def __init__(self, commits: list[Exception | None]) -> None:
        self.calls: list[tuple[str, Any]] = []
        self._commits = iter(commits)
        self._ids = iter(range(1, 100))
        self.writes = Gateway(_client(), None, BOUNDS).writes

    def begin(self, retry_id: bytes | None = None) -> bytes:
        self.calls.append(("begin", retry_id))
        return f"t{next(self._ids)}".encode()

    def commit(self, writes: Any, transaction: bytes | None = None) -> Any:
        self.calls.append(("commit", transaction))
        outcome = next(self._commits)
        if outcome is not None:
            raise outcome
        return rpc.CommitResponse.pb()()

    def get_all(self, references: Any, transaction: bytes | None = None) -> Iterator[Any]:
        self.calls.append(("get_all", transaction))
        return iter(())

    def rollback(self, transaction: bytes) -> None:
        self.calls.append(("rollback", transaction))


BOUNDS = CallBounds(timeout_s=1)


def _client() -> Any:
    return firestore.Client(project="p", credentials=AnonymousCredentials())


def _run(commits: list[Exception | None], body: Any = None) -> tuple[Any, list[tuple[str, Any]]]:
    recorder = _Recorder(commits)
    runner = TransactionRunner(recorder)  # type: ignore[arg-type]
    try:
        result = runner.run(body or (lambda transaction: "done"))
    except Exception as exc:
        result = exc
    return result, recorder.calls


def test_a_committed_transaction_is_begin_then_commit() -> None:
    result, calls = _run([None])
    assert result == "done"
    assert calls == [("begin", None), ("commit", b"t1")]


def test_an_aborted_commit_is_begun_again_naming_the_first_attempt() -> None:
    result, calls = _run([api_exceptions.Aborted("contention"), None])
    assert result == "done"
    assert calls == [("begin", None), ("commit", b"t1"), ("begin", b"t1"), ("commit", b"t2")]


def test_persistent_aborts_roll_back_the_last_attempt_then_retry_with_backoff() -> None:
    aborted = [api_exceptions.Aborted("contention")] * (TRANSACTION_ATTEMPTS * 8)
    result, calls = _run(list(aborted))
    assert isinstance(result, LostRace)
    first_round = calls[: 2 * TRANSACTION_ATTEMPTS + 1]
    assert [c for c, _ in first_round] == ["begin", "commit"] * TRANSACTION_ATTEMPTS + ["rollback"]
    assert first_round[-1] == ("rollback", f"t{TRANSACTION_ATTEMPTS}".encode())
    assert all(retry == b"t1" for c, retry in first_round[2:-1:2] if c == "begin")


def test_an_error_in_the_body_rolls_back_and_raises_it() -> None:
    def body(transaction: Transaction) -> None:
        raise KeyError("mine")

    result, calls = _run([None], body)
    assert isinstance(result, KeyError)
    assert calls == [("begin", None), ("rollback", b"t1")]


def test_an_unavailable_commit_rolls_back_and_is_an_outage() -> None:
    result, calls = _run([api_exceptions.ServiceUnavailable("down")])
    assert isinstance(result, StoreUnavailable)
    assert calls == [("begin", None), ("commit", b"t1"), ("rollback", b"t1")]


def test_a_deadline_after_begin_is_a_lost_race_not_an_outage() -> None:
    result, calls = _run([api_exceptions.DeadlineExceeded("lock wait")])
    assert isinstance(result, LostRace)
    assert calls == [("begin", None), ("commit", b"t1"), ("rollback", b"t1")]


def test_a_read_after_a_write_is_refused_as_in_the_client() -> None:
    def body(transaction: Transaction) -> None:
        reference = _client().document("jobs/j-1")
        transaction.update(reference, {"state": "claimed"})
        list(transaction.get_all([reference]))

    result, calls = _run([None], body)
    assert isinstance(result, ValueError) and "read after write" in str(result)
    assert calls == [("begin", None), ("rollback", b"t1")]


def test_an_expired_transaction_is_run_again_in_a_new_one_not_refused() -> None:
    # A process frozen mid-transaction (the fault drain's SIGSTOP) commits after Firestore
    # expired it: INVALID_ARGUMENT, nothing written; Google's Node and Java clients retry it.
    expired = api_exceptions.InvalidArgument(
        "The referenced transaction has expired or is no longer valid."
    )
    result, calls = _run([expired, None])
    assert result == "done"
    assert [c for c, _ in calls][-2:] == ["begin", "commit"]
    assert type(translated(api_exceptions.InvalidArgument("too big"))) is StoreRejected
