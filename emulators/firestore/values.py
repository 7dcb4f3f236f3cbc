"""Firestore values: the cross-type ordering, equality, field paths and nested field access.

Values stay protobuf ``google.firestore.v1.Value`` messages; ordering and equality go through
:func:`sort_key`, a Python tuple that compares the way Firestore orders values across types:
null < booleans < numbers (NaN first, integers and doubles together) < timestamps < strings
(UTF-8 byte order, which equals code point order) < bytes < references < geo points < arrays
< vectors < maps.
"""

from __future__ import annotations

import math
import re
from collections.abc import Iterator
from typing import Any

from google.cloud.firestore_v1.types import document as document_types

from emulators.firestore.errors import InvalidArgument

Value = document_types.Value.pb()
MapValue = document_types.MapValue.pb()
ArrayValue = document_types.ArrayValue.pb()

FieldPath = tuple[str, ...]
SortKey = tuple[Any, ...]

NAME_PATH: FieldPath = ("__name__",)
_SIMPLE_SEGMENT = re.compile(r"^[A-Za-z_][A-Za-z_0-9]*$")
_RESERVED = re.compile(r"^__.*__$")
MAX_DEPTH = 20

# Vectors (maps tagged __type__: __vector__) sort between arrays (8) and maps (10).
_VECTOR_RANK = 9


def kind(value: Any) -> str | None:
    return value.WhichOneof("value_type")


def _is_vector(value: Any) -> bool:
    fields = value.map_value.fields
    return "__type__" in fields and fields["__type__"].string_value == "__vector__"


# A document ID of the form __id<n>__ (n an int64) is a numeric ID: production orders those
# before every string ID, by n. The client relies on it: recursive() and recursive_delete()
# start their range at __id-9223372036854775808__ (REFERENCE_NAME_MIN_ID in
# https://github.com/googleapis/python-firestore/blob/main/google/cloud/firestore_v1/base_query.py).
_NUMERIC_ID = re.compile(r"^__id(-?[0-9]{1,19})__$")
_INT64 = range(-(2**63), 2**63)


def segment_key(segment: str) -> SortKey:
    """Sort key of one path segment: numeric IDs first (by number), then strings; the segment
    itself is always the last element (names are rebuilt from keys)."""
    match = _NUMERIC_ID.match(segment)
    if match is not None and int(match.group(1)) in _INT64:
        return (0, int(match.group(1)), segment)
    return (1, segment)


def reference_key(path: str) -> tuple[SortKey, ...]:
    return tuple(segment_key(s) for s in path.split("/"))


def reference_name(key: tuple[SortKey, ...]) -> str:
    """The path a :func:`reference_key` was made from."""
    return "/".join(k[-1] for k in key)


def sort_key(value: Any) -> SortKey:
    """A tuple that orders and compares like the Firestore value (NaN equals NaN here)."""
    k = kind(value)
    if k == "integer_value":
        return (2, 1, value.integer_value)
    if k == "double_value":
        d = value.double_value
        return (2, 0, 0) if math.isnan(d) else (2, 1, d)
    if k == "string_value":
        return (4, value.string_value)
    if k == "timestamp_value":
        ts = value.timestamp_value
        return (3, ts.seconds, ts.nanos)
    if k == "boolean_value":
        return (1, value.boolean_value)
    if k == "null_value" or k is None:
        return (0,)
    if k == "reference_value":
        return (6, reference_key(value.reference_value))
    if k == "bytes_value":
        return (5, value.bytes_value)
    if k == "geo_point_value":
        return (7, value.geo_point_value.latitude, value.geo_point_value.longitude)
    if k == "array_value":
        return (8, tuple(sort_key(v) for v in value.array_value.values))
    fields = value.map_value.fields
    if _is_vector(value):
        items = fields["value"].array_value.values if "value" in fields else []
        return (_VECTOR_RANK, len(items), tuple(sort_key(v) for v in items))
    return (10, tuple(sorted((name, sort_key(v)) for name, v in fields.items())))


def is_nan(value: Any) -> bool:
    return kind(value) == "double_value" and math.isnan(value.double_value)


def is_number(value: Any) -> bool:
    return kind(value) in ("integer_value", "double_value")


def number(value: Any) -> int | float:
    if kind(value) == "integer_value":
        return int(value.integer_value)
    return float(value.double_value)


def number_value(n: int | float) -> Any:
    if isinstance(n, int):
        return Value(integer_value=n)
    return Value(double_value=n)


# -- field paths -------------------------------------------------------------------------


def parse_field_path(text: str) -> FieldPath:
    """Parse ``a.b.`c.d``` into segments; INVALID_ARGUMENT when malformed."""
    if not text:
        raise InvalidArgument("Field path cannot be empty.")
    segments: list[str] = []
    i = 0
    n = len(text)
    while i < n:
        if text[i] == "`":
            i += 1
            buf: list[str] = []
            while i < n and text[i] != "`":
                if text[i] == "\\" and i + 1 < n:
                    i += 1
                buf.append(text[i])
                i += 1
            if i >= n:
                raise InvalidArgument(f"Invalid field path: unterminated backtick in {text!r}.")
            i += 1
            segment = "".join(buf)
        else:
            j = i
            while j < n and text[j] != ".":
                j += 1
            segment = text[i:j]
            if not _SIMPLE_SEGMENT.match(segment):
                raise InvalidArgument(f"Invalid field path: {text!r}.")
            i = j
        if not segment:
            raise InvalidArgument(f"Invalid field path: empty segment in {text!r}.")
        segments.append(segment)
        if i < n:
            if text[i] != ".":
                raise InvalidArgument(f"Invalid field path: {text!r}.")
            i += 1
            if i >= n:
                raise InvalidArgument(f"Invalid field path: trailing '.' in {text!r}.")
    return tuple(segments)


def format_field_path(path: FieldPath) -> str:
    out = []
    for seg in path:
        if _SIMPLE_SEGMENT.match(seg):
            out.append(seg)
        else:
            out.append("`" + seg.replace("\\", "\\\\").replace("`", "\\`") + "`")
    return ".".join(out)


def check_writable_path(path: FieldPath) -> None:
    for seg in path:
        if _RESERVED.match(seg):
            raise InvalidArgument(f"Field name {seg!r} is reserved (matches __.*__).")
    if len(path) > MAX_DEPTH:
        raise InvalidArgument("Field path is nested too deeply.")


# Paths that passed writable_path, by their text: every write of a kind names the same few,
# and parsing one costs more than the rest of setting its value. Bounded; texts that fail are
# not kept (they fail again, with the same error, each time).
_WRITABLE: dict[str, FieldPath] = {}
_WRITABLE_KEPT = 4096


def writable_path(text: str) -> FieldPath:
    """``text`` parsed (:func:`parse_field_path`) and checked (:func:`check_writable_path`)."""
    known = _WRITABLE.get(text)
    if known is None:
        known = parse_field_path(text)
        check_writable_path(known)
        if len(_WRITABLE) >= _WRITABLE_KEPT:
            _WRITABLE.clear()
        _WRITABLE[text] = known
    return known


def validate_fields(fields: Any, depth: int = 0) -> None:
    """Reject field names production rejects: empty, reserved, or too deeply nested."""
    if depth > MAX_DEPTH:
        raise InvalidArgument("Document has too deeply nested maps (more than 20 levels).")
    # Keys, then each value by key: the map's items() is Python's ItemsView, several times
    # slower; this runs for every field of every write.
    for name in fields:
        if not name:
            raise InvalidArgument("Field name cannot be empty.")
        # __type__ is how the client tags vector values ({__type__: __vector__, value: [...]}).
        if name.startswith("__") and _RESERVED.match(name) and name != "__type__":
            raise InvalidArgument(f"Field name {name!r} is reserved (matches __.*__).")
        value = fields[name]
        which = value.WhichOneof("value_type")
        if which == "map_value":
            validate_fields(value.map_value.fields, depth + 1)
        elif which == "array_value":
            validate_array_items(value.array_value.values, depth + 1)


def validate_array_items(items: Any, depth: int) -> None:
    """Reject the elements of an array production rejects: an array directly in an array
    (https://firebase.google.com/docs/firestore/manage-data/data-types, "Arrays"), or a map
    whose fields `validate_fields` refuses at `depth` (that of the array's own fields)."""
    for item in items:
        inner = item.WhichOneof("value_type")
        if inner == "array_value":
            raise InvalidArgument("Cannot convert an array value in an array value.")
        if inner == "map_value":
            validate_fields(item.map_value.fields, depth)


def get_field(fields: Any, path: FieldPath) -> Any | None:
    """The value at ``path`` inside a protobuf fields map, or None when absent."""
    if len(path) == 1:
        # (the map's get does not add the key, unlike indexing it)
        return fields.get(path[0])
    current = fields
    last = len(path) - 1
    for i, seg in enumerate(path):
        if seg not in current:
            return None
        value = current[seg]
        if i == last:
            return value
        if value.WhichOneof("value_type") != "map_value":
            return None
        current = value.map_value.fields
    return None


def set_field(fields: Any, path: FieldPath, value: Any) -> None:
    current = fields
    for seg in path[:-1]:
        if seg not in current or kind(current[seg]) != "map_value":
            current[seg].CopyFrom(Value(map_value=MapValue()))
        current = current[seg].map_value.fields
    current[path[-1]].CopyFrom(value)


def delete_field(fields: Any, path: FieldPath) -> None:
    current = fields
    for seg in path[:-1]:
        if seg not in current or kind(current[seg]) != "map_value":
            return
        current = current[seg].map_value.fields
    if path[-1] in current:
        del current[path[-1]]


def walk(fields: Any, prefix: FieldPath = ()) -> Iterator[tuple[FieldPath, Any]]:
    """Every (field path, value) in the document, maps included as values of their own."""
    for name, value in fields.items():
        path = (*prefix, name)
        yield path, value
        if value.WhichOneof("value_type") == "map_value":
            yield from walk(value.map_value.fields, path)
