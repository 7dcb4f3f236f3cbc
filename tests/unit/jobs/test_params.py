"""Each action's params schema: checked at schedule time, naming the field, and never more
lenient (or stricter) than the worker that reads the params later."""

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
from services.jobs.model import NewJob
from services.worker import media

T0 = datetime(2026, 1, 1, tzinfo=UTC)
JOB = NewJob("job-1", "media.delete_source", "media-1", T0, {"object": "media-1/source.mp4"})


def refusal(params: Any) -> str:
    with pytest.raises(ValidationError) as caught:
        replace(JOB, params=params).validated()
    return str(caught.value)


@pytest.mark.parametrize(
    ("params", "named"),
    [
        ({"objects": "[1,2"}, "params.objects must be a list of strings"),
        ({"objects": [1, 2]}, "params.objects[0] must be a non-empty string"),
        ({"objects": []}, "params.objects must list 1 to 100 items, not 0"),
        ({"objects": [f"o{n}" for n in range(101)]}, "must list 1 to 100 items, not 101"),
        ({"object": "a", "objects": ["b"]}, "exactly one of params.object or params.objects"),
        ({}, "exactly one of params.object or params.objects"),
        ({"object": "a", "bukcet": "x"}, "params.bukcet is not a field of media.delete_source"),
        ({"object": "a", "bucket": "Media_Src"}, "params.bucket 'Media_Src' is not a Cloud"),
        ({"object": "a", "bucket": "a..b"}, "params.bucket 'a..b' is not a Cloud"),
        ({"object": "a", "bucket": 7}, "params.bucket must be a non-empty string"),
        ({"object": ".."}, "params.object cannot be '..'"),
        ({"object": "a\nb"}, "params.object contains a control character"),
        ({"object": "x" * 1025}, "params.object is longer than 1024 bytes"),
    ],
)
def test_params_that_do_not_fit_the_actions_schema_are_refused_naming_the_field(
    params: dict[str, Any], named: str
) -> None:
    assert named in refusal(params)


@pytest.mark.parametrize(
    "params",
    [
        {"object": "media-1/source.mp4"},
        {"bucket": "media-src", "objects": ["a/1.mp4", "a/2.mp4"]},
        {"objects": ["x" * 1024] * 10},
    ],
)
def test_params_that_fit_are_accepted(params: dict[str, Any]) -> None:
    assert replace(JOB, params=params).validated().params == params


def test_every_shipped_action_declares_a_params_schema() -> None:
    catalogue = built_in()
    assert [name for name in catalogue if name not in catalogue.schemas] == []
    assert "custom.action" not in catalogue.schemas


def test_an_action_without_a_schema_keeps_only_the_generic_limits() -> None:
    custom = replace(JOB, action="custom.action", params={"anything": [1, "two"]})
    assert custom.validated({"custom.action"}).params == {"anything": [1, "two"]}


def test_every_problem_is_named_at_once() -> None:
    text = refusal({"objects": "x", "bucket": "B", "extra": 1})
    for fragment in ("params.extra", "params.objects", "params.bucket"):
        assert fragment in text


def test_the_worker_refuses_just_past_the_schemas_limits_and_accepts_them() -> None:
    """The worker imports the limits from the schema; this proves it applies them, at the
    edge, with the same answer as schedule time."""
    at_limit = [
        {"objects": [f"o{n}" for n in range(schema.MAX_OBJECTS)]},
        {"object": "x" * schema.MAX_OBJECT_NAME_BYTES},
        {"object": "é" * (schema.MAX_OBJECT_NAME_BYTES // 2)},
    ]
    past_limit = [
        {"objects": [f"o{n}" for n in range(schema.MAX_OBJECTS + 1)]},
        {"object": "x" * (schema.MAX_OBJECT_NAME_BYTES + 1)},
        {"object": "é" * (schema.MAX_OBJECT_NAME_BYTES // 2) + "x"},
        {"object": "a", "bucket": "media-src\n"},
        {"object": "a", "bucket": "a..b"},
    ]
    # A worker without a media bucket for params naming one (so the bucket rule is what is
    # tested), with one for params that leave it out.
    for params in at_limit:
        assert not built_in().params_problems(schema.MEDIA_DELETE_SOURCE, params)
        media.source_objects(params, None if "bucket" in params else WORKER_BUCKET)
    for params in past_limit:
        assert built_in().params_problems(schema.MEDIA_DELETE_SOURCE, params)
        with pytest.raises(PermanentError):
            media.source_objects(params, None if "bucket" in params else WORKER_BUCKET)


WORKER_BUCKET = "media-src"
names = st.one_of(
    st.text(alphabet="ab./\n\x00", min_size=0, max_size=4),
    st.sampled_from([".", "..", "x" * 1024, "x" * 1025, "é" * 513]),
    st.integers(),
)
params_maps = st.fixed_dictionaries(
    {},
    optional={
        "bucket": st.sampled_from([WORKER_BUCKET, "ab", "a..b", "Media", 3]),
        "object": names,
        "objects": st.one_of(st.lists(names, max_size=3), st.just(["o"] * 101), names),
        "other": st.integers(),
    },
)


@settings(max_examples=400, deadline=None)
@given(params_maps)
def test_what_the_schema_accepts_is_what_the_worker_accepts(params: dict[str, Any]) -> None:
    # The worker configured with a media bucket accepts that bucket or none; other buckets
    # depend on its deployment, which schedule time cannot know, so they are left out here.
    if params.get("bucket", WORKER_BUCKET) != WORKER_BUCKET:
        return
    accepted_by_schema = not built_in().params_problems(schema.MEDIA_DELETE_SOURCE, params)
    try:
        media.source_objects(params, WORKER_BUCKET)
        accepted_by_worker = True
    except PermanentError:
        accepted_by_worker = False
    # An unknown field is the one thing the schema refuses that the worker ignores.
    if "other" in params:
        assert not accepted_by_schema
    else:
        assert accepted_by_schema == accepted_by_worker, params
