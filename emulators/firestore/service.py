"""The google.firestore.v1.Firestore gRPC service, on the client library's protobuf classes."""

from __future__ import annotations

import logging
import math
import os
import re
import string
import time
from collections.abc import Callable, Iterable
from typing import Any

import grpc
from google.cloud.firestore_v1.types import aggregation_result as aggregation_types
from google.cloud.firestore_v1.types import firestore as firestore_types
from google.cloud.firestore_v1.types import write as write_types
from google.protobuf import empty_pb2
from google.protobuf.message import DecodeError
from google.rpc import status_pb2

from emulators.firestore.billing import Billing, aggregation_reads, query_reads
from emulators.firestore.call import Call
from emulators.firestore.database import Database, Document, Stored
from emulators.firestore.engine import Consistency, Engine
from emulators.firestore.errors import (
    EmulatorError,
    Injected,
    InvalidArgument,
    NotFound,
)
from emulators.firestore.faults import FaultPlan
from emulators.firestore.indexes import IndexSet
from emulators.firestore.mutation import micros, timestamp
from emulators.firestore.names import (
    DatabaseKey,
    parse_database,
    parse_document,
    parse_parent,
)
from emulators.firestore.query import compile_query, ordered_by_aggregated
from emulators.firestore.values import (
    NAME_PATH,
    Value,
    format_field_path,
    get_field,
    is_nan,
    is_number,
    number,
    number_value,
    parse_field_path,
    set_field,
)

logger = logging.getLogger(__name__)

SERVICE_NAME = "google.firestore.v1.Firestore"
MAX_REQUEST_BYTES = 10 * 1024 * 1024
_PROJECT = re.compile(r"^projects/([^/]+)/")
_AUTO_ID_CHARS = string.ascii_letters + string.digits

_pb = {
    name: getattr(firestore_types, name).pb()
    for name in (
        "GetDocumentRequest",
        "ListDocumentsRequest",
        "ListDocumentsResponse",
        "CreateDocumentRequest",
        "UpdateDocumentRequest",
        "DeleteDocumentRequest",
        "BatchGetDocumentsRequest",
        "BatchGetDocumentsResponse",
        "BeginTransactionRequest",
        "BeginTransactionResponse",
        "CommitRequest",
        "CommitResponse",
        "RollbackRequest",
        "RunQueryRequest",
        "RunQueryResponse",
        "RunAggregationQueryRequest",
        "RunAggregationQueryResponse",
        "ListCollectionIdsRequest",
        "ListCollectionIdsResponse",
        "BatchWriteRequest",
        "BatchWriteResponse",
    )
}
Write = write_types.Write.pb()
AggregationResult = aggregation_types.AggregationResult.pb()


class _Rejected:
    """A request the deserializer refused (too large or not a valid message)."""

    def __init__(self, error: EmulatorError) -> None:
        self.error = error


def _deserializer(cls: Any) -> Callable[[bytes], Any]:
    def deserialize(data: bytes) -> Any:
        if len(data) > MAX_REQUEST_BYTES:
            return _Rejected(
                InvalidArgument(
                    f"Request payload size exceeds the limit: {MAX_REQUEST_BYTES} bytes."
                )
            )
        try:
            return cls.FromString(data)
        except DecodeError:
            return _Rejected(InvalidArgument("The request is not a valid protocol buffer."))

    return deserialize


def _project_of(request: Any) -> str:
    for attr in ("database", "parent", "name"):
        value = getattr(request, attr, None)
        if isinstance(value, str):
            match = _PROJECT.match(value)
            if match:
                return match.group(1)
    return ""


def _consistency(request: Any) -> Consistency:
    which = request.WhichOneof("consistency_selector")
    if which == "transaction":
        return Consistency(transaction=request.transaction)
    if which == "new_transaction":
        return Consistency(new_transaction=request.new_transaction)
    if which == "read_time":
        return Consistency(read_us=micros(request.read_time))
    return Consistency()


def _masked(stored: Stored, mask: Any | None) -> Any:
    if mask is None:
        return stored.doc
    doc = Document(
        name=stored.doc.name,
        create_time=stored.doc.create_time,
        update_time=stored.doc.update_time,
    )
    for text in mask:
        path = parse_field_path(text)
        if path == ("__name__",):
            continue
        value = get_field(stored.doc.fields, path)
        if value is not None:
            set_field(doc.fields, path, value)
    return doc


# Field 1 with wire type 2 (length-delimited): RunQueryResponse.document.
_DOCUMENT_TAG = b"\x0a"


def _with_document(doc: Any, rest: bytes) -> bytes:
    """The encoding of a RunQueryResponse of `doc` (its field 1) and the fields encoded in
    `rest`. Encodings of one message type concatenate to the message holding the fields of
    both (https://protobuf.dev/programming-guides/encoding/#last-one-wins), so this is the answer
    message's encoding without building it: constructing a response copies the whole
    document into it, which cost several times more than encoding it once. The document
    itself (a stored version, or a masked copy) is not modified."""
    encoded = doc.SerializeToString()
    return b"".join((_DOCUMENT_TAG, _varint(len(encoded)), encoded, rest))


def _varint(n: int) -> bytes:
    """`n` (>= 0) as a protobuf base-128 varint
    (https://protobuf.dev/programming-guides/encoding/#varints)."""
    out = bytearray()
    while n > 0x7F:
        out.append((n & 0x7F) | 0x80)
        n >>= 7
    out.append(n)
    return bytes(out)


def _serialize(message: Any) -> bytes:
    """A response's bytes: handlers answer with messages, or with their encoding already."""
    return message if isinstance(message, bytes) else message.SerializeToString()


def _mask_of(request: Any, attr: str = "mask") -> list[str] | None:
    if not request.HasField(attr):
        return None
    paths = list(getattr(request, attr).field_paths)
    for text in paths:
        parse_field_path(text)
    return paths


class FirestoreService:
    """RPC handlers; each turns domain errors into gRPC statuses and counts its call."""

    def __init__(
        self,
        engine: Engine,
        billing: Billing,
        faults: FaultPlan,
        indexes: IndexSet | None = None,
    ) -> None:
        self.engine = engine
        self.billing = billing
        self.faults = faults
        self.indexes = indexes  # None: serve every query (not strict)

    # -- wiring -----------------------------------------------------------------------------

    def generic_handler(self) -> grpc.GenericRpcHandler:
        unary = {
            "GetDocument": ("GetDocumentRequest", self.get_document, Document),
            "ListDocuments": ("ListDocumentsRequest", self.list_documents, None),
            "CreateDocument": ("CreateDocumentRequest", self.create_document, Document),
            "UpdateDocument": ("UpdateDocumentRequest", self.update_document, Document),
            "DeleteDocument": ("DeleteDocumentRequest", self.delete_document, empty_pb2.Empty),
            "BeginTransaction": ("BeginTransactionRequest", self.begin_transaction, None),
            "Commit": ("CommitRequest", self.commit, None),
            "Rollback": ("RollbackRequest", self.rollback, empty_pb2.Empty),
            "ListCollectionIds": ("ListCollectionIdsRequest", self.list_collection_ids, None),
            "BatchWrite": ("BatchWriteRequest", self.batch_write, None),
        }
        streams = {
            "BatchGetDocuments": ("BatchGetDocumentsRequest", self.batch_get_documents),
            "RunQuery": ("RunQueryRequest", self.run_query),
            "RunAggregationQuery": ("RunAggregationQueryRequest", self.run_aggregation_query),
        }
        handlers: dict[str, grpc.RpcMethodHandler] = {}
        for method, (request_name, fn, _) in unary.items():
            handlers[method] = grpc.unary_unary_rpc_method_handler(
                self._guard_unary(method, fn),
                request_deserializer=_deserializer(_pb[request_name]),
                response_serializer=lambda m: m.SerializeToString(),
            )
        for method, (request_name, gen) in streams.items():
            handlers[method] = grpc.unary_stream_rpc_method_handler(
                self._guard_stream(method, gen),
                request_deserializer=_deserializer(_pb[request_name]),
                response_serializer=_serialize,
            )
        return grpc.method_handlers_generic_handler(SERVICE_NAME, handlers)

    def _prologue(self, method: str, request: Any) -> None:
        if isinstance(request, _Rejected):
            self.billing.call("", method)
            raise request.error
        self.billing.call(_project_of(request), method)
        fault = self.faults.take(method)
        if fault is None:
            return
        if fault.delay_s > 0:
            time.sleep(fault.delay_s)
        if fault.status is None:
            return
        if fault.status == grpc.StatusCode.ABORTED:
            # A real ABORTED ends the transaction it names (its locks released, its writes
            # dropped: the client begins a new one). Any other injected status stands for a
            # request that never reached the backend, so the transaction stays as it was and
            # a retry of the same request (the client retries UNAVAILABLE commits) succeeds.
            tid = getattr(request, "transaction", b"")
            if tid:
                self.engine.end(tid)
        raise Injected(fault.status, fault.message)

    def _guard_unary(
        self, method: str, fn: Callable[[Any, Call], Any]
    ) -> Callable[[Any, grpc.ServicerContext], Any]:
        def handle(request: Any, context: grpc.ServicerContext) -> Any:
            try:
                self._prologue(method, request)
                return fn(request, Call(context))
            except Exception as exc:
                _abort(method, exc, context)

        return handle

    def _guard_stream(
        self, method: str, fn: Callable[[Any, Call], list[Any]]
    ) -> Callable[[Any, grpc.ServicerContext], Iterable[Any]]:
        def handle(request: Any, context: grpc.ServicerContext) -> Iterable[Any]:
            try:
                self._prologue(method, request)
                responses = fn(request, Call(context))
            except Exception as exc:
                _abort(method, exc, context)
            return iter(responses)

        return handle

    # -- reads ------------------------------------------------------------------------------

    def get_document(self, request: Any, call: Call) -> Any:
        name = parse_document(request.name)
        mask = _mask_of(request)
        docs, _, _ = self.engine.get_documents(
            name.database, [name.full], _consistency(request), call
        )
        self.billing.add(name.database[0], document_reads=1)
        if docs[0] is None:
            raise NotFound(f"Document {name.full} not found.")
        return _masked(docs[0], mask)

    def batch_get_documents(self, request: Any, call: Call) -> list[Any]:
        database = parse_database(request.database)
        names: list[str] = []
        for raw in request.documents:
            name = parse_document(raw)
            if name.database != database:
                raise InvalidArgument(f"Document {raw!r} is not in {request.database!r}.")
            names.append(name.full)
        mask = _mask_of(request)
        docs, read_us, new_id = self.engine.get_documents(
            database, names, _consistency(request), call
        )
        self.billing.add(database[0], document_reads=len(names))
        response_cls = _pb["BatchGetDocumentsResponse"]
        responses = []
        read_time = timestamp(read_us)
        if new_id is not None:
            responses.append(response_cls(transaction=new_id, read_time=read_time))
        for full, stored in zip(names, docs, strict=True):
            if stored is None:
                responses.append(response_cls(missing=full, read_time=read_time))
            else:
                responses.append(response_cls(found=_masked(stored, mask), read_time=read_time))
        return responses

    def run_query(self, request: Any, call: Call) -> list[Any]:
        database, _ = parse_parent(request.parent)
        if request.WhichOneof("query_type") != "structured_query":
            raise InvalidArgument("RunQuery needs a structured_query.")
        query = compile_query(request.parent, request.structured_query)
        if self.indexes is not None:
            self.indexes.check(database, request.parent, request.structured_query)
        result, read_us, new_id = self.engine.run_query(
            database, query, _consistency(request), call=call
        )
        self.billing.add(database[0], document_reads=query_reads(len(result.docs), result.skipped))
        response_cls = _pb["RunQueryResponse"]
        read_time = timestamp(read_us)
        mask = None
        if query.projection is not None:
            mask = [format_field_path(p) for p in query.projection]
        # The first answer carries the transaction and the skipped count, every one the read
        # time; each is sent encoded (see _with_document).
        first = response_cls(read_time=read_time, skipped_results=result.skipped)
        if new_id is not None:
            first.transaction = new_id
        if not result.docs:
            return [first]
        rest = response_cls(read_time=read_time).SerializeToString()
        responses = [_with_document(_masked(result.docs[0], mask), first.SerializeToString())]
        for stored in result.docs[1:]:
            responses.append(_with_document(_masked(stored, mask), rest))
        return responses

    def run_aggregation_query(self, request: Any, call: Call) -> list[Any]:
        database, _ = parse_parent(request.parent)
        if request.WhichOneof("query_type") != "structured_aggregation_query":
            raise InvalidArgument("RunAggregationQuery needs a structured_aggregation_query.")
        aggregation = request.structured_aggregation_query
        query = compile_query(request.parent, aggregation.structured_query)
        aggregations = list(aggregation.aggregations)
        if not aggregations:
            # Production's wording (asserted by the client's system tests:
            # https://github.com/googleapis/python-firestore/blob/main/tests/system/test_system.py).
            raise InvalidArgument("Aggregations can not be empty.")
        if len(aggregations) > 5:
            raise InvalidArgument("At most 5 aggregations per query.")
        aliases = _aliases(aggregations)
        aggregated = _aggregated_paths(aggregations)
        _refuse_aggregated_after_name(aggregation.structured_query, aggregated)
        if self.indexes is not None:
            self.indexes.check(database, request.parent, aggregation.structured_query, aggregated)
        query = ordered_by_aggregated(query, aggregated)
        consistency = _consistency(request)
        docs: list[Stored] | int
        new_id = None
        counted = None
        if consistency == Consistency() and all(
            a.WhichOneof("operator") == "count" for a in aggregations
        ):
            counted = self.engine.count(database, query)
        if counted is not None:
            docs, read_us = counted
        else:
            result, read_us, new_id = self.engine.run_query(
                database, query, consistency, ordered=False, call=call
            )
            docs = result.docs
        fields: dict[str, Any] = {}
        entries = 0
        for alias, spec in zip(aliases, aggregations, strict=True):
            value, scanned = _aggregate(spec, docs)
            fields[alias] = value
            entries = max(entries, scanned)
        self.billing.add(
            database[0],
            document_reads=aggregation_reads(entries),
            index_entries_counted=entries,
        )
        response = _pb["RunAggregationQueryResponse"](
            result=AggregationResult(aggregate_fields=fields), read_time=timestamp(read_us)
        )
        if new_id is not None:
            response.transaction = new_id
        return [response]

    def list_documents(self, request: Any, call: Call) -> Any:
        database, _ = parse_parent(request.parent)
        if not request.collection_id:
            raise InvalidArgument("ListDocuments needs a collection_id.")
        if request.page_size < 0:
            raise InvalidArgument("page_size must be non-negative.")
        prefix = f"{request.parent}/{request.collection_id}/"
        mask = _mask_of(request)
        after = request.page_token
        limit = request.page_size or 300

        def listing(db: Database, read_us: int | None) -> list[Any]:
            existing: set[str] = set()
            parents: set[str] = set()  # ids with live descendants (shown as missing documents)
            for name in db.all_names(read_us):
                if name.startswith(prefix) and db.get(name, read_us) is not None:
                    doc_id, _, rest = name[len(prefix) :].partition("/")
                    (parents if rest else existing).add(doc_id)
            out = []
            for doc_id in sorted(existing | parents if request.show_missing else existing):
                if after and doc_id <= after:
                    continue
                stored = db.get(prefix + doc_id, read_us)
                out.append(
                    _masked(stored, mask) if stored is not None else Document(name=prefix + doc_id)
                )
                if len(out) > limit:
                    break
            return out

        docs, _ = self.engine.with_snapshot(database, _consistency(request), listing)
        response = _pb["ListDocumentsResponse"](documents=docs[:limit])
        if len(docs) > limit:
            response.next_page_token = docs[limit - 1].name.rsplit("/", 1)[1]
        self.billing.add(database[0], document_reads=query_reads(len(response.documents)))
        return response

    def list_collection_ids(self, request: Any, call: Call) -> Any:
        database, _ = parse_parent(request.parent)
        prefix = request.parent + "/"
        consistency = Consistency()
        if request.WhichOneof("consistency_selector") == "read_time":
            consistency = Consistency(read_us=micros(request.read_time))

        def listing(db: Database, read_us: int | None) -> list[str]:
            ids = set()
            for name in db.all_names(read_us):
                if name.startswith(prefix) and db.get(name, read_us) is not None:
                    ids.add(name[len(prefix) :].split("/", 1)[0])
            return sorted(ids)

        ids, _ = self.engine.with_snapshot(database, consistency, listing)
        if request.page_token:
            ids = [i for i in ids if i > request.page_token]
        size = request.page_size or len(ids) or 1
        response = _pb["ListCollectionIdsResponse"](collection_ids=ids[:size])
        if len(ids) > size:
            response.next_page_token = ids[size - 1]
        self.billing.add(database[0], document_reads=1)
        return response

    # -- transactions -----------------------------------------------------------------------

    def begin_transaction(self, request: Any, call: Call) -> Any:
        database = parse_database(request.database)
        options = request.options if request.HasField("options") else None
        tid = self.engine.begin(database, options)
        return _pb["BeginTransactionResponse"](transaction=tid)

    def rollback(self, request: Any, call: Call) -> Any:
        database = parse_database(request.database)
        if not request.transaction:
            raise InvalidArgument("Rollback needs a transaction.")
        self.engine.rollback(database, request.transaction)
        return empty_pb2.Empty()

    # -- writes -----------------------------------------------------------------------------

    def _bill_writes(self, database: DatabaseKey, outcomes: Iterable[Any]) -> None:
        writes = deletes = 0
        for outcome in outcomes:
            if outcome.is_delete:
                deletes += 1
            else:
                writes += 1
        self.billing.add(database[0], document_writes=writes, document_deletes=deletes)
        self.billing.observe_writes(database, outcomes)

    def commit(self, request: Any, call: Call) -> Any:
        database = parse_database(request.database)
        commit_us, outcomes = self.engine.commit(
            database, list(request.writes), request.transaction or None, call
        )
        self._bill_writes(database, outcomes)
        return _pb["CommitResponse"](
            write_results=[o.result for o in outcomes], commit_time=timestamp(commit_us)
        )

    def batch_write(self, request: Any, call: Call) -> Any:
        database = parse_database(request.database)
        results = self.engine.batch_write(database, list(request.writes))
        response = _pb["BatchWriteResponse"]()
        done = []
        for outcome, error in results:
            if outcome is not None:
                done.append(outcome)
                response.write_results.append(outcome.result)
                response.status.append(status_pb2.Status(code=0))
            else:
                response.write_results.append(write_types.WriteResult.pb()())
                code = error.code if isinstance(error, EmulatorError) else grpc.StatusCode.INTERNAL
                message = error.message if isinstance(error, EmulatorError) else str(error)
                response.status.append(status_pb2.Status(code=code.value[0], message=message))
        self._bill_writes(database, done)
        return response

    def _commit_one(self, database: DatabaseKey, write: Any) -> Any:
        _, outcomes = self.engine.commit(database, [write], None)
        self._bill_writes(database, outcomes)
        return outcomes[0]

    def create_document(self, request: Any, call: Call) -> Any:
        database, _ = parse_parent(request.parent)
        doc_id = request.document_id or "".join(
            _AUTO_ID_CHARS[b % len(_AUTO_ID_CHARS)] for b in os.urandom(20)
        )
        name = parse_document(f"{request.parent}/{request.collection_id}/{doc_id}").full
        write = Write(update=Document(name=name, fields=request.document.fields))
        write.current_document.exists = False
        outcome = self._commit_one(database, write)
        return _masked(Stored(outcome.doc, micros(outcome.doc.update_time)), _mask_of(request))

    def update_document(self, request: Any, call: Call) -> Any:
        name = parse_document(request.document.name)
        write = Write(update=request.document)
        if request.HasField("update_mask"):
            write.update_mask.CopyFrom(request.update_mask)
        if request.HasField("current_document"):
            write.current_document.CopyFrom(request.current_document)
        outcome = self._commit_one(name.database, write)
        return _masked(Stored(outcome.doc, micros(outcome.doc.update_time)), _mask_of(request))

    def delete_document(self, request: Any, call: Call) -> Any:
        name = parse_document(request.name)
        write = Write(delete=name.full)
        if request.HasField("current_document"):
            write.current_document.CopyFrom(request.current_document)
        self._commit_one(name.database, write)
        return empty_pb2.Empty()


def _aliases(aggregations: list[Any]) -> list[str]:
    """Each aggregation's result name: its alias, or field_<n> numbering only the unnamed ones
    (the Aggregation.alias field documentation:
    https://cloud.google.com/python/docs/reference/firestore/latest/google.cloud.firestore_v1.types.StructuredAggregationQuery.Aggregation).
    """
    aliases: list[str] = []
    unnamed = 0
    for spec in aggregations:
        alias = spec.alias
        if not alias:
            unnamed += 1
            alias = f"field_{unnamed}"
        if alias in aliases:
            raise InvalidArgument(f"Aggregation aliases contain duplicate alias {alias}.")
        aliases.append(alias)
    return aliases


def _aggregated_paths(aggregations: list[Any]) -> list[Any]:
    """The fields the sum and avg aggregations read, in order."""
    paths = []
    for spec in aggregations:
        which = spec.WhichOneof("operator")
        if which in ("sum", "avg"):
            paths.append(parse_field_path(getattr(spec, which).field.field_path))
    return paths


def _refuse_aggregated_after_name(structured: Any, paths: list[Any]) -> None:
    """A sum or avg reads its field's index, so the field is an implied order; after an
    explicit __name__ order (the client adds one for a document cursor) it would have to come
    after __name__ in an index, which Firestore cannot have (__name__ ends every index).
    Google's emulator refuses such a query with this message, cursor, limit or not."""
    explicit = [parse_field_path(order.field.field_path) for order in structured.order_by]
    if NAME_PATH not in explicit:
        return
    before = set(explicit[: explicit.index(NAME_PATH)])
    missing = [format_field_path(path) for path in paths if path not in before]
    if missing:
        raise InvalidArgument(
            f"This query requires an index that has fields [{', '.join(missing)}] after "
            "__name__ and Firestore does not currently support such an index. Please try the "
            "query again with additional ordering on those fields before __name__."
        )


def _aggregate(spec: Any, docs: list[Stored] | int) -> tuple[Any, int]:
    """(value, index entries counted) for one aggregation over the query's documents (or
    over a number of matches the indexes already counted)."""
    which = spec.WhichOneof("operator")
    if which == "count":
        count = docs if isinstance(docs, int) else len(docs)
        if spec.count.HasField("up_to"):
            if spec.count.up_to.value <= 0:
                raise InvalidArgument("count up_to must be positive.")
            count = min(count, spec.count.up_to.value)
        return Value(integer_value=count), count
    if which in ("sum", "avg"):
        assert not isinstance(docs, int)
        path = parse_field_path(getattr(spec, which).field.field_path)
        values = []
        for stored in docs:
            value = stored.value(path)
            if value is not None and is_number(value):
                values.append(value)
        if which == "sum":
            return _sum(values), len(docs)
        if not values:
            return Value(null_value=0), len(docs)
        if any(is_nan(v) for v in values):
            return Value(double_value=math.nan), len(docs)
        return Value(double_value=math.fsum(float(number(v)) for v in values) / len(values)), len(
            docs
        )
    raise InvalidArgument("Unknown aggregation operator.")


def _sum(values: list[Any]) -> Any:
    if any(is_nan(v) for v in values):
        return Value(double_value=math.nan)
    numbers = [number(v) for v in values]
    if all(isinstance(n, int) for n in numbers):
        total = sum(numbers)
        if -(2**63) <= total < 2**63:
            return number_value(int(total))
    return Value(double_value=math.fsum(float(n) for n in numbers))


def _abort(method: str, exc: Exception, context: grpc.ServicerContext) -> None:
    """End the call with the error's own status, or INTERNAL (logged) for anything else."""
    if isinstance(exc, EmulatorError):
        context.abort(exc.code, exc.message)
        return  # abort raises; without it, never also answer INTERNAL
    logger.exception("%s failed", method)
    context.abort(grpc.StatusCode.INTERNAL, f"{type(exc).__name__}: {exc}")
