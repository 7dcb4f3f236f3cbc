"""`media.delete_source`: delete a media object's source files from Cloud Storage.

Params (validated before any call): `{"bucket": "b", "objects": ["a/1.mp4", ...]}` or
`{"object": "a/1.mp4"}`; `bucket` may be left out when the worker has a media bucket, and must
equal it when it has one. Deleting an object that is already gone is success (`already_absent`)
— that is what makes a second run after a crash harmless. Failures are sorted by whether time
can fix them: 429, 5xx, timeouts and connection errors are transient; 400, 403, a missing bucket
and bad params are permanent.

Every delete is fenced at the storage itself: before deleting, the delivery reads each object's
generation (objects.get) and then deletes with `ifGenerationMatch` on it, so a delete that
arrives late (a worker frozen past its lease, a request retried by the client) can only remove
the generation this delivery saw, never a newer upload of the same name: Cloud Storage answers
such a delete 412 Precondition Failed
(https://cloud.google.com/storage/docs/request-preconditions). A 412 is recorded as its own
outcome (`replaced`: the object now is another generation, left in place), not retried.

**Written ahead.** The generations read are recorded in the job's `progress`
(`request.record_progress`, a write under the delivery's lease) before the first delete, and
an object whose generation is recorded is never read again. So any later delivery of the job —
after a completion lost to a Firestore outage or a killed worker, a lapsed lease taken over, a
retry in the next attempt — deletes exactly the generations the first delivery decided on, or
nothing: a file the customer uploaded again since is refused 412 and left in place (issue 33,
finding 1). A delivery that reads nothing new writes nothing; one that reads costs one write.

Between objects it checks the delivery's deadline; when it is reached it stops and raises
`Interrupted` with the objects handled so far (`progress`: `deleted`, `already_absent`,
`replaced`, and `generations` of those read but not yet deleted), and the next delivery starts
from there, so a long list is worked off across deliveries instead of being redone from the
start by overlapping ones.
"""

from __future__ import annotations

import dataclasses
import logging
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import google.auth.exceptions
import google.cloud.storage as storage
import requests
from google.api_core import exceptions as api_exceptions
from google.api_core.retry import Retry

from services.jobs.actions import Action, ActionRequest, ActionResult, RetryPolicy
from services.jobs.errors import Interrupted, PermanentError, TransientError
from services.jobs.media import (
    BUCKET_NAME,
    DELETE_SOURCE,
    MAX_OBJECT_NAME_BYTES,
    MAX_OBJECTS,
    MEDIA_DELETE_SOURCE,
    NOT_AN_OBJECT,
    OBJECT_FORBIDDEN,
)
from services.worker.actions import ActionContext

logger = logging.getLogger(__name__)

ACTION_NAME = MEDIA_DELETE_SOURCE

# MAX_OBJECTS, MAX_OBJECT_NAME_BYTES and the name rules are the declaration's params schema's
# (services/jobs/media.py): what `schedule` accepts is what this action runs.

DELETED = "deleted"
ALREADY_ABSENT = "already_absent"
# The object at the name is no longer the generation this job read: a delete conditioned on
# the read generation was refused (412) and the newer object is left in place.
REPLACED = "replaced"

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
    return bool(BUCKET_NAME.match(name))


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
    if not isinstance(name, str) or not name or name in NOT_AN_OBJECT:
        raise PermanentError("an object name is missing or not a string")
    if len(name.encode("utf-8")) > MAX_OBJECT_NAME_BYTES or OBJECT_FORBIDDEN.search(name):
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
        handled = _progress_of(request.progress, target.names)
        # First the generation of every object still to delete (recorded by an earlier
        # delivery, else read now); then the deletes, each conditioned on its generation.
        read = False
        for name in target.names:
            if handled.done(name) or name in handled.generations:
                continue
            self._stop_if_due(request, handled, len(target.names))
            generation = self._generation(bucket, name)
            read = True
            if generation is None:
                handled.absent.append(name)
            else:
                handled.generations[name] = generation
        if read:
            # Write ahead: the generations read are durable in the job before any delete, so
            # every later delivery (its outcome lost, the lease lapsed, a take-over, a retry
            # in the next attempt) deletes these or nothing, never a newer upload it read.
            request.record_progress(handled.progress())
        for name in target.names:
            if handled.done(name):
                continue
            self._stop_if_due(request, handled, len(target.names))
            outcome = self._delete(bucket, name, handled.generations[name])
            {DELETED: handled.deleted, ALREADY_ABSENT: handled.absent, REPLACED: handled.replaced}[
                outcome
            ].append(name)
        if handled.absent and not handled.deleted and not handled.replaced:
            self._require_bucket(bucket)
        outcome = REPLACED if handled.replaced else DELETED if handled.deleted else ALREADY_ABSENT
        logger.info(
            "deleted media source",
            extra={
                "fields": {
                    "job_id": request.job_id,
                    "bucket": target.bucket,
                    "deleted": len(handled.deleted),
                    "already_absent": len(handled.absent),
                    "replaced": len(handled.replaced),
                }
            },
        )
        details: dict[str, Any] = {
            "bucket": target.bucket,
            "deleted": handled.deleted,
            "already_absent": handled.absent,
        }
        if handled.replaced:
            details["replaced"] = handled.replaced
        return ActionResult(outcome=outcome, details=details)

    @staticmethod
    def _stop_if_due(request: ActionRequest, handled: _Handled, total: int) -> None:
        if request.should_stop():
            raise Interrupted(
                handled.progress(), f"stopped after {handled.count()} of {total} objects"
            )

    def _generation(self, bucket: storage.Bucket, name: str) -> str | None:
        """The object's current generation (None when it does not exist)."""
        try:
            blob = bucket.get_blob(name, timeout=self._timeout_s, retry=self._retry)
        except Exception as exc:
            raise classify(exc) from exc
        if blob is None or blob.generation is None:
            return None
        return str(blob.generation)

    def _delete(self, bucket: storage.Bucket, name: str, generation: str) -> str:
        """Delete exactly ``generation`` of the object: DELETED, ALREADY_ABSENT or REPLACED."""
        return delete_generation(
            bucket, name, generation, timeout_s=self._timeout_s, retry=self._retry
        )

    def _require_bucket(self, bucket: storage.Bucket) -> None:
        # 404 is also the answer for a missing bucket; a typo must not pass as "already gone".
        try:
            exists = bucket.exists(timeout=self._timeout_s, retry=self._retry)
        except Exception as exc:
            raise classify(exc) from exc
        if not exists:
            raise PermanentError(f"bucket {bucket.name!r} does not exist")


@dataclass
class _Handled:
    """What this job's deliveries have done so far, and the generations they read."""

    deleted: list[str]
    absent: list[str]
    replaced: list[str]
    generations: dict[str, str]

    def done(self, name: str) -> bool:
        return name in self.deleted or name in self.absent or name in self.replaced

    def count(self) -> int:
        return len(self.deleted) + len(self.absent) + len(self.replaced)

    def progress(self) -> dict[str, Any]:
        pending = {n: g for n, g in self.generations.items() if not self.done(n)}
        progress: dict[str, Any] = {"deleted": self.deleted, "already_absent": self.absent}
        if self.replaced:
            progress["replaced"] = self.replaced
        if pending:
            progress["generations"] = pending
        return progress


def _progress_of(progress: Mapping[str, Any] | None, names: tuple[str, ...]) -> _Handled:
    """The objects an earlier delivery already handled (only names of this job count)."""
    if not progress:
        return _Handled([], [], [], {})
    wanted = set(names)

    def listed(key: str) -> list[str]:
        value = progress.get(key)
        items = value if isinstance(value, list) else []
        return [name for name in dict.fromkeys(items) if isinstance(name, str) and name in wanted]

    deleted = listed("deleted")
    replaced = [name for name in listed("replaced") if name not in deleted]
    absent = [n for n in listed("already_absent") if n not in deleted and n not in replaced]
    raw = progress.get("generations")
    generations = {
        name: value
        for name, value in (raw.items() if isinstance(raw, Mapping) else ())
        if name in wanted and isinstance(value, str) and value.isascii() and value.isdigit()
    }
    return _Handled(deleted, absent, replaced, generations)


def delete_generation(
    bucket: storage.Bucket,
    name: str,
    generation: str,
    *,
    timeout_s: float,
    retry: Retry | None,
) -> str:
    """Delete exactly ``generation`` of the object ``name``: DELETED, ALREADY_ABSENT (404) or
    REPLACED (412: another generation lives at the name now, and it stays)."""
    try:
        bucket.delete_blob(
            name, timeout=timeout_s, retry=retry, if_generation_match=int(generation)
        )
    except api_exceptions.NotFound:
        return ALREADY_ABSENT
    except api_exceptions.PreconditionFailed:
        # Another generation lives at this name now (re-uploaded since it was read): it is
        # not the object this job was decided on, so it stays. Not an error to retry.
        logger.warning(
            "media object replaced since read; not deleted",
            extra={"fields": {"bucket": bucket.name, "object": name, "read": generation}},
        )
        return REPLACED
    except Exception as exc:
        raise classify(exc) from exc
    return DELETED


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
    """`media.delete_source`'s declaration bound to a deleter over `client`."""
    deleter = SourceDeleter(client, default_bucket=default_bucket, timeout_s=timeout_s, retry=retry)
    return dataclasses.replace(DELETE_SOURCE, run=deleter, build=None, policy=policy)


def build_delete_source(context: ActionContext) -> SourceDeleter:
    """The declaration's `build`: a deleter over a real storage client, from the worker's
    settings (its project and media bucket); called once at the worker's start."""
    client, retry = storage_for(context)
    return SourceDeleter(client, default_bucket=context.settings.media_bucket, retry=retry)


def storage_for(context: ActionContext) -> tuple[storage.Client, Retry]:
    """A real storage client for the worker's project, and the retry its media actions give
    each call; made once per action at the worker's start."""
    from google.cloud.storage.retry import DEFAULT_RETRY

    from services.worker.app import read_environment_once

    settings = context.settings
    client = storage.Client(project=settings.project)
    read_environment_once(client._http)
    # The client's own retries stay well inside the lease; 503 + Pub/Sub backoff do the rest.
    return client, DEFAULT_RETRY.with_timeout(min(20.0, settings.lease_s / 2))
