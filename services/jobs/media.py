"""The built-in media actions, declared like any plug-in's: `media.delete_source` (delete a
media object's source files from Cloud Storage, generation-checked) and `media.delete_prefix`
(delete every object under a prefix, a video's renditions, generation-checked, page by page).

This is the one place the actions' names, params schemas and needs are written; the side
effects themselves are the worker's (`services.worker.media`, `services.worker.prefix`,
referenced by `build`, so nothing here imports the storage client). Their limits are imported
by the worker too, so what `schedule` accepts is what the worker runs.
"""

from __future__ import annotations

import re

from services.jobs.actions import Action, Grant, Needs
from services.jobs.params import Field, ParamsSchema

MEDIA_DELETE_SOURCE = "media.delete_source"
MEDIA_DELETE_PREFIX = "media.delete_prefix"
MAX_OBJECTS = 100
MAX_OBJECT_NAME_BYTES = 1024
# Cloud Storage bucket names: https://cloud.google.com/storage/docs/buckets#naming
# \Z, not $: `$` also matches before a trailing newline, which no bucket name has.
BUCKET_NAME = re.compile(r"^(?!.*\.\.)[a-z0-9][a-z0-9._-]{1,220}[a-z0-9]\Z")
OBJECT_FORBIDDEN = re.compile(r"[\r\n\x00]")
NOT_AN_OBJECT = frozenset({".", ".."})
# A prefix is one or more path segments, each ending in "/": never empty (that is the whole
# bucket), never a bare "/" or a name cut mid-segment ("media-12" would also match
# "media-123/..."), and no empty, "." or ".." segment. \Z as above.
PREFIX = re.compile(r"^(?:(?!\.\.?/)[^/]+/)+\Z")

MEDIA_DELETE_SOURCE_PARAMS = ParamsSchema(
    action=MEDIA_DELETE_SOURCE,
    fields=(
        # Optional: a worker configured with a media bucket uses its own, and refuses any other.
        Field(
            "bucket",
            "string",
            pattern=BUCKET_NAME,
            describe="a Cloud Storage bucket name (3-222 of a-z 0-9 . _ -)",
        ),
        Field(
            "object",
            "string",
            max_bytes=MAX_OBJECT_NAME_BYTES,
            forbidden=OBJECT_FORBIDDEN,
            reserved=NOT_AN_OBJECT,
        ),
        Field(
            "objects",
            "string_list",
            min_items=1,
            max_items=MAX_OBJECTS,
            max_bytes=MAX_OBJECT_NAME_BYTES,
            forbidden=OBJECT_FORBIDDEN,
            reserved=NOT_AN_OBJECT,
        ),
    ),
    exactly_one_of=(("object", "objects"),),
)

DELETE_SOURCE = Action(
    name=MEDIA_DELETE_SOURCE,
    build="services.worker.media:build_delete_source",
    params=MEDIA_DELETE_SOURCE_PARAMS,
    policy=None,  # the worker's configured policy (JOBS_RETRY_LATER_DELAY_S, ...)
    budget=None,
    needs=Needs(
        settings=("JOBS_MEDIA_BUCKET",),
        # infra/identity.py's MEDIA_STORAGE_CALLS derives the same custom role per call.
        grants=(
            Grant(
                "bucket:mediaBucket",
                permissions=(
                    "storage.buckets.get",
                    "storage.objects.delete",
                    "storage.objects.get",
                    "storage.objects.list",
                ),
            ),
        ),
    ),
    description="Delete a media object's source files from Cloud Storage (generation-checked).",
)

MEDIA_DELETE_PREFIX_PARAMS = ParamsSchema(
    action=MEDIA_DELETE_PREFIX,
    fields=(
        Field(
            "bucket",
            "string",
            pattern=BUCKET_NAME,
            describe="a Cloud Storage bucket name (3-222 of a-z 0-9 . _ -)",
        ),
        Field(
            "prefix",
            "string",
            required=True,
            pattern=PREFIX,
            max_bytes=MAX_OBJECT_NAME_BYTES,
            forbidden=OBJECT_FORBIDDEN,
            describe=(
                "a path prefix ending in '/' (like 'media-123/renditions/') with no empty, "
                "'.' or '..' segment"
            ),
        ),
    ),
)

DELETE_PREFIX = Action(
    name=MEDIA_DELETE_PREFIX,
    build="services.worker.prefix:build_delete_prefix",
    params=MEDIA_DELETE_PREFIX_PARAMS,
    policy=None,  # the worker's configured policy (JOBS_RETRY_LATER_DELAY_S, ...)
    budget=None,
    needs=Needs(
        settings=("JOBS_MEDIA_BUCKET",),
        # objects.list pages through the prefix; objects.delete (with its get and list, as in
        # infra/identity.py's MEDIA_STORAGE_CALLS) removes each listed generation.
        grants=(
            Grant(
                "bucket:mediaBucket",
                permissions=(
                    "storage.objects.delete",
                    "storage.objects.get",
                    "storage.objects.list",
                ),
            ),
        ),
    ),
    description=(
        "Delete every object under a prefix (a video's renditions) from Cloud Storage "
        "(generation-checked, page by page)."
    ),
)

# The built-in actions, in the order `jobsctl actions` lists them; the first is the default
# action of `jobsctl schedule` and of a job file line without `action`.
BUILT_IN: tuple[Action, ...] = (DELETE_SOURCE, DELETE_PREFIX)
