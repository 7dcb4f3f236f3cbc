"""Field updates of job records as Firestore `Write` protobufs, built on the protobuf classes.

The client's `update()` (`_helpers.pbs_for_update`) encodes every value through proto-plus
wrappers, about half a millisecond for a claim's three fields, and was the scan's largest
cost on the client side. A job record's values are plain (None, bool, int, float, str,
datetime, and maps and lists of them), so `update_write` builds the same `Write` straight on
the protobuf classes the client's wrappers hold. `tests/unit/jobs/test_encoding.py` proves
the result equal to what `pbs_for_update` builds, for generated values and for every
transition of the state machine. Anything else (a sentinel such as DELETE_FIELD, a
reference, a GeoPoint, a dotted field path) gets None, and the caller takes the client's own
path, so nothing here ever changes what is written.

Write, Precondition and DocumentMask:
https://cloud.google.com/firestore/docs/reference/rpc/google.firestore.v1#write
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from datetime import datetime
from typing import Any

from google.api_core.datetime_helpers import DatetimeWithNanoseconds
from google.cloud._helpers import _datetime_to_pb_timestamp
from google.cloud.firestore_v1.types import common, document, write

_WRITE = write.Write.pb()
_DOCUMENT = document.Document.pb()
_VALUE = document.Value.pb()
_MAP = document.MapValue.pb()
_ARRAY = document.ArrayValue.pb()
_PRECONDITION = common.Precondition.pb()
# A top-level name the client would not parse as a path of several segments.
_SIMPLE_NAME = re.compile(r"^[A-Za-z_][A-Za-z_0-9]*$")


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
    try:
        values = {name: _value(value, True) for name, value in fields.items()}
    except (_Unsupported, TypeError, ValueError, OverflowError):
        return None
    update = _WRITE(update=_DOCUMENT(name=document_path, fields=values))
    update.update_mask.field_paths.extend(sorted(fields))
    if last_update_time is None:
        update.current_document.CopyFrom(_PRECONDITION(exists=True))
    else:
        # One proto-plus conversion, so the precondition's time is exactly the client's.
        precondition = common.Precondition(update_time=last_update_time)
        update.current_document.CopyFrom(common.Precondition.pb(precondition))
    return update


def _value(value: Any, in_path: bool) -> Any:
    """`value` as a raw `Value`. `in_path`: reached from the top through maps only, where
    the client reads every map key as a field path segment."""
    # The order of the checks is encode_value's: bool before int, its subclass.
    if value is None:
        return _VALUE(null_value=0)
    if isinstance(value, bool):
        return _VALUE(boolean_value=value)
    if isinstance(value, int):
        return _VALUE(integer_value=value)
    if isinstance(value, float):
        return _VALUE(double_value=value)
    if isinstance(value, DatetimeWithNanoseconds):
        return _VALUE(timestamp_value=value.timestamp_pb())
    if isinstance(value, datetime):
        return _VALUE(timestamp_value=_datetime_to_pb_timestamp(value))
    if isinstance(value, str):
        return _VALUE(string_value=value)
    if type(value) in (list, tuple):
        return _VALUE(array_value=_ARRAY(values=[_value(item, False) for item in value]))
    if type(value) is dict:
        # There the client refuses an empty segment; inside an array it takes any key.
        if in_path and not all(isinstance(name, str) and name for name in value):
            raise _Unsupported(value)
        fields = {name: _value(item, in_path) for name, item in value.items()}
        return _VALUE(map_value=_MAP(fields=fields))
    raise _Unsupported(value)
