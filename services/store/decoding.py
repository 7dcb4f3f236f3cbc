"""Documents read as raw `Document` protobufs, decoded straight to Python values.

The store reads through the public GAPIC client (`gateway`), which answers with
`google.cloud.firestore_v1.types` messages; their raw protobufs (proto-plus's public
`type(x).pb(x)`) are decoded here, without a proto-plus wrapper or a deep copy per value.
`decode_fields` returns what the high-level client's own decoder returns for the same map
(`tests/unit/store/test_decoding.py` proves the two equal for generated values of every kind
it compares), built from public types only: timestamps as api_core's
`DatetimeWithNanoseconds`, references as the client's `DocumentReference`, geo points as
`GeoPoint`, a `__vector__` map as `Vector`. One kind reads differently: a map tagged as a
BSON value (Firestore with MongoDB compatibility, a `__`-prefixed key such as `__min__`) reads
as its map here, since the client's BSON classes are built through a private method; no
record this project writes holds one, and Firestore refuses such names in the documents it
writes (https://firebase.google.com/docs/firestore/quotas#collections_documents_and_fields).

Value and Document: https://cloud.google.com/firestore/docs/reference/rpc/google.firestore.v1#value
"""

from __future__ import annotations

from typing import Any

from google.api_core.datetime_helpers import DatetimeWithNanoseconds
from google.cloud.firestore import GeoPoint
from google.cloud.firestore_v1.vector import Vector
from proto.datetime_helpers import DatetimeWithNanoseconds as ProtoDatetimeWithNanoseconds

# What the client builds for a timestamp value.
_timestamp = DatetimeWithNanoseconds.from_timestamp_pb
_DOCUMENTS = "/documents/"


def decode_fields(fields: Any, client: Any) -> dict[str, Any] | Any:
    """The Python values of a raw protobuf map of `Value`s (a document's `fields`). `client`
    (a high-level `firestore.Client`) builds the `DocumentReference` of a reference value."""
    # A job holds the same instant several times (due_at and scheduled_due_at, created_at
    # and updated_at, history entries): each distinct one is converted once per document.
    return _fields(fields, client, {})


def decode_value(value: Any, client: Any) -> Any:
    """The Python value of one raw `Value`."""
    return _value(value, client, {})


def update_time(document: Any) -> ProtoDatetimeWithNanoseconds | None:
    """A raw `Document`'s (or `WriteResult`'s) update_time as the client's snapshots and write
    results have it (proto-plus's timestamp type), or None when unset."""
    return _stamp(document, "update_time")


def create_time(document: Any) -> ProtoDatetimeWithNanoseconds | None:
    """A raw `Document`'s create_time, as `update_time`."""
    return _stamp(document, "create_time")


def read_time_of(response: Any) -> ProtoDatetimeWithNanoseconds | None:
    """A raw answer's read_time (a read, a query result, a count), as `update_time`."""
    return _stamp(response, "read_time")


def _stamp(message: Any, field: str) -> ProtoDatetimeWithNanoseconds | None:
    if not message.HasField(field):
        return None
    return ProtoDatetimeWithNanoseconds.from_timestamp_pb(getattr(message, field))


def _fields(fields: Any, client: Any, times: dict[tuple[int, int], Any]) -> dict[str, Any] | Any:
    decoded = {name: _value(fields[name], client, times) for name in fields}
    if decoded.get("__type__") == "__vector__":  # how Firestore holds a vector embedding
        return Vector(decoded["value"])
    return decoded


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
    if kind == "reference_value":
        return _reference(value.reference_value, client)
    if kind == "geo_point_value":
        return GeoPoint(value.geo_point_value.latitude, value.geo_point_value.longitude)
    raise ValueError(f"unknown Firestore value type {kind!r}")


def _reference(name: str, client: Any) -> Any:
    """`projects/p/databases/d/documents/c/id` as the client's `DocumentReference` to
    `c/id`; ValueError for one of another project, as the client refuses it."""
    prefix, found, path = name.partition(_DOCUMENTS)
    if not found or prefix.split("/")[1:2] != [str(client.project)]:
        raise ValueError(f"reference {name!r} is not to a document of this client's project")
    return client.document(path)
