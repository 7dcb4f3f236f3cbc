"""`media.delete_prefix`'s params: checked at schedule time (a prefix that could name the whole
bucket, or a cut-off name, is refused naming the field), and the worker, which reads them
again, accepts exactly what the schema accepts. Plus its progress parsing: only plan entries
under the job's own prefix, with a generation, are ever deleted."""

from __future__ import annotations

from dataclasses import replace
from datetime import UTC, datetime
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from services.jobs import media as schema
from services.jobs.catalogue import built_in
from services.jobs.errors import PermanentError, ValidationError
from services.jobs.limits import MAX_DETAILS_BYTES, bounded_details, json_bytes
from services.jobs.model import NewJob
from services.worker import prefix as worker
from services.worker.media import REPLACED
from services.worker.prefix import (
    PLAN_MAX_BYTES,
    REPLACED_SHOWN,
    Planned,
    PrefixProgress,
    progress_of,
)

T0 = datetime(2026, 1, 1, tzinfo=UTC)
JOB = NewJob("job-1", "media.delete_prefix", "media-123", T0, {"prefix": "media-123/renditions/"})
WORKER_BUCKET = "media-src"


def refusal(params: Any) -> str:
    with pytest.raises(ValidationError) as caught:
        replace(JOB, params=params).validated()
    return str(caught.value)


@pytest.mark.parametrize(
    ("params", "named"),
    [
        ({}, "params.prefix is required for media.delete_prefix"),
        ({"prefix": ""}, "params.prefix must be a non-empty string"),
        ({"prefix": "/"}, "params.prefix '/' is not a path prefix ending in '/'"),
        ({"prefix": "media-123"}, "params.prefix 'media-123' is not a path prefix"),
        ({"prefix": "media-123/renditions"}, "is not a path prefix ending in '/'"),
        ({"prefix": "/media-123/"}, "params.prefix '/media-123/' is not a path prefix"),
        ({"prefix": "media-123//"}, "params.prefix 'media-123//' is not a path prefix"),
        ({"prefix": "./"}, "params.prefix './' is not a path prefix"),
        ({"prefix": "media/../"}, "params.prefix 'media/../' is not a path prefix"),
        ({"prefix": "a/\n/"}, "params.prefix contains a control character"),
        ({"prefix": "x" * 1024 + "/"}, "params.prefix is longer than 1024 bytes"),
        ({"prefix": ["a/"]}, "params.prefix must be a non-empty string"),
        ({"prefix": "a/", "bucket": "Media_Src"}, "params.bucket 'Media_Src' is not a Cloud"),
        ({"prefix": "a/", "objects": ["a/1"]}, "params.objects is not a field of media.delete_"),
    ],
)
def test_a_prefix_that_is_empty_or_not_a_whole_path_is_refused_at_schedule_time(
    params: dict[str, Any], named: str
) -> None:
    assert named in refusal(params)


@pytest.mark.parametrize(
    "params",
    [
        {"prefix": "media-123/renditions/"},
        {"prefix": "media-123/", "bucket": "media-src"},
        {"prefix": "..a/b.c/"},
        {"prefix": "é/" * 341},
    ],
)
def test_a_whole_path_prefix_is_accepted(params: dict[str, Any]) -> None:
    assert replace(JOB, params=params).validated().params == params
    worker.prefix_target(params, None if "bucket" in params else WORKER_BUCKET)


def test_the_worker_refuses_a_bucket_other_than_its_media_bucket() -> None:
    with pytest.raises(PermanentError, match="not the media bucket"):
        worker.prefix_target({"prefix": "a/", "bucket": "other-bucket"}, WORKER_BUCKET)
    with pytest.raises(PermanentError, match="bucket"):
        worker.prefix_target({"prefix": "a/"}, None)  # no bucket anywhere
    target = worker.prefix_target({"prefix": "a/"}, WORKER_BUCKET)
    assert (target.bucket, target.prefix) == (WORKER_BUCKET, "a/")


prefixes = st.one_of(
    st.text(alphabet="ab./\n\x00", min_size=0, max_size=6),
    st.sampled_from(["/", "a/", "a//", "x" * 1023 + "/", "x" * 1024 + "/", "é" * 511 + "/"]),
    st.integers(),
)
params_maps = st.fixed_dictionaries(
    {},
    optional={
        "bucket": st.sampled_from([WORKER_BUCKET, "Media", 3]),
        "prefix": prefixes,
        "other": st.integers(),
    },
)


@settings(max_examples=400, deadline=None)
@given(params_maps)
def test_what_the_schema_accepts_is_what_the_worker_accepts(params: dict[str, Any]) -> None:
    if params.get("bucket", WORKER_BUCKET) != WORKER_BUCKET:
        return  # other buckets depend on the deployment, which schedule time cannot know
    accepted_by_schema = not built_in().params_problems(schema.MEDIA_DELETE_PREFIX, params)
    try:
        worker.prefix_target(params, WORKER_BUCKET)
        accepted_by_worker = True
    except PermanentError:
        accepted_by_worker = False
    if "other" in params:  # an unknown field: the schema refuses it, the worker ignores it
        assert not accepted_by_schema
        return
    assert accepted_by_schema == accepted_by_worker, params


def test_progress_keeps_only_plan_entries_under_the_jobs_prefix_with_a_generation() -> None:
    progress = {
        "cursor": "m/r/07.ts",
        "listed_all": True,
        "plan": [
            {"object": "m/r/05.ts", "generation": "17"},
            {"object": "m/other/1.ts", "generation": "18"},  # not this job's prefix
            {"object": "m/r/06.ts", "generation": "x"},  # no usable generation
            {"object": "m/r/07.ts"},
            ["m/r/08.ts", "19"],
        ],
        "deleted": 4,
        "already_absent": -1,
        "replaced": 1,
        "replaced_objects": ["m/r/01.ts", 3],
    }
    state = progress_of(progress, "m/r/")
    assert state.plan == [Planned("m/r/05.ts", "17")]
    assert (state.cursor, state.listed_all) == ("m/r/07.ts", True)
    assert (state.deleted, state.already_absent, state.replaced) == (4, 0, 1)
    assert state.replaced_objects == ["m/r/01.ts"]
    # A cursor outside the prefix is not this job's: the listing starts again.
    assert progress_of({"cursor": "zzz"}, "m/r/").cursor is None
    assert progress_of(None, "m/r/") == PrefixProgress()


def test_a_full_page_of_the_longest_names_is_kept_whole_by_the_record() -> None:
    """The plan is written ahead through `progress`, which the store replaces with a note
    when it is too large or not a valid Firestore map: a plan at its size limit, with names
    no Firestore map key could hold, must come back unchanged."""
    state = PrefixProgress(cursor="p/" + "\x01" * 1020, deleted=3)
    for n in range(REPLACED_SHOWN + 5):
        state.count(REPLACED, f"p/{n:04d}" + "\x01" * 1000)
    assert 0 < len(state.replaced_objects) < REPLACED_SHOWN and state.replaced == 25
    size = 0
    for n in range(1000):
        entry = Planned(f"p/__{n:04d}__" + "\x01" * 1000, "1796496692207960192")
        size += json_bytes(entry.as_progress())
        if size > PLAN_MAX_BYTES:
            break
        state.plan.append(entry)
    progress = state.as_progress()
    assert json_bytes(progress) < MAX_DETAILS_BYTES
    assert bounded_details(progress) == progress
