"""media.delete_source logic: params validation and how storage failures are sorted."""

from __future__ import annotations

from typing import Any

import pytest
import requests
from google.api_core import exceptions as api_exceptions

from services.jobs.actions import ActionRequest
from services.jobs.errors import PermanentError, TransientError
from services.worker.media import (
    ALREADY_ABSENT,
    DELETED,
    REPLACED,
    SourceDeleter,
    SourceObjects,
    classify,
    source_objects,
)


def test_params_with_bucket_and_objects_are_accepted() -> None:
    assert source_objects({"bucket": "media-src", "objects": ["a/1.mp4", "a/2.mp4"]}, None) == (
        SourceObjects("media-src", ("a/1.mp4", "a/2.mp4"))
    )


def test_single_object_uses_the_default_bucket() -> None:
    assert source_objects({"object": "a/1.mp4"}, "media-src") == SourceObjects(
        "media-src", ("a/1.mp4",)
    )


def test_duplicate_object_names_are_deleted_once() -> None:
    assert source_objects({"bucket": "bkt", "objects": ["x", "x"]}, None).names == ("x",)


@pytest.mark.parametrize(
    ("params", "default_bucket"),
    [
        ({"object": "a"}, None),
        ({"bucket": "other-bucket", "object": "a"}, "media-src"),
        ({"bucket": "UPPER", "object": "a"}, None),
        ({"bucket": "bkt"}, None),
        ({"bucket": "bkt", "object": ""}, None),
        ({"bucket": "bkt", "object": 5}, None),
        ({"bucket": "bkt", "objects": []}, None),
        ({"bucket": "bkt", "objects": "a"}, None),
        ({"bucket": "bkt", "objects": ["a"] * 101}, None),
        ({"bucket": "bkt", "objects": ["ok", "bad\nname"]}, None),
        ({"bucket": "bkt", "objects": ["x" * 1025]}, None),
        ({"bucket": "bkt", "object": "a", "objects": ["b"]}, None),
    ],
)
def test_unusable_params_are_a_permanent_error(
    params: dict[str, Any], default_bucket: str | None
) -> None:
    with pytest.raises(PermanentError):
        source_objects(params, default_bucket)


@pytest.mark.parametrize(
    "exc",
    [
        api_exceptions.TooManyRequests("slow down"),
        api_exceptions.ServiceUnavailable("down"),
        api_exceptions.InternalServerError("oops"),
        api_exceptions.GatewayTimeout("late"),
        api_exceptions.RetryError("gave up", cause=None),
        requests.exceptions.ConnectionError("refused"),
        requests.exceptions.ReadTimeout("slow"),
    ],
)
def test_throttling_server_errors_and_timeouts_are_transient(exc: Exception) -> None:
    assert isinstance(classify(exc), TransientError)


@pytest.mark.parametrize(
    "exc",
    [api_exceptions.Forbidden("no"), api_exceptions.BadRequest("bad")],
)
def test_refusals_are_permanent(exc: Exception) -> None:
    assert isinstance(classify(exc), PermanentError)


class _Blob:
    def __init__(self, generation: int) -> None:
        self.generation = generation


class _Bucket:
    """Stands in for a storage Bucket in this pure-logic test: a set of object names, each at
    generation 1 unless re-uploaded (`upload`)."""

    def __init__(self, name: str, objects: set[str], *, exists: bool = True) -> None:
        self.name = name
        self.objects = objects
        self.generations: dict[str, int] = {}
        self._exists = exists
        self.before_delete: Any = None

    def upload(self, name: str) -> None:
        self.objects.add(name)
        self.generations[name] = self.generations.get(name, 1) + 1

    def get_blob(self, name: str, **_: Any) -> _Blob | None:
        return _Blob(self.generations.get(name, 1)) if name in self.objects else None

    def delete_blob(self, name: str, *, if_generation_match: int, **_: Any) -> None:
        if self.before_delete is not None:
            self.before_delete(name)
        if name not in self.objects:
            raise api_exceptions.NotFound("no such object")
        if self.generations.get(name, 1) != if_generation_match:
            raise api_exceptions.PreconditionFailed("ifGenerationMatch")
        self.objects.remove(name)

    def exists(self, **_: Any) -> bool:
        return self._exists


class _Client:
    def __init__(self, bucket: _Bucket) -> None:
        self._bucket = bucket

    def bucket(self, name: str) -> _Bucket:
        assert name == self._bucket.name
        return self._bucket


def _request(params: dict[str, Any]) -> ActionRequest:
    return ActionRequest("job-1", "media.delete_source", "media-1", params, 0, "key-1")


def test_deleting_present_and_absent_objects_reports_both() -> None:
    bucket = _Bucket("bkt", {"a"})
    result = SourceDeleter(_Client(bucket))(_request({"bucket": "bkt", "objects": ["a", "b"]}))  # type: ignore[arg-type]
    assert result.outcome == DELETED
    assert result.details == {"bucket": "bkt", "deleted": ["a"], "already_absent": ["b"]}
    assert bucket.objects == set()


def test_all_objects_absent_is_success_already_absent() -> None:
    result = SourceDeleter(_Client(_Bucket("bkt", set())))(
        _request({"bucket": "bkt", "object": "a"})
    )  # type: ignore[arg-type]
    assert result.outcome == ALREADY_ABSENT


def test_a_missing_bucket_is_not_mistaken_for_absent_objects() -> None:
    deleter = SourceDeleter(_Client(_Bucket("bkt", set(), exists=False)))  # type: ignore[arg-type]
    with pytest.raises(PermanentError, match="does not exist"):
        deleter(_request({"bucket": "bkt", "object": "a"}))


def test_an_object_re_uploaded_between_read_and_delete_is_kept_as_replaced() -> None:
    bucket = _Bucket("bkt", {"a", "b"})
    bucket.before_delete = lambda name: bucket.upload(name) if name == "b" else None
    result = SourceDeleter(_Client(bucket))(_request({"bucket": "bkt", "objects": ["a", "b"]}))  # type: ignore[arg-type]
    assert result.outcome == REPLACED
    assert result.details == {
        "bucket": "bkt",
        "deleted": ["a"],
        "already_absent": [],
        "replaced": ["b"],
    }
    assert bucket.objects == {"b"}


def test_progress_from_an_earlier_delivery_keeps_its_generations_and_replaced_names() -> None:
    bucket = _Bucket("bkt", {"a", "b", "c"})
    bucket.upload("c")  # now generation 2; the earlier delivery had read 1
    progress = {"deleted": [], "replaced": ["a"], "generations": {"c": "1", "zz": "7", "b": "x"}}
    request = ActionRequest(
        "job-1",
        "media.delete_source",
        "m",
        {"bucket": "bkt", "objects": ["a", "b", "c"]},
        1,
        "k",
        progress=progress,
    )
    result = SourceDeleter(_Client(bucket))(request)  # type: ignore[arg-type]
    # a: kept as replaced without a call; b: its bad recorded generation ignored, read anew
    # and deleted; c: deleted only if still the generation read first, so kept.
    assert result.details["deleted"] == ["b"]
    assert result.details["replaced"] == ["a", "c"]
    assert bucket.objects == {"a", "c"}
