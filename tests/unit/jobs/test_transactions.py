"""The transaction plumbing leans on private internals of google-cloud-firestore; this fails
loudly (naming what moved) when a client release changes them, before a deploy finds out."""

from __future__ import annotations

import inspect

from google.api_core import exceptions as api_exceptions
from google.cloud import firestore
from google.cloud.firestore_v1 import transaction as transaction_module

from services.jobs.errors import StoreMisconfigured, StoreRejected, StoreUnavailable
from services.jobs.transactions import BoundedTransaction, is_deadline, translated

# What BoundedTransaction overrides or reads on the client's Transaction.
TRANSACTION_INTERNALS = ("_begin", "_commit", "_rollback", "_clean_up", "_options_protobuf")
# What it reads on the client.
CLIENT_INTERNALS = ("_firestore_api", "_database_string", "_rpc_metadata")


def test_the_transaction_methods_we_override_still_exist_with_their_signatures() -> None:
    for name in TRANSACTION_INTERNALS:
        assert callable(getattr(firestore.Transaction, name, None)), f"Transaction.{name} is gone"
    begin = inspect.signature(firestore.Transaction._begin)
    assert list(begin.parameters) == ["self", "retry_id"], begin
    assert list(inspect.signature(firestore.Transaction._commit).parameters) == ["self"]
    assert list(inspect.signature(firestore.Transaction._rollback).parameters) == ["self"]


def test_the_transaction_still_keeps_its_state_in_the_attributes_we_read() -> None:
    client = firestore.Client(project="p", credentials=_anonymous())
    transaction = firestore.Transaction(client)
    for name in ("_id", "_write_pbs", "in_progress"):
        assert hasattr(transaction, name), f"Transaction.{name} is gone"
    for name in CLIENT_INTERNALS:
        assert hasattr(type(client), name) or hasattr(client, name), f"Client.{name} is gone"


def test_a_query_still_builds_its_run_query_call_where_query_in_calls_it() -> None:
    # TransactionRunner.query_in calls _get_stream_iterator(transaction, retry, timeout) and
    # reads the raw `document` of each response.
    method = getattr(firestore.Query, "_get_stream_iterator", None)
    assert callable(method), "Query._get_stream_iterator is gone"
    parameters = list(inspect.signature(method).parameters)
    assert parameters[:4] == ["self", "transaction", "retry", "timeout"], parameters
    source = inspect.getsource(method)
    assert "run_query(" in source and "expected_prefix" in source, source


def test_the_transactional_wrapper_still_calls_the_methods_we_override() -> None:
    source = inspect.getsource(transaction_module._Transactional)
    for call in ("transaction._begin(", "transaction._commit()", "transaction._rollback()"):
        assert call in source, f"_Transactional no longer calls {call}"
    assert issubclass(BoundedTransaction, firestore.Transaction)


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


def _anonymous() -> object:
    from google.auth.credentials import AnonymousCredentials

    return AnonymousCredentials()


def test_add_update_queues_exactly_what_update_queues_on_every_kind_of_batch() -> None:
    from datetime import UTC, datetime

    from google.cloud.firestore_v1.bulk_batch import BulkWriteBatch

    from services.jobs.transactions import add_update

    client = firestore.Client(project="p", credentials=_anonymous())
    ref = client.collection("jobs").document("job-1")
    stamp = datetime(2026, 3, 1, 12, 0, 0, 250_000, tzinfo=UTC)
    fields = {"state": "claimed", "claim": {"run_id": "r", "generation": 2, "claimed_at": stamp}}
    for make in (
        lambda: firestore.Transaction(client),
        client.batch,
        lambda: BulkWriteBatch(client),
    ):
        for condition in (None, stamp):
            ours, theirs = make(), make()
            add_update(ours, ref, fields, condition)
            option = None if condition is None else client.write_option(last_update_time=condition)
            theirs.update(ref, fields, option=option)
            assert [w._pb for w in ours._write_pbs] == [w._pb for w in theirs._write_pbs]
            assert ours._document_references == theirs._document_references
    # What encoding declines (a sentinel) still goes through the client's own update.
    declined = client.batch()
    add_update(declined, ref, {"state": firestore.DELETE_FIELD})
    assert declined._write_pbs[0].update_mask.field_paths == ["state"]
