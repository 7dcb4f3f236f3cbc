"""`decode_fields` returns exactly what the client's own decoder (`_helpers.decode_dict`, the
oracle here; services/ never calls it) returns for the same raw protobuf map: the same values
of the same types (nanoseconds included), for generated values of every kind (references, geo
points, vectors too); and a job document decodes to the same Job either way. The one documented
difference: a map tagged as a BSON value reads as its map."""

from __future__ import annotations

import math
from datetime import UTC, datetime, timedelta
from typing import Any

from google.api_core.datetime_helpers import DatetimeWithNanoseconds
from google.auth.credentials import AnonymousCredentials
from google.cloud import firestore
from google.cloud.firestore_v1 import _helpers
from google.cloud.firestore_v1.types import document as document_types
from google.protobuf import timestamp_pb2
from hypothesis import given, settings
from hypothesis import strategies as st
from proto.datetime_helpers import DatetimeWithNanoseconds as ProtoDatetimeWithNanoseconds

from services.jobs.model import NewJob
from services.jobs.record import Job, decode_job
from services.jobs.transitions import Transitions
from services.store.decoding import decode_fields, update_time

Value = document_types.Value.pb()
Document = document_types.Document.pb()
CLIENT = firestore.Client(project="p", credentials=AnonymousCredentials())
REFERENCE = "projects/p/databases/(default)/documents/jobs/job-1"


def _value(**kwargs: Any) -> Any:
    return Value(**kwargs)


def _timestamp(seconds: int, nanos: int) -> Any:
    return _value(timestamp_value=timestamp_pb2.Timestamp(seconds=seconds, nanos=nanos))


def _array(items: list[Any]) -> Any:
    value = Value()
    value.array_value.SetInParent()
    value.array_value.values.extend(items)
    return value


def _map(fields: dict[str, Any]) -> Any:
    value = Value()
    value.map_value.SetInParent()
    for name, item in fields.items():
        value.map_value.fields[name].CopyFrom(item)
    return value


scalars = st.one_of(
    st.just(_value(null_value=0)),
    st.booleans().map(lambda b: _value(boolean_value=b)),
    st.integers(-(2**63), 2**63 - 1).map(lambda n: _value(integer_value=n)),
    st.floats().map(lambda d: _value(double_value=d)),
    st.builds(_timestamp, st.integers(0, 7_000_000_000), st.integers(0, 999_999_999)),
    st.text(max_size=12).map(lambda s: _value(string_value=s)),
    st.binary(max_size=8).map(lambda b: _value(bytes_value=b)),
    st.just(_value(reference_value=REFERENCE)),
    st.builds(
        lambda lat, lng: _value(geo_point_value={"latitude": lat, "longitude": lng}),
        st.floats(-90, 90),
        st.floats(-180, 180),
    ),
)
# Maps the client reads as something else than a dict: a Vector, BSON values.
tagged = st.one_of(
    st.lists(st.floats(allow_nan=False), max_size=3).map(
        lambda xs: _map(
            {
                "__type__": _value(string_value="__vector__"),
                "value": _array([_value(double_value=x) for x in xs]),
            }
        )
    ),
    st.text(max_size=4).map(lambda s: _map({"__other__": _value(string_value=s)})),
)
# Maps the client reads as BSON values (Firestore with MongoDB compatibility).
bson = st.one_of(
    st.just(_map({"__min__": _value(null_value=0)})),
    st.integers(-(2**31), 2**31 - 1).map(lambda n: _map({"__int__": _value(integer_value=n)})),
)
names = st.one_of(st.text(max_size=8), st.sampled_from(["__type__", "__name__", "a.b", "`x`"]))
values = st.recursive(
    st.one_of(scalars, tagged),
    lambda inner: st.one_of(
        st.lists(inner, max_size=3).map(_array),
        st.dictionaries(names, inner, max_size=3).map(_map),
    ),
    max_leaves=12,
)


def _same(a: Any, b: Any) -> bool:
    """Equal and of the same types all the way down (NaN equals NaN; a timestamp's
    nanoseconds count)."""
    if type(a) is not type(b):
        return False
    if isinstance(a, dict):
        return a.keys() == b.keys() and all(_same(a[k], b[k]) for k in a)
    if isinstance(a, list):
        return len(a) == len(b) and all(_same(x, y) for x, y in zip(a, b, strict=True))
    if isinstance(a, float) and math.isnan(a):
        return math.isnan(b)
    if isinstance(a, DatetimeWithNanoseconds):
        return a.rfc3339() == b.rfc3339() and a.tzinfo == b.tzinfo
    return bool(a == b)


@settings(max_examples=400, deadline=None)
@given(st.dictionaries(names, values, max_size=5))
def test_decode_fields_is_the_clients_decode_dict(fields: dict[str, Any]) -> None:
    document = Document(name=REFERENCE, fields=fields)

    mine = decode_fields(document.fields, CLIENT)
    theirs = _helpers.decode_dict(document.fields, CLIENT)

    assert _same(mine, theirs), (mine, theirs)


@settings(max_examples=50, deadline=None)
@given(bson)
def test_a_bson_tagged_map_reads_as_its_map(value: Any) -> None:
    document = Document(name=REFERENCE, fields={"v": value})
    mine = decode_fields(document.fields, CLIENT)["v"]
    assert type(mine) is dict
    assert mine == {k: _helpers.decode_value(v, CLIENT) for k, v in value.map_value.fields.items()}
    assert type(_helpers.decode_dict(document.fields, CLIENT)["v"]) is not dict


def test_a_reference_of_another_project_is_refused_as_in_the_client() -> None:
    document = Document(name=REFERENCE)
    document.fields["ref"].reference_value = "projects/q/databases/(default)/documents/jobs/x"
    for decode in (decode_fields, _helpers.decode_dict):
        try:
            decode(document.fields, CLIENT)
        except ValueError:
            pass
        else:
            raise AssertionError(f"{decode.__name__} decoded a foreign reference")


def test_an_unset_value_fails_as_in_the_client() -> None:
    document = Document(name=REFERENCE)
    document.fields["empty"].SetInParent()
    for decode in (decode_fields, _helpers.decode_dict):
        try:
            decode(document.fields, CLIENT)
        except ValueError:
            pass
        else:
            raise AssertionError(f"{decode.__name__} decoded an unset value")


def test_update_time_is_the_snapshots() -> None:
    document = Document(name=REFERENCE)
    assert update_time(document) is None
    document.update_time.CopyFrom(timestamp_pb2.Timestamp(seconds=1_800_000_000, nanos=123_456_789))
    wrapped = document_types.Document.wrap(document)
    stamp = update_time(document)
    assert type(stamp) is ProtoDatetimeWithNanoseconds
    assert stamp == wrapped.update_time and stamp.nanosecond == wrapped.update_time.nanosecond


def test_a_job_document_decodes_to_the_same_job() -> None:
    now = datetime(2026, 3, 1, 12, 0, 0, 123456, tzinfo=UTC)
    new = NewJob(
        "job-1",
        "media.delete_source",
        "media-1",
        now,
        {"bucket": "bench-media", "objects": ["src/a", "src/b"]},
        idempotency_key="key-1",
    )
    rules = Transitions(20, timedelta(days=7))
    claimed = rules.claim(Job.create(new.validated(), now), "run-1", now)
    job = rules.enqueued(claimed, claimed.generation, "m-1", now, now)
    document = Document(name=REFERENCE)
    for name, item in job.to_document().items():
        document.fields[name].CopyFrom(_helpers.encode_value(item)._pb)

    mine = decode_fields(document.fields, CLIENT)
    assert _same(mine, _helpers.decode_dict(document.fields, CLIENT))
    assert decode_job("job-1", mine) == job
