"""Applying one Write (set, merge, delete, preconditions, field transforms) to a document."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from google.cloud.firestore_v1.types import write as write_types
from google.protobuf import timestamp_pb2

from emulators.firestore.database import Document, Stored
from emulators.firestore.errors import (
    AlreadyExists,
    FailedPrecondition,
    InvalidArgument,
    NotFound,
)
from emulators.firestore.names import DatabaseKey, parse_document
from emulators.firestore.values import (
    ArrayValue,
    Value,
    delete_field,
    get_field,
    is_nan,
    is_number,
    kind,
    number,
    number_value,
    set_field,
    sort_key,
    validate_array_items,
    validate_fields,
    writable_path,
)

WriteResult = write_types.WriteResult.pb()
_REQUEST_TIME = write_types.DocumentTransform.FieldTransform.ServerValue.REQUEST_TIME
MAX_DOCUMENT_BYTES = 1_048_576
_INT64_MAX = 2**63 - 1
_INT64_MIN = -(2**63)


def storage_size(doc: Any) -> int:
    """The size production counts against the 1 MiB limit
    (https://cloud.google.com/firestore/docs/storage-size): the document name (each collection
    and document ID + 1, + 16), each field name + 1 and value, + 32. Not the protobuf's size,
    which counts an integer or a timestamp in a few varint bytes where production counts 8, so a
    document of many small numbers passed here and failed in production (issue 33, finding 2).
    A map is counted as its fields + 32, as a document's are (the page's "calculated the same
    as for document size"), the stricter reading."""
    return _name_size(doc.name) + _fields_size(doc.fields) + 32


def _name_size(name: str) -> int:
    path = name.split("/documents/", 1)[-1]
    return sum(len(part.encode("utf-8")) + 1 for part in path.split("/")) + 16


def _fields_size(fields: Any) -> int:
    return sum(len(key.encode("utf-8")) + 1 + _value_size(fields[key]) for key in fields)


def _value_size(value: Any) -> int:
    which = value.WhichOneof("value_type")
    if which == "string_value":
        return len(value.string_value.encode("utf-8")) + 1
    if which == "bytes_value":
        return len(value.bytes_value)
    if which == "map_value":
        return _fields_size(value.map_value.fields) + 32
    if which == "array_value":
        return sum(_value_size(item) for item in value.array_value.values)
    if which == "reference_value":
        return _name_size(value.reference_value)
    if which == "geo_point_value":
        return 16
    if which in ("null_value", "boolean_value"):
        return 1
    return 8  # integer, double, timestamp


def timestamp(us: int) -> timestamp_pb2.Timestamp:
    return timestamp_pb2.Timestamp(seconds=us // 1_000_000, nanos=(us % 1_000_000) * 1000)


def micros(ts: timestamp_pb2.Timestamp) -> int:
    return int(ts.seconds) * 1_000_000 + int(ts.nanos) // 1000


@dataclass
class Outcome:
    """The result of one write: the new version (None = deleted) and its WriteResult."""

    name: str
    doc: Any | None
    changed: bool
    result: Any
    is_delete: bool
    # The top-level fields the write can have changed (its mask's and its transforms'); None
    # when it replaced the document (or deleted it).
    touched: frozenset[str] | None = None


def written_name(write: Any, database: DatabaseKey) -> str:
    op = write.WhichOneof("operation")
    if op == "update":
        raw = write.update.name
    elif op == "delete":
        raw = write.delete
    elif op == "transform":
        raw = write.transform.document
    else:
        raise InvalidArgument("A write needs an operation (update, delete or transform).")
    name = parse_document(raw)
    if name.database != database:
        raise InvalidArgument(f"Document {raw!r} is not in database {database}.")
    return name.full


def apply(write: Any, name: str, current: Stored | None, commit_us: int) -> Outcome:
    """Validate and apply ``write`` to ``current`` (its latest version inside this commit)."""
    _check_precondition(write, current, commit_us)
    op = write.WhichOneof("operation")
    if op == "delete":
        if write.update_transforms:
            raise InvalidArgument("A delete cannot carry field transforms.")
        return Outcome(name, None, current is not None, WriteResult(), True)
    transforms: list[Any]
    touched: set[str] | None
    if op == "transform":
        doc = _copy(current.doc) if current is not None else Document()
        transforms = list(write.transform.field_transforms)
        touched = set()
    else:
        doc, touched = _updated_fields(write, current)
        transforms = list(write.update_transforms)
    doc.name = name
    results = [_transform(doc.fields, t, commit_us, touched) for t in transforms]
    # Production's count is at most 8 times the protobuf's (an empty map in an array: 4
    # bytes encoded, 32 counted), so only a document above 1/8 MiB encoded is counted.
    if doc.ByteSize() * 8 > MAX_DOCUMENT_BYTES and storage_size(doc) > MAX_DOCUMENT_BYTES:
        raise InvalidArgument("Document exceeds the maximum size of 1 MiB.")
    if current is None:
        changed = True
        doc.create_time.CopyFrom(timestamp(commit_us))
    else:
        doc.create_time.CopyFrom(current.doc.create_time)
        doc.update_time.CopyFrom(current.doc.update_time)
        # A write that changes nothing keeps the previous update time
        # (https://cloud.google.com/firestore/docs/reference/rest/v1/WriteResult).
        # With the same name and times, the messages are equal exactly when the fields are:
        # one comparison in the protobuf runtime, where comparing the field maps goes through
        # Python's Mapping.__eq__ (an items() walk of both maps, most of a write's cost).
        changed = doc != current.doc
    if changed:
        doc.update_time.CopyFrom(timestamp(commit_us))
    result = WriteResult(update_time=doc.update_time)
    result.transform_results.extend(results)
    kept = frozenset(touched) if touched is not None and current is not None else None
    return Outcome(name, doc, changed, result, False, kept)


def _check_precondition(write: Any, current: Stored | None, commit_us: int) -> None:
    if not write.HasField("current_document"):
        return
    which = write.current_document.WhichOneof("condition_type")
    if which == "exists":
        if write.current_document.exists and current is None:
            raise NotFound(f"No document to update: {_name_of(write)}")
        if not write.current_document.exists and current is not None:
            raise AlreadyExists(f"Document already exists: {_name_of(write)}")
    elif which == "update_time":
        wanted = micros(write.current_document.update_time)
        # Production refuses a time no version can have yet as a bad request, not as a
        # mismatch: https://github.com/googleapis/google-cloud-dotnet/pull/1538 ("specifying
        # a timestamp that is in the future ... has an InvalidArgument status code").
        if wanted > commit_us:
            raise InvalidArgument(
                f"The precondition update time of {_name_of(write)} is in the future."
            )
        if current is None:
            raise NotFound(f"No document to update: {_name_of(write)}")
        if current.update_us != wanted:
            # Production's wording, as quoted in
            # https://github.com/GoogleCloudPlatform/spring-cloud-gcp/issues/2163
            raise FailedPrecondition(
                f"the stored version ({current.update_us}) does not match the required base "
                f"version ({wanted})"
            )


def _name_of(write: Any) -> str:
    op = write.WhichOneof("operation")
    if op == "update":
        return str(write.update.name)
    if op == "delete":
        return str(write.delete)
    return str(write.transform.document)


def _updated_fields(write: Any, current: Stored | None) -> tuple[Any, set[str] | None]:
    """The document after the write's update, and the top-level fields its mask names (None
    without a mask: the update replaces every field)."""
    validate_fields(write.update.fields)
    if not write.HasField("update_mask"):
        return _copy(write.update), None
    result = _copy(current.doc) if current is not None else Document()
    touched = set()
    for text in write.update_mask.field_paths:
        path = writable_path(text)
        touched.add(path[0])
        value = get_field(write.update.fields, path)
        if value is None:
            delete_field(result.fields, path)
        else:
            set_field(result.fields, path, value)
    return result, touched


def _copy(source: Any) -> Any:
    """A new Document with `source`'s fields and name (`apply` sets the name again): copying
    the whole message is several times faster in the protobuf runtime than merging its field
    map. The times are cleared, so the size check sees what it saw before they are set."""
    doc = Document()
    doc.CopyFrom(source)
    doc.ClearField("create_time")
    doc.ClearField("update_time")
    return doc


def _transform(fields: Any, transform: Any, commit_us: int, touched: set[str] | None) -> Any:
    path = writable_path(transform.field_path)
    if touched is not None:
        touched.add(path[0])
    current = get_field(fields, path)
    which = transform.WhichOneof("transform_type")
    handler = _TRANSFORMS.get(which or "")
    if handler is None:
        raise InvalidArgument("A field transform needs a transform type.")
    if which in _ARRAY_TRANSFORMS:
        # Its elements end up in (or are compared with) the stored array: checked as a set
        # value's would be, so no transform stores what a write of the field would be refused.
        # Google's own clients refuse a nested array in either transform before sending it
        # (https://github.com/googleapis/nodejs-firestore/pull/1003); the Python client sends
        # it, and this is what it then meets.
        validate_array_items(getattr(transform, which).values, len(path))
    new_value = handler(current, transform, commit_us)
    set_field(fields, path, new_value)
    return new_value


def _server_value(current: Any | None, transform: Any, commit_us: int) -> Any:
    if transform.set_to_server_value != _REQUEST_TIME:
        raise InvalidArgument("Unknown server value.")
    # "The time at which the server processed the request, with millisecond precision"
    # (https://cloud.google.com/python/docs/reference/firestore/latest/google.cloud.firestore_v1.types.DocumentTransform.FieldTransform.ServerValue):
    # the commit time cut to the millisecond, so it may read earlier than the write's
    # microsecond update_time, never later.
    return Value(timestamp_value=timestamp(commit_us - commit_us % 1000))


def _numeric_operand(transform: Any, which: str) -> Any:
    operand = getattr(transform, which)
    if not is_number(operand):
        raise InvalidArgument(f"The {which} transform needs a numeric operand.")
    return operand


def _increment(current: Any | None, transform: Any, commit_us: int) -> Any:
    operand = _numeric_operand(transform, "increment")
    if current is None or not is_number(current):
        return operand
    a, b = number(current), number(operand)
    if isinstance(a, int) and isinstance(b, int):
        return number_value(max(_INT64_MIN, min(_INT64_MAX, a + b)))
    return number_value(float(a) + float(b))


def _extreme(pick_max: bool) -> Callable[[Any | None, Any, int], Any]:
    which = "maximum" if pick_max else "minimum"

    def apply_extreme(current: Any | None, transform: Any, commit_us: int) -> Any:
        operand = _numeric_operand(transform, which)
        if current is None or not is_number(current):
            return operand
        if is_nan(current) or is_nan(operand):
            return Value(double_value=float("nan"))
        a, b = number(current), number(operand)
        if a == b:
            return current
        return operand if (b > a) == pick_max else current

    return apply_extreme


def _array_items(current: Any | None) -> list[Any]:
    if current is not None and kind(current) == "array_value":
        return list(current.array_value.values)
    return []


def _append_missing(current: Any | None, transform: Any, commit_us: int) -> Any:
    items = _array_items(current)
    seen = {sort_key(v) for v in items}
    for item in transform.append_missing_elements.values:
        key = sort_key(item)
        if key not in seen:
            seen.add(key)
            items.append(item)
    return Value(array_value=ArrayValue(values=items))


def _remove_all(current: Any | None, transform: Any, commit_us: int) -> Any:
    removed = {sort_key(v) for v in transform.remove_all_from_array.values}
    items = [v for v in _array_items(current) if sort_key(v) not in removed]
    return Value(array_value=ArrayValue(values=items))


_ARRAY_TRANSFORMS = frozenset({"append_missing_elements", "remove_all_from_array"})

_TRANSFORMS: dict[str, Callable[[Any | None, Any, int], Any]] = {
    "set_to_server_value": _server_value,
    "increment": _increment,
    "maximum": _extreme(True),
    "minimum": _extreme(False),
    "append_missing_elements": _append_missing,
    "remove_all_from_array": _remove_all,
}
