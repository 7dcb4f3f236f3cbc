"""Writes of records as Firestore `Write` protobufs, and values as `Value`s, built on the
protobuf classes of `google.cloud.firestore_v1.types`.

The store sends its writes through the public GAPIC client (`gateway`), so the `Write`s are
built here: `update_write` (only the named top-level fields, on condition that the document
exists or is at a given update_time), `set_write`, `create_write` and `delete_write`. They are
built straight on the raw protobuf classes, not through proto-plus wrappers per value (about
half a millisecond for a claim's three fields through the high-level client's `update()`).
A record's values are plain (None, bool, int, float, str, datetime, and maps and lists of
them); `tests/unit/store/test_encoding.py` proves each Write equal to what the high-level
client builds for the same call, for generated values and for every transition of the state
machine. One sentinel is encoded: a top-level `ArrayUnion` in an update (how the worker
appends history entries) becomes the field transform `append_missing_elements` on the same
Write, as the client builds it. Anything else (another sentinel such as DELETE_FIELD, a
reference, a GeoPoint, a dotted field path) is refused: `update_write` answers None and the
others raise ValueError, so nothing is ever written in a form the tests do not cover.

Write, Precondition and DocumentMask:
https://cloud.google.com/firestore/docs/reference/rpc/google.firestore.v1#write
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from datetime import UTC, datetime
from typing import Any

from google.api_core.datetime_helpers import DatetimeWithNanoseconds
from google.cloud.firestore_v1.transforms import ArrayUnion
from google.cloud.firestore_v1.types import common, document, write
from google.protobuf import timestamp_pb2
from proto.datetime_helpers import DatetimeWithNanoseconds as ProtoDatetimeWithNanoseconds

_WRITE = write.Write.pb()
_PRECONDITION = common.Precondition.pb()
_VALUE = document.Value.pb()
# A top-level name the client would not parse as a path of several segments.
_SIMPLE_NAME = re.compile(r"^[A-Za-z_][A-Za-z_0-9]*$")
_EPOCH = datetime(1970, 1, 1, tzinfo=UTC)


class _Unsupported(Exception):
    """A value this module leaves to the client's encoder."""


def update_write(
    document_path: str, fields: Mapping[str, Any], last_update_time: datetime | None = None
) -> Any | None:
    """The `Write` (raw protobuf) that `update(fields)` sends for `document_path`: only the
    named top-level fields replaced, on condition that the document exists or, with
    `last_update_time`, that it was last updated at exactly that time. None when a field
    name or value is one this module does not encode."""
    if not fields or not all(isinstance(name, str) and _SIMPLE_NAME.match(name) for name in fields):
        return None
    update = _WRITE()
    update.update.name = document_path
    target = update.update.fields
    plain = sorted(name for name, value in fields.items() if not isinstance(value, ArrayUnion))
    unions = sorted(name for name, value in fields.items() if isinstance(value, ArrayUnion))
    try:
        for name in plain:
            _fill(target[name], fields[name], True)
        for name in unions:
            # The client's DocumentExtractor: the field leaves the mask and becomes a
            # transform, its elements encoded as array elements (any map key).
            transform = update.update_transforms.add()
            transform.field_path = name
            transform.append_missing_elements.SetInParent()
            elements = transform.append_missing_elements.values
            for item in fields[name].values:
                _fill(elements.add(), item, False)
    except (_Unsupported, TypeError, ValueError, OverflowError):
        return None
    update.update_mask.SetInParent()  # present even when every field is a transform
    update.update_mask.field_paths.extend(plain)
    if last_update_time is None:
        update.current_document.CopyFrom(_PRECONDITION(exists=True))
    else:
        update.current_document.update_time.CopyFrom(proto_timestamp(last_update_time))
    return update


def merge_write(document_path: str, fields: Mapping[str, Any]) -> Any:
    """The `Write` that `set(fields, merge=list(fields))` sends: the named top-level fields
    replaced, the rest of the document (or its absence) left as it is, no condition.
    ValueError for a value or name this module does not encode."""
    write_pb = update_write(document_path, fields)
    if write_pb is None or any(isinstance(v, ArrayUnion) for v in fields.values()):
        raise ValueError(f"cannot encode the merge of {sorted(fields)} into {document_path!r}")
    write_pb.ClearField("current_document")
    return write_pb


def set_write(document_path: str, data: Mapping[str, Any]) -> Any:
    """The `Write` (raw protobuf) that `set(data)` sends: the whole document replaced, no
    condition. ValueError for a value this module does not encode."""
    write_pb = _WRITE()
    write_pb.update.name = document_path
    fields = write_pb.update.fields
    try:
        for name, value in data.items():
            if not isinstance(name, str) or not name:
                raise _Unsupported(name)  # the client refuses an empty field name too
            _fill(fields[name], value, True)
    except (_Unsupported, TypeError, OverflowError) as exc:
        raise ValueError(f"cannot encode a field of {document_path!r}: {exc!r}") from exc
    return write_pb


def create_write(document_path: str, data: Mapping[str, Any]) -> Any:
    """`set_write` on condition that the document does not exist yet (`create`)."""
    write_pb = set_write(document_path, data)
    write_pb.current_document.CopyFrom(_PRECONDITION(exists=False))
    return write_pb


def delete_write(document_path: str) -> Any:
    """The `Write` that `delete()` sends: no condition (deleting nothing is not an error)."""
    write_pb = _WRITE()
    write_pb.delete = document_path
    return write_pb


def encode_value(value: Any) -> Any:
    """A plain value (what a record holds) as a raw `Value`, as the client encodes a query's
    filter operand or cursor value. ValueError for a value this module does not encode."""
    target = _VALUE()
    try:
        _fill(target, value, False)
    except (_Unsupported, TypeError, OverflowError) as exc:
        raise ValueError(f"cannot encode {value!r} as a Firestore value") from exc
    return target


def _fill(target: Any, value: Any, in_path: bool) -> None:
    """Set the raw `Value` `target` to `value`, in place (building nested messages and then
    copying them in would copy every level again). `in_path`: reached from the top through
    maps only, where the client reads every map key as a field path segment."""
    # The order of the checks is encode_value's: bool before int, its subclass.
    if value is None:
        target.null_value = 0
    elif isinstance(value, bool):
        target.boolean_value = value
    elif isinstance(value, int):
        target.integer_value = value
    elif isinstance(value, float):
        target.double_value = value
    elif isinstance(value, DatetimeWithNanoseconds):
        target.timestamp_value.CopyFrom(value.timestamp_pb())
    elif isinstance(value, datetime):
        target.timestamp_value.CopyFrom(_timestamp(value))
    elif isinstance(value, str):
        target.string_value = value
    elif type(value) in (list, tuple):
        values = target.array_value.values
        target.array_value.SetInParent()  # an empty list is still an array value
        for item in value:
            _fill(values.add(), item, False)
    elif type(value) is dict:
        # There the client refuses an empty segment; inside an array it takes any key.
        if in_path and not all(isinstance(name, str) and name for name in value):
            raise _Unsupported(value)
        fields = target.map_value.fields
        target.map_value.SetInParent()  # an empty dict is still a map value
        for name, item in value.items():
            if not isinstance(name, str):
                raise _Unsupported(value)
            _fill(fields[name], item, in_path)
    else:
        raise _Unsupported(value)


def _timestamp(value: datetime) -> timestamp_pb2.Timestamp:
    """What the high-level client's encoder makes of a datetime, in less than half its
    time: the same whole seconds since the epoch (naive read as UTC), scaled by the same
    float 1e6, plus microseconds."""
    if value.tzinfo is None:
        value = value.replace(tzinfo=UTC)
    since = value.astimezone(UTC) - _EPOCH  # astimezone: the same OverflowError at the edges
    micros = int((since.days * 86_400 + since.seconds) * 1e6) + since.microseconds
    seconds, rest = divmod(micros, 1_000_000)
    return timestamp_pb2.Timestamp(seconds=seconds, nanos=rest * 1000)


def proto_timestamp(value: datetime) -> timestamp_pb2.Timestamp:
    """The time as proto-plus converts it for the client (`Precondition(update_time=value)`,
    a read_time): proto-plus's
    timestamp rule, which keeps nanoseconds only for its own DatetimeWithNanoseconds (what
    a write result's update_time decodes to) and truncates any other datetime to whole
    microseconds."""
    if isinstance(value, ProtoDatetimeWithNanoseconds):
        return value.timestamp_pb()
    return timestamp_pb2.Timestamp(seconds=int(value.timestamp()), nanos=value.microsecond * 1000)
