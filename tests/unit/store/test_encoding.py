"""`update_write`, `set_write`, `create_write`, `delete_write` and `encode_value` build exactly
the `Write` (`Value`) the high-level client's own `update()`, `set()`, `create()`, `delete()`
(its encoder, `_helpers`: the oracle here, services/ never calls it) would, or refuse."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta, timezone
from typing import Any

from google.api_core.datetime_helpers import DatetimeWithNanoseconds
from google.cloud import firestore
from google.cloud._helpers import _datetime_to_pb_timestamp
from google.cloud.firestore_v1 import _helpers
from hypothesis import given, settings
from hypothesis import strategies as st
from proto.datetime_helpers import DatetimeWithNanoseconds as ProtoDatetimeWithNanoseconds

from services.jobs.model import NewJob
from services.jobs.parts import Result
from services.jobs.record import Job
from services.jobs.transitions import Transitions
from services.store.documents import appended_fields, changed_fields
from services.store.encoding import (
    _timestamp,
    create_write,
    delete_write,
    encode_value,
    merge_write,
    set_write,
    update_write,
)

PATH = "projects/p/databases/(default)/documents/jobs/job-1"
NOW = datetime(2026, 3, 1, 12, 0, 0, 123456, tzinfo=UTC)

zones = st.sampled_from(
    [UTC, timezone(timedelta(hours=5, minutes=30)), timezone(-timedelta(hours=8))]
)
moments = st.datetimes(
    min_value=datetime(1970, 1, 2), max_value=datetime(2200, 1, 1), timezones=zones
)
# Two classes: the client decodes values to api_core's, write results to proto-plus's.
nanos = st.builds(
    lambda kind, m, n: kind(
        m.year, m.month, m.day, m.hour, m.minute, m.second, nanosecond=n, tzinfo=UTC
    ),
    st.sampled_from([DatetimeWithNanoseconds, ProtoDatetimeWithNanoseconds]),
    moments,
    st.integers(0, 999_999_999),
)
scalars = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(-(2**63), 2**63 - 1),
    st.floats(allow_nan=False),
    st.text(max_size=20),
    moments,
    nanos,
)
values = st.recursive(
    scalars,
    lambda inner: st.one_of(
        st.lists(inner, max_size=4), st.dictionaries(st.text(max_size=8), inner, max_size=4)
    ),
    max_leaves=12,
)
names = st.from_regex(r"[A-Za-z_][A-Za-z_0-9]{0,10}", fullmatch=True)
# A top-level field value: plain, or an array union of plain values (the worker's history).
field_values = st.one_of(values, st.lists(values, min_size=1, max_size=3).map(firestore.ArrayUnion))


def _client_write(fields: dict[str, Any], last_update_time: datetime | None) -> Any:
    option = None
    if last_update_time is not None:
        option = firestore.Client.write_option(last_update_time=last_update_time)
    (pb,) = _helpers.pbs_for_update(PATH, fields, option)
    return pb._pb


@settings(max_examples=300, deadline=None)
@given(
    fields=st.dictionaries(names, field_values, min_size=1, max_size=5),
    stamp=st.one_of(st.none(), moments, nanos),
)
def test_generated_updates_encode_as_the_client_encodes_them(
    fields: dict[str, Any], stamp: datetime | None
) -> None:
    ours = update_write(PATH, fields, stamp)
    try:
        theirs = _client_write(fields, stamp)
    except ValueError:
        # The client refuses it (an empty map key, say): declining sends the caller there.
        assert ours is None
        return
    assert ours is not None
    assert ours == theirs


def test_the_scans_transitions_encode_as_the_client_encodes_them() -> None:
    rules = Transitions()
    new = NewJob(
        "job-1",
        "media.delete_source",
        "media-1",
        NOW,
        {"bucket": "bench-media", "objects": ["src/a"]},
    )
    job = Job.create(new.validated(), NOW)
    claimed = rules.claim(job, "run-1", NOW)
    enqueued = rules.enqueued(claimed, claimed.generation, "m-1", NOW, NOW)
    stamp = NOW + timedelta(seconds=1)
    for old, new_job in ((job, claimed), (claimed, enqueued)):
        diff = changed_fields(old, new_job)
        assert diff
        for condition in (None, stamp):
            ours = update_write(PATH, diff, condition)
            assert ours is not None and ours == _client_write(diff, condition)


def test_the_workers_transitions_encode_as_the_client_encodes_them() -> None:
    # start and complete append their history entries as an array union
    # (store.documents.appended_fields), conditioned on the update_time they read.
    rules = Transitions()
    new = NewJob("job-1", "media.delete_source", "media-1", NOW, {"bucket": "bkt", "object": "o"})
    job = Job.create(new.validated(), NOW)
    claimed = rules.claim(job, "run-1", NOW)
    enqueued = rules.enqueued(claimed, claimed.generation, "m-1", NOW, NOW)
    running = rules.start(enqueued, enqueued.generation, NOW, timedelta(minutes=4), "w", "t")
    assert running.lease is not None
    done = rules.complete(running, running.lease, Result("deleted", {"deleted": ["o"]}), NOW)
    stamp = NOW + timedelta(seconds=1)
    for old, new_job in ((enqueued, running), (running, done)):
        diff = appended_fields(old, new_job)
        assert isinstance(diff["history"], firestore.ArrayUnion)
        ours = update_write(PATH, diff, stamp)
        assert ours is not None and ours == _client_write(diff, stamp)


def test_an_update_of_transforms_only_encodes_as_the_client_does() -> None:
    fields = {"history": firestore.ArrayUnion([{"at": NOW, "to": "running"}])}
    ours = update_write(PATH, fields, NOW)
    assert ours is not None and ours == _client_write(fields, NOW)
    assert ours.HasField("update_mask") and not ours.update_mask.field_paths


def test_what_it_does_not_encode_is_left_to_the_client() -> None:
    assert update_write(PATH, {}) is None
    assert update_write(PATH, {"a.b": 1}) is None  # the client reads a path here
    assert update_write(PATH, {"state": firestore.DELETE_FIELD}) is None
    assert update_write(PATH, {"when": firestore.SERVER_TIMESTAMP}) is None
    assert update_write(PATH, {"tags": {"a", "b"}}) is None
    assert update_write(PATH, {"n": 2**64}) is None
    assert update_write(PATH, {"where": firestore.GeoPoint(1.0, 2.0)}) is None
    assert update_write(PATH, {"tags": firestore.ArrayRemove(["a"])}) is None
    assert update_write(PATH, {"tags": firestore.ArrayUnion([firestore.SERVER_TIMESTAMP])}) is None


@settings(max_examples=500, deadline=None)
@given(
    st.datetimes(
        timezones=st.sampled_from(
            [None, UTC, timezone(timedelta(hours=14)), timezone(-timedelta(hours=23, minutes=59))]
        )
    )
)
def test_timestamps_encode_as_the_clients_helper_does(value: datetime) -> None:
    # Every datetime Python has, naive and at the extreme offsets (where both overflow).
    outcomes = []
    for encode in (_timestamp, _datetime_to_pb_timestamp):
        try:
            outcomes.append(encode(value))
        except OverflowError:
            outcomes.append(OverflowError)
    assert outcomes[0] == outcomes[1]


documents = st.dictionaries(st.text(max_size=8), values, max_size=5)


@settings(max_examples=200, deadline=None)
@given(documents)
def test_generated_sets_and_creates_encode_as_the_client_encodes_them(data: dict[str, Any]) -> None:
    for ours_of, theirs_of in (
        (set_write, _helpers.pbs_for_set_no_merge),
        (create_write, _helpers.pbs_for_create),
    ):
        try:
            (theirs,) = theirs_of(PATH, data)
        except ValueError:
            # The client refuses it (an empty map key, say): so do we.
            try:
                ours_of(PATH, data)
            except ValueError:
                continue
            raise AssertionError(f"{ours_of.__name__} encoded what the client refuses") from None
        assert ours_of(PATH, data) == theirs._pb


def test_a_job_record_sets_as_the_client_sets_it() -> None:
    new = NewJob("job-1", "media.delete_source", "m-1", NOW, {"bucket": "bkt", "object": "o"})
    document = Job.create(new.validated(), NOW).to_document()
    (theirs,) = _helpers.pbs_for_create(PATH, document)
    assert create_write(PATH, document) == theirs._pb
    (theirs,) = _helpers.pbs_for_set_no_merge(PATH, document)
    assert set_write(PATH, document) == theirs._pb


def test_a_delete_is_the_clients() -> None:
    client = firestore.Client(project="p", credentials=_anonymous())
    batch = client.batch()
    batch.delete(client.document("jobs/job-1"))
    assert delete_write(PATH) == batch._write_pbs[0]._pb


def test_what_a_set_cannot_encode_is_refused() -> None:
    for data in ({"where": firestore.GeoPoint(1.0, 2.0)}, {"gone": firestore.DELETE_FIELD}):
        try:
            set_write(PATH, data)
        except ValueError:
            continue
        raise AssertionError(f"set_write encoded {data}")


@settings(max_examples=200, deadline=None)
@given(values)
def test_values_encode_as_the_client_encodes_them(value: Any) -> None:
    try:
        theirs = _helpers.encode_value(value)._pb
    except ValueError:
        return
    assert encode_value(value) == theirs


def _anonymous() -> Any:
    from google.auth.credentials import AnonymousCredentials

    return AnonymousCredentials()


def test_a_merge_of_named_fields_is_the_clients() -> None:
    fields = {"housekeeping": {"at": NOW, "run_id": "r", "counts": [1, 2]}}
    (theirs,) = _helpers.pbs_for_set_with_merge(PATH, fields, merge=["housekeeping"])
    assert merge_write(PATH, fields) == theirs._pb
