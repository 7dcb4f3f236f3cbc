"""Every Firestore RPC the store makes, each one call of the public GAPIC client with bounds.

`Gateway` sends the requests of the Firestore RPC API
(https://cloud.google.com/firestore/docs/reference/rpc/google.firestore.v1) as
`google.cloud.firestore_v1.types` messages through `FirestoreClient` (`database.Database`),
each with an explicit `timeout=` and `retry=`: reads and queries with a bounded retry of
transient errors, writes with `retry=None` (a retried conditional write would answer for its
own first attempt). Requests are built on the raw protobufs and wrapped (proto-plus's public
`Message.wrap`), answers read through proto-plus's public `type(x).pb(x)`: no wrapper per value
either way. Documents come back as the high-level client's public `DocumentSnapshot` (with a
`DocumentReference` from the high-level client), so callers read them as they always did.

The unary RPCs (GetDocument, Commit, BatchWrite, BeginTransaction, Rollback: every call on the
worker's path) go one level lower: gRPC callables of the gateway's own on the transport's
public `grpc_channel` (so the channel's credentials and options are the client's), raw
protobufs in and out, with what the generated method adds done here: the database's
metadata, the `x-goog-api-client` header of the client's own `DEFAULT_CLIENT_INFO` and the
routing header (`x-goog-request-params`) the method sends, the deadline (api_core's
`TimeToDeadlineTimeout`, as the method applies it), the retry, and a gRPC error raised as
api_core's exception for its status (`tests/unit/store/test_unary_calls.py` holds the two to
the same). The generated method rebuilds its wrappers, merges its metadata, opens a tracing
context and passes a logging interceptor and proto-plus on every call: measured against the
built-in emulator, about 0.17 ms of a commit's 0.4 ms of client CPU. What is lost is only that
interceptor's DEBUG logging of each request. The streaming reads keep the generated methods:
their iterators do more than map errors.

`Writes` is the list of `Write`s a commit, a batch write or a transaction sends, built by
`encoding`.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Iterable, Iterator, Sequence
from datetime import datetime
from typing import Any

import grpc
from google.api_core import exceptions as api_exceptions
from google.api_core import gapic_v1
from google.api_core.timeout import TimeToDeadlineTimeout
from google.cloud.firestore import DocumentSnapshot
from google.cloud.firestore_v1.services.firestore.transports import FirestoreGrpcTransport
from google.cloud.firestore_v1.services.firestore.transports.base import DEFAULT_CLIENT_INFO
from google.cloud.firestore_v1.types import document as document_types
from google.cloud.firestore_v1.types import firestore as rpc
from google.cloud.firestore_v1.types import query as query_types
from google.protobuf import empty_pb2

from services.store.bounds import RETRYABLE, CallBounds
from services.store.database import Database, database_path, for_client
from services.store.decoding import create_time, decode_fields, read_time_of, update_time
from services.store.encoding import (
    create_write,
    delete_write,
    merge_write,
    proto_timestamp,
    set_write,
    update_write,
)
from services.store.queries import NAME, QuerySpec, structured_query

logger = logging.getLogger(__name__)

# How often a query outside a transaction resumes after a transient error mid-stream (after
# the last document it yielded, as the high-level client's `stream` does), before it raises.
STREAM_RESUMES = 3
COUNT_ALIAS = "n"
# The Firestore RPC API's service, as its methods are named on the wire.
_SERVICE = "google.firestore.v1.Firestore"


class Writes:
    """`Write`s (raw protobufs) in the order they are sent, with the document each names."""

    def __init__(self, documents: str) -> None:
        self._documents = documents  # the database's `.../documents` path
        self.pbs: list[Any] = []

    def __len__(self) -> int:
        return len(self.pbs)

    @property
    def names(self) -> list[str]:
        """The resource name of each write's document, in write order (as its result)."""
        return [str(pb.update.name or pb.delete) for pb in self.pbs]

    def create(self, reference: Any, data: dict[str, Any]) -> None:
        self.pbs.append(create_write(self._name(reference), data))

    def set(self, reference: Any, data: dict[str, Any]) -> None:
        self.pbs.append(set_write(self._name(reference), data))

    def merge(self, reference: Any, fields: dict[str, Any]) -> None:
        """Replace the named top-level fields, creating the document if need be:
        `set(fields, merge=list(fields))`."""
        self.pbs.append(merge_write(self._name(reference), fields))

    def update(
        self, reference: Any, fields: dict[str, Any], last_update_time: datetime | None = None
    ) -> None:
        """Replace the named top-level fields, on condition that the document exists or, with
        `last_update_time`, that it was last updated at exactly that time."""
        pb = update_write(self._name(reference), fields, last_update_time)
        if pb is None:
            raise ValueError(f"cannot encode the update {sorted(fields)} of {reference.path!r}")
        self.pbs.append(pb)

    def delete(self, reference: Any) -> None:
        self.pbs.append(delete_write(self._name(reference)))

    def _name(self, reference: Any) -> str:
        return f"{self._documents}/{reference.path}"


class Gateway:
    """One database's RPCs with one set of call bounds. `client` is the high-level
    `firestore.Client` of the same database: it builds the `DocumentReference`s of snapshots
    (its public `collection`/`document`) and sends nothing."""

    def __init__(self, client: Any, database: str | None, bounds: CallBounds) -> None:
        self.client = client
        self.bounds = bounds
        self._database_name = database
        self._database: Database | None = None
        self._lock = threading.Lock()
        # Every unary call's metadata but its routing header: the database's, and the
        # x-goog-api-client header the generated client sends (set with the database).
        self._metadata: tuple[tuple[str, str], ...] = ()
        self._database_routing: tuple[str, str] = ("", "")
        self._stubs: dict[str, Any] | None = None  # made at the first unary call

    @property
    def database(self) -> Database:
        """The database and its GAPIC client, built at the first call (no channel is opened
        before a request needs one, as with the high-level client)."""
        if self._database is None:
            with self._lock:
                if self._database is None:
                    database = for_client(self.client, self._database_name)
                    self._metadata = (*database.metadata, DEFAULT_CLIENT_INFO.to_grpc_metadata())
                    self._database_routing = _routing("database", database.path)
                    self._database = database
        return self._database

    def writes(self) -> Writes:
        # The names need no channel: a Writes built before the first call opens none.
        return Writes(f"{database_path(str(self.client.project), self._database_name)}/documents")

    # -- reads ------------------------------------------------------------------------------

    def get_all(
        self,
        references: Sequence[Any],
        transaction: bytes | None = None,
        read_time: datetime | None = None,
    ) -> Iterator[DocumentSnapshot]:
        """A snapshot of each document (exists False when missing), as BatchGetDocuments
        answers them (not necessarily in request order): what `client.get_all` and
        `transaction.get_all` send."""
        by_name = {f"{self.database.documents}/{ref.path}": ref for ref in references}
        request = rpc.BatchGetDocumentsRequest.pb()(
            database=self.database.path, documents=list(by_name)
        )
        if transaction is not None:
            request.transaction = transaction
        elif read_time is not None:
            request.read_time.CopyFrom(proto_timestamp(read_time))
        responses = self.database.api.batch_get_documents(
            request=rpc.BatchGetDocumentsRequest.wrap(request),
            metadata=self.database.metadata,
            **self.bounds.kwargs,
        )
        for response in responses:
            raw = type(response).pb(response)
            kind = raw.WhichOneof("result")
            if kind == "found":
                reference = by_name[raw.found.name]
                yield self._snapshot(reference, raw.found, read_time_of(raw))
            elif kind == "missing":
                yield DocumentSnapshot(
                    by_name[raw.missing],
                    None,
                    exists=False,
                    read_time=read_time_of(raw),
                    create_time=None,
                    update_time=None,
                )
            else:
                raise ValueError("BatchGetDocuments answered neither found nor missing")

    def get(self, reference: Any, transaction: bytes | None = None) -> DocumentSnapshot:
        """One document's snapshot (exists False when missing): `reference.get()`."""
        for snapshot in self.get_all([reference], transaction):
            return snapshot
        raise api_exceptions.InternalServerError("BatchGetDocuments answered nothing")

    def get_document(self, reference: Any) -> Any | None:
        """One document read outside a transaction, as the unary GetDocument RPC
        (https://cloud.google.com/firestore/docs/reference/rpc/google.firestore.v1#google.firestore.v1.Firestore.GetDocument):
        the raw `Document` (`decoding` reads it; no snapshot, whose `to_dict` and `get` each
        deep-copy what they return), or None when Firestore answers NOT_FOUND (which also
        means a missing database: a caller treats None as "decide in a transaction", whose
        read tells the two apart). A server-streaming BatchGetDocuments costs the client
        about twice the CPU."""
        name = f"{self.database.documents}/{reference.path}"
        request = rpc.GetDocumentRequest.pb()(name=name)
        try:
            document = self._unary(
                "get_document",
                request,
                _routing("name", name),
                self.bounds.kwargs,
            )
        except api_exceptions.NotFound:
            return None
        return document

    def query(
        self,
        spec: QuerySpec,
        transaction: bytes | None = None,
        read_time: datetime | None = None,
    ) -> Iterator[tuple[str, Any]]:
        """(document ID, raw `Document`) of each result of `spec`, in order. Outside a
        transaction a transient error mid-stream resumes after the last document yielded (at
        most STREAM_RESUMES times); inside one it raises, as the high-level client's stream
        does (a resumed read would not be the transaction's)."""
        prefix = f"{self.database.documents}/{spec.collection}/"
        query = structured_query(spec, self.database.documents)
        resumes = 0
        seen = 0
        while True:
            responses = self._run_query(query, transaction, read_time)
            last = None
            try:
                for response in responses:
                    raw = type(response).pb(response)
                    if raw.HasField("document"):
                        last = raw.document
                        seen += 1
                        yield _document_id(raw.document.name, prefix), raw.document
                return
            except RETRYABLE:
                # A range without an order is ordered by the range field first, a cursor
                # over it is not one this module builds: such a query raises.
                unordered = spec.ranges and not spec.order_by
                if transaction is not None or resumes >= STREAM_RESUMES or unordered:
                    raise
                resumes += 1
                logger.warning("query stream broke after %d documents; resuming", seen)
                if last is not None:
                    if spec.limit is not None and seen >= spec.limit:
                        return
                    query = _resumed(query, spec, last, seen)

    def stream(
        self,
        spec: QuerySpec,
        transaction: bytes | None = None,
        read_time: datetime | None = None,
    ) -> Iterator[DocumentSnapshot]:
        """`query` as snapshots: what `query.stream()` yields."""
        collection = self.client.collection(spec.collection)
        for document_id, document in self.query(spec, transaction, read_time):
            yield self._snapshot(collection.document(document_id), document, None)

    def count(self, spec: QuerySpec, read_time: datetime | None = None) -> tuple[int, Any]:
        """The number of documents `spec` matches, as one count aggregation
        (https://cloud.google.com/firestore/docs/reference/rpc/google.firestore.v1#runaggregationqueryrequest),
        and the read time the answer is at (None when Firestore sent no result)."""
        aggregation = query_types.StructuredAggregationQuery.pb()()
        aggregation.structured_query.CopyFrom(structured_query(spec, self.database.documents))
        counted = aggregation.aggregations.add()
        counted.alias = COUNT_ALIAS
        counted.count.SetInParent()
        request = rpc.RunAggregationQueryRequest.pb()(parent=self.database.documents)
        request.structured_aggregation_query.CopyFrom(aggregation)
        if read_time is not None:
            request.read_time.CopyFrom(proto_timestamp(read_time))
        responses = self.database.api.run_aggregation_query(
            request=rpc.RunAggregationQueryRequest.wrap(request),
            metadata=self.database.metadata,
            **self.bounds.kwargs,
        )
        for response in responses:
            raw = type(response).pb(response)
            if raw.HasField("result"):
                value = raw.result.aggregate_fields[COUNT_ALIAS].integer_value
                return int(value), read_time_of(raw)
        return 0, None

    # -- writes -----------------------------------------------------------------------------

    def commit(
        self, writes: Writes, transaction: bytes | None = None, *, idempotent: bool = False
    ) -> Any:
        """Commit `writes` atomically (in `transaction` when given): the raw `CommitResponse`.
        Sent once unless `idempotent` (no condition, no create: sending it twice writes the
        same), which gets a read's bounded retry."""
        request = rpc.CommitRequest.pb()(database=self.database.path)
        request.writes.extend(writes.pbs)
        if transaction is not None:
            request.transaction = transaction
        response = self._unary(
            "commit",
            request,
            self._database_routing,
            self.bounds.kwargs if idempotent else self.bounds.write_kwargs,
        )
        return response

    def batch_write(self, writes: Writes) -> Any:
        """Apply each of `writes` on its own (BatchWrite, not atomic): the raw
        `BatchWriteResponse`, a status and a write result per write."""
        request = rpc.BatchWriteRequest.pb()(database=self.database.path)
        request.writes.extend(writes.pbs)
        response = self._unary(
            "batch_write",
            request,
            self._database_routing,
            self.bounds.write_kwargs,
        )
        return response

    # -- transactions -----------------------------------------------------------------------

    def begin(self, retry_id: bytes | None = None) -> bytes:
        """A new read-write transaction's ID; `retry_id` (the first attempt's) keeps its place
        in line when an aborted one is retried, as the high-level client's retries do."""
        request = rpc.BeginTransactionRequest.pb()(database=self.database.path)
        if retry_id is not None:
            request.options.read_write.retry_transaction = retry_id
        response = self._unary(
            "begin_transaction",
            request,
            self._database_routing,
            self.bounds.kwargs,
        )
        return bytes(response.transaction)

    def rollback(self, transaction: bytes) -> None:
        request = rpc.RollbackRequest.pb()(database=self.database.path, transaction=transaction)
        self._unary(
            "rollback",
            request,
            self._database_routing,
            self.bounds.write_kwargs,
        )

    # -- plumbing ---------------------------------------------------------------------------

    def _unary(
        self, method: str, request: Any, routing: tuple[str, str], bounds: dict[str, Any]
    ) -> Any:
        """One unary RPC through the transport's gRPC callable for `method`, as the generated
        `FirestoreClient.<method>` sends it: the same metadata (the database's, the client's
        x-goog-api-client, the routing header), the deadline `bounds["timeout"]` counted
        from the first attempt, `bounds["retry"]` (None: sent once), and a gRPC error raised
        as api_core's exception for its status."""
        stubs = self._stubs
        if stubs is None:  # two threads may both make them: the same callables either way
            transport = self.database.api.transport
            if not isinstance(transport, FirestoreGrpcTransport):  # connect() makes only these
                raise TypeError(f"the Firestore client's transport is {type(transport)}, not gRPC")
            stubs = self._stubs = _unary_stubs(transport.grpc_channel)
        stub = stubs[method]
        metadata = (*self._metadata, routing)

        def attempt(timeout: float | None = None) -> Any:
            try:
                return stub(request, timeout=timeout, metadata=metadata)
            except grpc.RpcError as exc:
                raise api_exceptions.from_grpc_error(exc) from exc

        call = TimeToDeadlineTimeout(bounds["timeout"])(attempt)
        retry = bounds["retry"]
        return (retry(call) if retry is not None else call)()

    def _run_query(
        self, query: Any, transaction: bytes | None, read_time: datetime | None
    ) -> Iterable[Any]:
        request = rpc.RunQueryRequest.pb()(parent=self.database.documents)
        request.structured_query.CopyFrom(query)
        if transaction is not None:
            request.transaction = transaction
        elif read_time is not None:
            request.read_time.CopyFrom(proto_timestamp(read_time))
        return self.database.api.run_query(
            request=rpc.RunQueryRequest.wrap(request),
            metadata=self.database.metadata,
            **self.bounds.kwargs,
        )

    def _snapshot(self, reference: Any, document: Any, read_time: Any) -> DocumentSnapshot:
        return DocumentSnapshot(
            reference,
            decode_fields(document.fields, self.client),
            exists=True,
            read_time=read_time,
            create_time=create_time(document),
            update_time=update_time(document),
        )


# Each unary RPC the gateway sends: its method on the wire (the RPC API's service and method
# names, as the generated transport names them) and its request and answer messages.
_UNARY: dict[str, tuple[str, Any, Any]] = {
    "get_document": ("GetDocument", rpc.GetDocumentRequest, document_types.Document),
    "commit": ("Commit", rpc.CommitRequest, rpc.CommitResponse),
    "batch_write": ("BatchWrite", rpc.BatchWriteRequest, rpc.BatchWriteResponse),
    "begin_transaction": (
        "BeginTransaction",
        rpc.BeginTransactionRequest,
        rpc.BeginTransactionResponse,
    ),
    "rollback": ("Rollback", rpc.RollbackRequest, empty_pb2.Empty),
}


def _unary_stubs(channel: grpc.Channel) -> dict[str, Any]:
    """A gRPC callable per unary RPC on `channel` (the transport's public `grpc_channel`),
    sending and answering raw protobufs: the transport's own callables go through its
    logging interceptor and proto-plus's wrappers, about 45 us of CPU per call more."""
    stubs = {}
    for method, (name, request, response) in _UNARY.items():
        answer = response if response is empty_pb2.Empty else response.pb()
        stubs[method] = channel.unary_unary(
            f"/{_SERVICE}/{name}",
            request_serializer=request.pb().SerializeToString,
            response_deserializer=answer.FromString,
        )
    return stubs


def _routing(field: str, value: str) -> tuple[str, str]:
    """The `x-goog-request-params` header the generated method sends for a request whose
    routing field is `field` (Firestore routes a request by it)."""
    header: tuple[str, str] = gapic_v1.routing_header.to_grpc_metadata(((field, value),))
    return header


def _document_id(name: str, prefix: str) -> str:
    if not name.startswith(prefix):
        raise ValueError(f"unexpected document {name!r} in the answer to a query of {prefix!r}")
    return name[len(prefix) :]


def _resumed(query: Any, spec: QuerySpec, last: Any, seen: int) -> Any:
    """`query` to continue after the document `last`: a start cursor of its order values and
    name (what the high-level client's `start_after(last_snapshot)` sends), the limit less
    what was already yielded."""
    resumed = type(query)()
    resumed.CopyFrom(query)
    resumed.start_at.Clear()
    resumed.start_at.before = False
    if not any(order.field.field_path == NAME for order in resumed.order_by):
        order = resumed.order_by.add()
        order.field.field_path = NAME
        order.direction = query_types.StructuredQuery.Direction.ASCENDING
    for name in spec.order_by:
        resumed.start_at.values.add().CopyFrom(_field(last.fields, name))
    resumed.start_at.values.add().reference_value = last.name
    if spec.limit is not None:
        resumed.limit.value = spec.limit - seen
    return resumed


def _field(fields: Any, path: str) -> Any:
    *parents, leaf = path.split(".")
    for name in parents:
        fields = fields[name].map_value.fields
    return fields[leaf]
