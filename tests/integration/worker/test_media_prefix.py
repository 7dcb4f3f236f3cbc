"""media.delete_prefix against the storage emulator, alone and through the worker with the
real store: a page at a time, each page's generations written ahead in `progress`
(`record_progress`, under the delivery's lease) before any is deleted, so a later delivery
deletes exactly the generations first seen or nothing.

Issue 33, finding 1 ("a retry deletes the customer's restored file"), for this action: a
delivery deletes a page, its outcome never becomes durable, the customer re-uploads one file,
and the next delivery must leave that file in place (`replaced`), not list it afresh.
"""

from __future__ import annotations

import threading
from collections import Counter
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, replace
from datetime import timedelta
from typing import Any

import google.cloud.storage as storage
import pytest

from services.jobs.actions import ActionRequest, ActionResult
from services.jobs.errors import Interrupted, PermanentError, TransientError
from services.jobs.model import NewJob
from services.jobs.state import State
from services.worker.deadline import Deadline
from services.worker.media import ALREADY_ABSENT, DELETED, REPLACED
from services.worker.prefix import ACTION_NAME, PrefixDeleter
from tests.integration.worker.harness import LEASE, WorkerHarness, envelope

RESTORED = b"the customer's restored rendition"
PREFIX = "media-123/renditions/"


def _request(
    bucket: str, prefix: str = PREFIX, progress: Any = None, recorder: Any = None
) -> ActionRequest:
    return ActionRequest(
        "job-1", ACTION_NAME, "media-123", {"bucket": bucket, "prefix": prefix}, 1, "key-1",
        progress=progress, progress_recorder=recorder,
    )  # fmt: skip


def _upload(bucket: storage.Bucket, *names: str) -> None:
    for name in names:
        bucket.blob(name).upload_from_string(b"rendition")


class _StopsAfter(Deadline):
    """A deadline reached after `checks` checks (the action's should_stop calls)."""

    def __init__(self, checks: int) -> None:  # no clock: only the count decides
        self.left = checks

    def reached(self) -> bool:
        self.left -= 1
        return self.left < 0


@dataclass
class _LosesItsOutcome:
    """The real action; once `crash_after` is set, the next run deletes and then fails as if
    the completion could not be written (the worker releases it: its outcome is lost)."""

    inner: PrefixDeleter
    crash_after: bool = False

    def __call__(self, request: ActionRequest) -> ActionResult:
        result = self.inner(request)
        if self.crash_after:
            self.crash_after = False
            raise TransientError("Firestore unavailable: the completion was never written")
        return result


def _deliver_until_done(
    worker: WorkerHarness, job_id: str, generation: int, *, most: int = 20
) -> list[int]:
    """Post the job's message again after every 503 (Pub/Sub's redelivery), until it is
    answered otherwise; the statuses, in order."""
    statuses: list[int] = []
    for attempt in range(1, most + 1):
        answer = worker.post(envelope(job_id, generation, delivery_attempt=attempt))
        statuses.append(answer.status_code)
        if answer.status_code != 503:
            return statuses
    raise AssertionError(f"{job_id} still answered 503 after {most} deliveries")


def _schedule(worker: WorkerHarness, job_id: str, prefix: str = PREFIX) -> int:
    worker.store.schedule(
        NewJob(job_id, ACTION_NAME, "media-123", worker.clock.now(),
               {"bucket": worker.bucket.name, "prefix": prefix})
    )  # fmt: skip
    claimed = worker.claim_one(job_id)
    worker.enqueue(claimed)
    return claimed.generation


def test_a_prefix_larger_than_a_page_is_deleted_across_deliveries_each_object_once(
    worker: WorkerHarness, storage_client: storage.Client, monkeypatch: pytest.MonkeyPatch
) -> None:
    names = [f"{PREFIX}{rendition}/{n:02d}.ts" for rendition in ("480p", "720p") for n in range(4)]
    _upload(worker.bucket, *names, "media-123/source.mp4", "media-1234/renditions/a.ts")
    sent: Counter[str] = Counter()
    original = storage.Bucket.delete_blob

    def counted(bucket: storage.Bucket, name: str, *args: Any, **kwargs: Any) -> Any:
        assert kwargs.get("if_generation_match") is not None, "a delete without its generation"
        # Written ahead: at the delete, the record already plans this very generation.
        progress = worker.job("renditions").progress
        assert progress is not None, "a delete before its plan was recorded"
        planned = {p["object"]: p["generation"] for p in progress.get("plan", [])}
        assert planned.get(name) == str(kwargs["if_generation_match"]), (name, planned)
        sent[name] += 1
        return original(bucket, name, *args, **kwargs)

    monkeypatch.setattr(storage.Bucket, "delete_blob", counted)
    worker.prefix_deleter.inner = PrefixDeleter(storage_client, page_size=3)
    generation = _schedule(worker, "renditions")

    statuses = _deliver_until_done(worker, "renditions", generation)

    # 8 objects in pages of 3: each page written ahead (one write under the lease) before
    # any of it is deleted, all in one delivery, which completes (204).
    assert statuses == [204]
    assert sent == Counter(dict.fromkeys(names, 1))
    assert worker.objects() == {"media-123/source.mp4", "media-1234/renditions/a.ts"}
    job = worker.job("renditions")
    assert job.state is State.COMPLETED and job.progress is None
    assert job.result is not None and job.result.outcome == DELETED
    assert job.result.details == {
        "bucket": worker.bucket.name, "prefix": PREFIX,
        "deleted": 8, "already_absent": 0, "replaced": 0,
    }  # fmt: skip


def test_an_empty_prefix_completes_at_once_with_zero_counts(worker: WorkerHarness) -> None:
    _upload(worker.bucket, "media-123/source.mp4")
    generation = _schedule(worker, "nothing-there")

    assert _deliver_until_done(worker, "nothing-there", generation) == [204]

    job = worker.job("nothing-there")
    assert job.state is State.COMPLETED
    assert job.result is not None and job.result.outcome == ALREADY_ABSENT
    assert job.result.details == {
        "bucket": worker.bucket.name, "prefix": PREFIX,
        "deleted": 0, "already_absent": 0, "replaced": 0,
    }  # fmt: skip
    assert worker.objects() == {"media-123/source.mp4"}


def test_a_redelivery_after_a_lost_outcome_leaves_a_re_uploaded_object_in_place(
    worker: WorkerHarness, storage_client: storage.Client
) -> None:
    names = [f"{PREFIX}{n}.ts" for n in range(3)]
    _upload(worker.bucket, *names)
    action = _LosesItsOutcome(PrefixDeleter(storage_client), crash_after=True)
    worker.prefix_deleter.inner = action
    generation = _schedule(worker, "restored")

    # Delivery 1 lists the prefix, writes its plan ahead, deletes it, but its outcome is
    # never recorded (the store is down when it completes); the customer then restores one
    # rendition: a new generation.
    first = worker.post(envelope("restored", generation, delivery_attempt=1))
    assert first.status_code == 503
    planned = worker.job("restored").progress
    assert planned is not None and [p["object"] for p in planned["plan"]] == names
    assert worker.objects() == set()
    worker.bucket.blob(names[1]).upload_from_string(RESTORED)

    # Delivery 2 deletes what the plan says, at the generations first seen: the restored
    # object is another generation, refused 412, and stays.
    third = worker.post(envelope("restored", generation, delivery_attempt=2))
    assert third.status_code == 204
    restored = worker.bucket.get_blob(names[1])
    assert restored is not None and restored.download_as_bytes() == RESTORED
    job = worker.job("restored")
    assert job.state is State.COMPLETED
    assert job.result is not None and job.result.outcome == REPLACED
    assert job.result.details["replaced"] == 1
    assert job.result.details["replaced_objects"] == [names[1]]
    # The two deleted by delivery 1 are found gone by delivery 2 (its counts start from the
    # progress last recorded, the plan).
    assert job.result.details["already_absent"] == 2


class _FrozenAfterDeleting:
    """The real action; its first run is frozen after its deletes (a SIGSTOP, or a Firestore
    freeze longer than the lease, before `complete`), until the test lets it go on."""

    def __init__(self, inner: PrefixDeleter) -> None:
        self.inner = inner
        self.frozen = threading.Event()
        self.resume = threading.Event()

    def __call__(self, request: ActionRequest) -> ActionResult:
        result = self.inner(request)
        if not self.frozen.is_set():
            self.frozen.set()
            assert self.resume.wait(30), "the test never resumed the frozen delivery"
        return result


def test_a_takeover_after_the_lease_lapsed_leaves_the_restored_object_in_place(
    worker: WorkerHarness, storage_client: storage.Client
) -> None:
    """Issue 33's reproduction: the delivery deletes exactly what it listed, then cannot record
    it before its lease lapses; the customer restores a file; the job is taken back and runs
    again in attempt 2. It deletes the generations written ahead, never the restored one."""
    names = [f"{PREFIX}{n}.ts" for n in range(3)]
    _upload(worker.bucket, *names)
    frozen = _FrozenAfterDeleting(PrefixDeleter(storage_client))
    worker.prefix_deleter.inner = frozen
    generation = _schedule(worker, "taken-over")

    with ThreadPoolExecutor(1) as pool:
        late = pool.submit(worker.post, envelope("taken-over", generation, delivery_attempt=2))
        assert frozen.frozen.wait(30), "the delivery never finished its deletes"
        assert worker.objects() == set()
        worker.bucket.blob(names[1]).upload_from_string(RESTORED)

        worker.clock.advance(LEASE + timedelta(seconds=1))
        (reclaimed,) = worker.store.reclaim_expired(
            worker.clock.now(), timedelta(minutes=10), 10, "reclaim-1"
        )
        assert reclaimed.job_id == "taken-over"
        second = worker.claim_one("taken-over", "run-2")
        worker.enqueue(second, "m-2")
        answer = worker.post(envelope("taken-over", second.generation, message_id="m-2"))
        assert answer.status_code == 204
        frozen.resume.set()
        stale = late.result(timeout=60)

    assert stale.status_code // 100 == 2 and stale.json()["outcome"] == "stale"
    restored = worker.bucket.get_blob(names[1])
    assert restored is not None and restored.download_as_bytes() == RESTORED
    job = worker.job("taken-over")
    assert job.state is State.COMPLETED and job.attempt == 2
    assert job.result is not None and job.result.outcome == REPLACED
    assert job.result.details["replaced_objects"] == [names[1]]


def test_an_object_re_uploaded_between_listing_and_delete_is_left_as_replaced(
    storage_client: storage.Client, storage_bucket: storage.Bucket
) -> None:
    names = [f"{PREFIX}{n}.ts" for n in range(4)]
    _upload(storage_bucket, *names)
    deleter = PrefixDeleter(storage_client)
    recorded: list[Any] = []

    def record_then_re_upload(progress: Any) -> None:
        # The plan is written; the customer re-uploads one object before the deletes.
        recorded.append(dict(progress))
        storage_bucket.blob(names[2]).upload_from_string(RESTORED)

    result = deleter(_request(storage_bucket.name, recorder=record_then_re_upload))

    assert len(recorded) == 1
    assert recorded[0]["listed_all"] is True and len(recorded[0]["plan"]) == 4

    assert result.outcome == REPLACED
    assert (result.details["deleted"], result.details["replaced"]) == (3, 1)
    assert result.details["replaced_objects"] == [names[2]]
    kept = storage_bucket.get_blob(names[2])
    assert kept is not None and kept.download_as_bytes() == RESTORED
    assert [b.name for b in storage_client.list_blobs(storage_bucket)] == [names[2]]


def test_a_delivery_stopped_at_its_deadline_hands_the_rest_of_its_plan_to_the_next(
    storage_client: storage.Client, storage_bucket: storage.Bucket
) -> None:
    names = [f"{PREFIX}{n}.ts" for n in range(4)]
    _upload(storage_bucket, *names)
    deleter = PrefixDeleter(storage_client)
    recorded: list[Any] = []
    # The listing, its plan recorded, two deletes, then the deadline: the two left stay
    # planned at their first generations.
    request = replace(
        _request(storage_bucket.name, recorder=lambda p: recorded.append(dict(p))),
        deadline=_StopsAfter(3),
    )
    with pytest.raises(Interrupted) as stopped:
        deleter(request)
    progress = stopped.value.progress
    assert progress["deleted"] == 2
    assert [p["object"] for p in progress["plan"]] == names[2:]
    assert len(recorded) == 1 and progress["plan"] == recorded[0]["plan"][2:]

    storage_bucket.blob(names[3]).upload_from_string(RESTORED)
    result = deleter(_request(storage_bucket.name, progress=progress))
    assert (result.outcome, result.details["deleted"], result.details["replaced"]) == (
        REPLACED, 3, 1,
    )  # fmt: skip
    assert [b.name for b in storage_client.list_blobs(storage_bucket)] == [names[3]]


def test_objects_outside_the_prefix_are_never_listed_or_deleted(
    storage_client: storage.Client, storage_bucket: storage.Bucket
) -> None:
    outside = ["media-123/source.mp4", "media-123/renditions", "media-123/renditions-old/a.ts"]
    _upload(storage_bucket, f"{PREFIX}a.ts", *outside)
    deleter = PrefixDeleter(storage_client)
    recorded: list[Any] = []
    result = deleter(_request(storage_bucket.name, recorder=lambda p: recorded.append(dict(p))))
    assert [p["object"] for r in recorded for p in r["plan"]] == [f"{PREFIX}a.ts"]
    assert result.outcome == DELETED
    assert sorted(b.name for b in storage_client.list_blobs(storage_bucket)) == sorted(outside)


def test_a_missing_bucket_is_a_permanent_error_not_an_empty_prefix(
    storage_client: storage.Client,
) -> None:
    with pytest.raises(PermanentError, match="does not exist"):
        PrefixDeleter(storage_client)(_request("no-such-bucket-here"))
