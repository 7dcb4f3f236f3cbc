"""`media.delete_prefix`: delete every object under a prefix (a video's renditions) from Cloud
Storage, generation-checked, a page at a time, resumed across deliveries.

Params (validated at scheduling by the declaration's schema, `services/jobs/media.py`, and
again here): `{"prefix": "media-123/renditions/", "bucket"?: "b"}`. The prefix ends in "/" and
has no empty, "." or ".." segment, so it never names the whole bucket or a cut-off name;
`bucket` follows `media.delete_source`'s rule (left out: the worker's media bucket; given: equal
to it when the worker has one).

**Written ahead, then deleted.** The job lists the prefix one page at a time (`objects.list`,
names in order from a cursor, each with its generation) and decides to delete exactly those
generations. That decision (the *plan*) is made durable in the job's `progress` before any of
its objects is deleted: the delivery that listed the page records it
(`request.record_progress`, a write under its lease that does not end the delivery), then
deletes each planned generation with `ifGenerationMatch`. So every delivery after it, whatever
happened to the one before (its completion lost, its lease lapsed, a retry 30 days later),
deletes the generations first seen or nothing: an object re-uploaded since is refused 412 and
left in place (`replaced`), never taken for the object this job decided on (issue 33, finding
1). A page costs one Firestore write; one delivery works off as many pages as its deadline
allows.

Each delivery deletes what is planned (checking its deadline before each delete), then lists the
next page (after the last name listed), records that plan, and deletes it; the listing is over
when a page comes back short. `progress` holds the cursor, whether the listing is over, the plan
still to delete and the counts so far. The result: `deleted`, `already_absent` (nothing was left to
delete, including an empty prefix) or `replaced`, with `details` counting each and naming the
first replaced objects.
"""

from __future__ import annotations

import dataclasses
import logging
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

import google.cloud.storage as storage
from google.api_core import exceptions as api_exceptions
from google.api_core.retry import Retry

from services.jobs.actions import Action, ActionRequest, ActionResult, RetryPolicy
from services.jobs.errors import Interrupted, PermanentError
from services.jobs.limits import json_bytes
from services.jobs.media import (
    DELETE_PREFIX,
    MAX_OBJECT_NAME_BYTES,
    MEDIA_DELETE_PREFIX,
    OBJECT_FORBIDDEN,
    PREFIX,
)
from services.worker.actions import ActionContext
from services.worker.media import (
    ALREADY_ABSENT,
    DELETED,
    REPLACED,
    classify,
    delete_generation,
    is_valid_bucket_name,
    storage_for,
)

logger = logging.getLogger(__name__)

ACTION_NAME = MEDIA_DELETE_PREFIX

# Objects listed (and so planned) per page: Cloud Storage's largest list page.
PAGE_SIZE = 1000
# The plan written ahead, as JSON, stays well under what `progress` may hold (larger progress
# is replaced by a note, which would lose the plan): a page is cut short to fit.
PLAN_MAX_BYTES = 96 * 1024
# Replaced objects named in progress and the result, at most this many and this much JSON
# (the counts are always complete): with the plan and the cursor, well inside progress's limit.
REPLACED_SHOWN = 20
REPLACED_SHOWN_BYTES = 16 * 1024

# The keys of `progress`.
CURSOR = "cursor"  # the last name listed: the next page starts after it
LISTED_ALL = "listed_all"  # the listing reached the end of the prefix
PLAN = "plan"  # [{"object", "generation"}]: written ahead, not yet deleted
REPLACED_OBJECTS = "replaced_objects"


@dataclass(frozen=True)
class PrefixTarget:
    """The validated target of one job: a bucket and a prefix in it."""

    bucket: str
    prefix: str


def prefix_target(params: Mapping[str, Any], default_bucket: str | None) -> PrefixTarget:
    """The bucket and prefix in `params`; raises PermanentError when they are unusable (a record
    may be written by something other than the store, so the schema's rules are checked again)."""
    bucket = params.get("bucket", default_bucket)
    if not isinstance(bucket, str) or not is_valid_bucket_name(bucket):
        raise PermanentError("params.bucket is missing or not a valid bucket name")
    if default_bucket is not None and bucket != default_bucket:
        raise PermanentError(f"bucket {bucket!r} is not the media bucket this worker may touch")
    prefix = params.get("prefix")
    if (
        not isinstance(prefix, str)
        or not PREFIX.match(prefix)
        or OBJECT_FORBIDDEN.search(prefix)
        or len(prefix.encode("utf-8")) > MAX_OBJECT_NAME_BYTES
    ):
        raise PermanentError(
            "params.prefix must be a path prefix ending in '/' with no empty, '.' or '..' segment"
        )
    return PrefixTarget(bucket=bucket, prefix=prefix)


@dataclass
class Planned:
    """One object this job decided to delete, at the generation its listing saw."""

    name: str
    generation: str

    def as_progress(self) -> dict[str, str]:
        return {"object": self.name, "generation": self.generation}


@dataclass
class PrefixProgress:
    """Where this job's deliveries are: the listing's cursor, the plan, the counts."""

    cursor: str | None = None
    listed_all: bool = False
    plan: list[Planned] = field(default_factory=list)
    deleted: int = 0
    already_absent: int = 0
    replaced: int = 0
    replaced_objects: list[str] = field(default_factory=list)

    def count(self, outcome: str, name: str) -> None:
        if outcome == DELETED:
            self.deleted += 1
        elif outcome == ALREADY_ABSENT:
            self.already_absent += 1
        else:
            self.replaced += 1
            self.name_replaced(name)

    def name_replaced(self, name: str) -> None:
        shown = [*self.replaced_objects, name]
        if len(shown) <= REPLACED_SHOWN and json_bytes(shown) <= REPLACED_SHOWN_BYTES:
            self.replaced_objects = shown

    def counts(self) -> dict[str, Any]:
        found: dict[str, Any] = {
            DELETED: self.deleted,
            ALREADY_ABSENT: self.already_absent,
            REPLACED: self.replaced,
        }
        if self.replaced_objects:
            found[REPLACED_OBJECTS] = list(self.replaced_objects)
        return found

    def as_progress(self) -> dict[str, Any]:
        progress = self.counts()
        if self.cursor is not None:
            progress[CURSOR] = self.cursor
        if self.listed_all:
            progress[LISTED_ALL] = True
        if self.plan:
            progress[PLAN] = [planned.as_progress() for planned in self.plan]
        return progress


def progress_of(progress: Mapping[str, Any] | None, prefix: str) -> PrefixProgress:
    """What earlier deliveries recorded. Only objects under this job's prefix count: a plan
    entry naming anything else is dropped, never deleted."""
    if not progress:
        return PrefixProgress()

    def number(key: str) -> int:
        value = progress.get(key)
        if isinstance(value, int) and not isinstance(value, bool) and value >= 0:
            return value
        return 0

    cursor = progress.get(CURSOR)
    plan: list[Planned] = []
    raw_plan = progress.get(PLAN)
    for entry in raw_plan if isinstance(raw_plan, list) else ():
        if not isinstance(entry, Mapping):
            continue
        name, generation = entry.get("object"), entry.get("generation")
        if (
            isinstance(name, str)
            and name.startswith(prefix)
            and isinstance(generation, str)
            and generation.isascii()
            and generation.isdigit()
        ):
            plan.append(Planned(name, generation))
    shown = progress.get(REPLACED_OBJECTS)
    state = PrefixProgress(
        cursor=cursor if isinstance(cursor, str) and cursor.startswith(prefix) else None,
        listed_all=progress.get(LISTED_ALL) is True,
        plan=plan,
        deleted=number(DELETED),
        already_absent=number(ALREADY_ABSENT),
        replaced=number(REPLACED),
    )
    for name in shown if isinstance(shown, list) else ():
        if isinstance(name, str):
            state.name_replaced(name)
    return state


class PrefixDeleter:
    """The `media.delete_prefix` action over one storage client."""

    def __init__(
        self,
        client: storage.Client,
        *,
        default_bucket: str | None = None,
        timeout_s: float = 10.0,
        retry: Retry | None = None,
        page_size: int = PAGE_SIZE,
    ) -> None:
        if not 1 <= page_size <= PAGE_SIZE:
            raise ValueError(f"page_size must be 1 to {PAGE_SIZE}")
        self._client = client
        self._default_bucket = default_bucket
        self._timeout_s = timeout_s
        self._retry = retry
        self._page_size = page_size

    def __call__(self, request: ActionRequest) -> ActionResult:
        target = prefix_target(request.params, self._default_bucket)
        bucket = self._client.bucket(target.bucket)
        state = progress_of(request.progress, target.prefix)
        while True:
            # The plan was durable before this delivery started (it came in `progress`):
            # delete exactly those generations, stopping between deletes at the deadline.
            while state.plan:
                self._stop_if_due(request, state)
                planned = state.plan[0]
                outcome = delete_generation(
                    bucket,
                    planned.name,
                    planned.generation,
                    timeout_s=self._timeout_s,
                    retry=self._retry,
                )
                state.count(outcome, planned.name)
                state.plan.pop(0)
            if state.listed_all:
                break
            self._stop_if_due(request, state)
            state.plan, state.cursor, state.listed_all = self._page(bucket, target, state.cursor)
            if state.plan:
                # Write ahead: the plan is durable in the job (under this delivery's lease)
                # before any of it is deleted, so whichever delivery deletes it next, this one
                # or a later one, deletes exactly it.
                request.record_progress(state.as_progress())
        outcome = REPLACED if state.replaced else DELETED if state.deleted else ALREADY_ABSENT
        logger.info(
            "deleted media prefix",
            extra={
                "fields": {
                    "job_id": request.job_id,
                    "bucket": target.bucket,
                    "prefix": target.prefix,
                    "deleted": state.deleted,
                    "already_absent": state.already_absent,
                    "replaced": state.replaced,
                }
            },
        )
        details = {"bucket": target.bucket, "prefix": target.prefix, **state.counts()}
        return ActionResult(outcome=outcome, details=details)

    @staticmethod
    def _stop_if_due(request: ActionRequest, state: PrefixProgress) -> None:
        if request.should_stop():
            handled = state.deleted + state.already_absent + state.replaced
            raise Interrupted(
                state.as_progress(), f"stopped after {handled} objects, {len(state.plan)} planned"
            )

    def _page(
        self, bucket: storage.Bucket, target: PrefixTarget, cursor: str | None
    ) -> tuple[list[Planned], str | None, bool]:
        """The next page after `cursor`: its plan, the new cursor, and whether the listing is
        over. One more name than a page is asked for, to know whether any is left."""
        try:
            listed = [
                (blob.name, blob.generation)
                for blob in self._client.list_blobs(
                    bucket,
                    prefix=target.prefix,
                    start_offset=cursor,  # inclusive: the cursor itself is dropped below
                    max_results=self._page_size + 1,
                    fields="items(name,generation),nextPageToken",
                    timeout=self._timeout_s,
                    retry=self._retry,
                )
            ]
        except api_exceptions.NotFound as exc:
            # objects.list answers 404 only for the bucket: a typo is never "nothing there".
            raise PermanentError(f"bucket {bucket.name!r} does not exist") from exc
        except Exception as exc:
            raise classify(exc) from exc
        fresh = [
            (name, str(generation))
            for name, generation in listed
            if isinstance(name, str)
            and name.startswith(target.prefix)
            and (cursor is None or name > cursor)
            and generation is not None
        ]
        plan: list[Planned] = []
        size = 0
        for name, generation in fresh[: self._page_size]:
            entry = Planned(name, generation)
            size += json_bytes(entry.as_progress())
            if plan and size > PLAN_MAX_BYTES:
                break
            plan.append(entry)
        # Everything asked for came back and all of it is in this plan: the listing is over.
        # Otherwise the next page starts after the last name planned (or, with nothing to
        # plan, after the last name listed, so the listing always moves on).
        over = len(listed) <= self._page_size and len(plan) == len(fresh)
        names = [name for name, _ in listed if isinstance(name, str)]
        last = plan[-1].name if plan else max(names, default=cursor)
        if not plan and (last is None or last == cursor):
            over = True
        return plan, last, over


def delete_prefix_action(
    client: storage.Client,
    policy: RetryPolicy,
    *,
    default_bucket: str | None = None,
    timeout_s: float = 10.0,
    retry: Retry | None = None,
    page_size: int = PAGE_SIZE,
) -> Action:
    """`media.delete_prefix`'s declaration bound to a deleter over `client`."""
    deleter = PrefixDeleter(
        client, default_bucket=default_bucket, timeout_s=timeout_s, retry=retry, page_size=page_size
    )
    return dataclasses.replace(DELETE_PREFIX, run=deleter, build=None, policy=policy)


def build_delete_prefix(context: ActionContext) -> PrefixDeleter:
    """The declaration's `build`: a deleter over a real storage client, from the worker's
    settings (its project and media bucket); called once at the worker's start."""
    client, retry = storage_for(context)
    return PrefixDeleter(client, default_bucket=context.settings.media_bucket, retry=retry)
