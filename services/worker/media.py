"""`media.delete_source`: delete a media object's source files from Cloud Storage.

Params (validated before any call): `{"bucket": "b", "objects": ["a/1.mp4", ...]}` or
`{"object": "a/1.mp4"}`; `bucket` may be left out when the worker has a media bucket, and must
equal it when it has one. Deleting an object that is already gone is success (`already_absent`)
— that is what makes a second run after a crash harmless. Failures are sorted by whether time
can fix them: 429, 5xx, timeouts and connection errors are transient; 400, 403, a missing bucket
and bad params are permanent.

Between objects it checks the delivery's deadline; when it is reached it stops and raises
`Interrupted` with the objects handled so far (`progress`: `deleted`, `already_absent`), and the
next delivery starts from there, so a long list is worked off across deliveries instead of
being redone from the start by overlapping ones.
"""

from __future__ import annotations

import logging
import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import google.auth.exceptions
import google.cloud.storage as storage
import requests
from google.api_core import exceptions as api_exceptions
from google.api_core.retry import Retry

from services.worker.actions import Action, ActionRequest, ActionResult, RetryPolicy
from services.worker.errors import Interrupted, PermanentError, TransientError

logger = logging.getLogger(__name__)

ACTION_NAME = "media.delete_source"

MAX_OBJECTS = 100
MAX_OBJECT_NAME_BYTES = 1024
_BUCKET_NAME = re.compile(r"^[a-z0-9][a-z0-9._-]{1,220}[a-z0-9]$")
_OBJECT_FORBIDDEN = re.compile(r"[\r\n\x00]")

DELETED = "deleted"
ALREADY_ABSENT = "already_absent"

_TRANSIENT_API_ERRORS: tuple[type[Exception], ...] = (
    api_exceptions.TooManyRequests,
    api_exceptions.ServerError,
    api_exceptions.Unauthorized,  # an expired credential refreshes on the next try
    api_exceptions.RetryError,
    api_exceptions.DeadlineExceeded,
)
_TRANSIENT_TRANSPORT_ERRORS: tuple[type[Exception], ...] = (
    requests.exceptions.ConnectionError,
    requests.exceptions.Timeout,
    google.auth.exceptions.TransportError,
    ConnectionError,
    TimeoutError,
)


def is_valid_bucket_name(name: str) -> bool:
    return bool(_BUCKET_NAME.match(name)) and ".." not in name


@dataclass(frozen=True)
class SourceObjects:
    """The validated target of one deletion."""

    bucket: str
    names: tuple[str, ...]


def source_objects(params: Mapping[str, Any], default_bucket: str | None) -> SourceObjects:
    """The bucket and object names in `params`; raises PermanentError when they are unusable."""
    bucket = params.get("bucket", default_bucket)
    if not isinstance(bucket, str) or not is_valid_bucket_name(bucket):
        raise PermanentError("params.bucket is missing or not a valid bucket name")
    if default_bucket is not None and bucket != default_bucket:
        raise PermanentError(f"bucket {bucket!r} is not the media bucket this worker may touch")
    if "objects" in params and "object" in params:
        raise PermanentError("params has both 'object' and 'objects'")
    raw = params["objects"] if "objects" in params else [params.get("object")]
    if not isinstance(raw, list) or not raw or len(raw) > MAX_OBJECTS:
        raise PermanentError(f"params.objects must list 1 to {MAX_OBJECTS} object names")
    names = tuple(_object_name(name) for name in raw)
    return SourceObjects(bucket=bucket, names=tuple(dict.fromkeys(names)))


def _object_name(name: Any) -> str:
    if not isinstance(name, str) or not name or name in (".", ".."):
        raise PermanentError("an object name is missing or not a string")
    if len(name.encode("utf-8")) > MAX_OBJECT_NAME_BYTES or _OBJECT_FORBIDDEN.search(name):
        raise PermanentError("an object name is too long or contains control characters")
    return name


class SourceDeleter:
    """The `media.delete_source` action over one storage client."""

    def __init__(
        self,
        client: storage.Client,
        *,
        default_bucket: str | None = None,
        timeout_s: float = 10.0,
        retry: Retry | None = None,
    ) -> None:
        # The client's own retry is bounded well inside the push deadline; the worker's
        # answer (503, then a retry much later) is the long-haul retry.
        self._client = client
        self._default_bucket = default_bucket
        self._timeout_s = timeout_s
        self._retry = retry

    def __call__(self, request: ActionRequest) -> ActionResult:
        target = source_objects(request.params, self._default_bucket)
        bucket = self._client.bucket(target.bucket)
        deleted, absent = _progress_of(request.progress, target.names)
        done = set(deleted) | set(absent)
        for name in target.names:
            if name in done:
                continue
            if request.should_stop():
                raise Interrupted(
                    {"deleted": deleted, "already_absent": absent},
                    f"stopped after {len(done)} of {len(target.names)} objects",
                )
            if self._delete(bucket, name):
                deleted.append(name)
            else:
                absent.append(name)
            done.add(name)
        if absent and not deleted:
            self._require_bucket(bucket)
        outcome = DELETED if deleted else ALREADY_ABSENT
        logger.info(
            "deleted media source",
            extra={
                "fields": {
                    "job_id": request.job_id,
                    "bucket": target.bucket,
                    "deleted": len(deleted),
                    "already_absent": len(absent),
                }
            },
        )
        return ActionResult(
            outcome=outcome,
            details={"bucket": target.bucket, "deleted": deleted, "already_absent": absent},
        )

    def _delete(self, bucket: storage.Bucket, name: str) -> bool:
        """True if this call deleted the object, False if it was already gone."""
        try:
            bucket.delete_blob(name, timeout=self._timeout_s, retry=self._retry)
        except api_exceptions.NotFound:
            return False
        except Exception as exc:
            raise classify(exc) from exc
        return True

    def _require_bucket(self, bucket: storage.Bucket) -> None:
        # 404 is also the answer for a missing bucket; a typo must not pass as "already gone".
        try:
            exists = bucket.exists(timeout=self._timeout_s, retry=self._retry)
        except Exception as exc:
            raise classify(exc) from exc
        if not exists:
            raise PermanentError(f"bucket {bucket.name!r} does not exist")


def _progress_of(
    progress: Mapping[str, Any] | None, names: tuple[str, ...]
) -> tuple[list[str], list[str]]:
    """The objects an earlier delivery already handled (only names of this job count)."""
    if not progress:
        return [], []
    wanted = set(names)

    def listed(key: str) -> list[str]:
        value = progress.get(key)
        items = value if isinstance(value, list) else []
        return [name for name in dict.fromkeys(items) if isinstance(name, str) and name in wanted]

    deleted = listed("deleted")
    return deleted, [name for name in listed("already_absent") if name not in deleted]


def classify(exc: Exception) -> TransientError | PermanentError:
    """A storage failure as the worker's error: may time fix it, or never."""
    if isinstance(exc, _TRANSIENT_API_ERRORS + _TRANSIENT_TRANSPORT_ERRORS):
        return TransientError(f"storage unavailable: {type(exc).__name__}")
    if isinstance(exc, api_exceptions.GoogleAPICallError):
        return PermanentError(f"storage refused the request: {type(exc).__name__}")
    return TransientError(f"storage call failed: {type(exc).__name__}")


def delete_source_action(
    client: storage.Client,
    policy: RetryPolicy,
    *,
    default_bucket: str | None = None,
    timeout_s: float = 10.0,
    retry: Retry | None = None,
) -> Action:
    """The registry entry for `media.delete_source`."""
    deleter = SourceDeleter(client, default_bucket=default_bucket, timeout_s=timeout_s, retry=retry)
    return Action(name=ACTION_NAME, run=deleter, policy=policy)
