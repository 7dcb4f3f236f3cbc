"""Job documents read as raw `Document` protobufs, decoded straight to Python values.

The client turns each query result into a `DocumentSnapshot`: proto-plus wrappers around
every message, `_helpers.decode_dict` over them, and a deep copy of the decoded data (and
another one on `to_dict()`). For the scan's claim query, a page of full job documents per
transaction, that was the largest cost on the client side. `decode_fields` reads the raw
protobuf map instead and returns what `_helpers.decode_dict` returns for it:
`tests/unit/jobs/test_decoding.py` proves the two equal for generated values of every kind.
The kinds a job record never holds (references, geo points, and the maps the client reads as
a Vector or a BSON value, all tagged by a `__`-prefixed key) are left to the client's own
decoder, so nothing here ever changes what a document reads as.

Value and Document: https://cloud.google.com/firestore/docs/reference/rpc/google.firestore.v1#value
"""

from __future__ import annotations

from typing import Any

from google.cloud.firestore_v1 import _helpers
from proto.datetime_helpers import DatetimeWithNanoseconds as ProtoDatetimeWithNanoseconds

# What the client's decode_value builds for a timestamp value.
_timestamp = _helpers.DatetimeWithNanoseconds.from_timestamp_pb


def decode_fields(fields: Any, client: Any) -> dict[str, Any] | Any:
    """`_helpers.decode_dict(fields, client)` for a raw protobuf map of `Value`s."""
    # A job holds the same instant several times (due_at and scheduled_due_at, created_at
    # and updated_at, history entries): each distinct one is converted once per document.
    return _fields(fields, client, {})


def _fields(fields: Any, client: Any, times: dict[tuple[int, int], Any]) -> dict[str, Any] | Any:
    if any(name.startswith("__") for name in fields):  # a Vector or BSON map, say
        return _helpers.decode_dict(fields, client)
    return {name: _value(fields[name], client, times) for name in fields}


def update_time(document: Any) -> ProtoDatetimeWithNanoseconds | None:
    """A raw `Document`'s update_time as `DocumentSnapshot.update_time` has it (proto-plus's
    timestamp type), or None when unset."""
    if not document.HasField("update_time"):
        return None
    return ProtoDatetimeWithNanoseconds.from_timestamp_pb(document.update_time)


def _value(value: Any, client: Any, times: dict[tuple[int, int], Any]) -> Any:
    kind = value.WhichOneof("value_type")
    if kind == "string_value":
        return value.string_value
    if kind == "timestamp_value":
        stamp = value.timestamp_value
        key = (stamp.seconds, stamp.nanos)
        known = times.get(key)
        if known is None:
            known = times[key] = _timestamp(stamp)  # immutable: one object can serve each
        return known
    if kind == "null_value":
        return None
    if kind == "integer_value":
        return value.integer_value
    if kind == "map_value":
        return _fields(value.map_value.fields, client, times)
    if kind == "array_value":
        return [_value(item, client, times) for item in value.array_value.values]
    if kind == "boolean_value":
        return value.boolean_value
    if kind == "double_value":
        return value.double_value
    if kind == "bytes_value":
        return value.bytes_value
    return _helpers.decode_value(value, client)  # references, geo points, the unknown
