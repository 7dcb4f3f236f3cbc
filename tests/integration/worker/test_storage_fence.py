"""The side effect fenced at the storage: a delete that arrives after its delivery lost the
lease can only remove the generation that delivery read, never a newer upload of the object.

A worker frozen (SIGSTOP, a long GC pause) after its last deadline check and before its DELETE
goes out has no way to know its lease is gone; the store refuses its late writes, but the
DELETE itself reaches Cloud Storage. Conditioned on the generation read when the delivery
started (`ifGenerationMatch`), it is refused 412 when the customer re-uploaded the object in
between. Before the fence, the late delete removed the re-uploaded object.
"""

from __future__ import annotations

import threading
from concurrent.futures import ThreadPoolExecutor
from dataclasses import replace
from datetime import timedelta
from typing import Any

import google.cloud.storage as storage

from services.jobs.actions import ActionRequest
from services.jobs.errors import Interrupted
from services.jobs.state import State
from services.worker.deadline import Deadline
from services.worker.media import DELETED, REPLACED, SourceDeleter
from tests.integration.worker.harness import LEASE, WorkerHarness, envelope

CLAIM_TIMEOUT = timedelta(minutes=10)
RESTORED = b"the customer's restored video"


class FrozenBeforeDelete(SourceDeleter):
    """The real action, frozen on its first delete after its deadline check passed (the
    window a SIGSTOP lands in), until the test lets it go on."""

    def __init__(self, client: storage.Client) -> None:
        super().__init__(client)
        self.frozen = threading.Event()
        self.resume = threading.Event()
        self.generations_sent: list[str] = []

    def _delete(self, bucket: storage.Bucket, name: str, generation: str) -> str:
        self.generations_sent.append(generation)
        if not self.frozen.is_set():
            self.frozen.set()
            assert self.resume.wait(30), "the test never resumed the frozen delivery"
        return super()._delete(bucket, name, generation)


def test_a_late_delete_from_a_delivery_that_lost_its_lease_leaves_the_re_uploaded_object(
    worker: WorkerHarness, storage_client: storage.Client
) -> None:
    worker.schedule("fenced", worker.upload("src/fenced.mp4"))
    first = worker.claim_one("fenced")
    worker.enqueue(first)
    frozen = FrozenBeforeDelete(storage_client)
    worker.deleter.inner = frozen

    with ThreadPoolExecutor(1) as pool:
        late = pool.submit(worker.post, envelope("fenced", first.generation))
        assert frozen.frozen.wait(30), "the first delivery never reached its delete"

        # While it is frozen: its lease lapses, the reclaimer takes the job back, the next
        # delivery deletes the object and completes the job; then the customer restores it.
        worker.clock.advance(LEASE + timedelta(seconds=1))
        (reclaimed,) = worker.store.reclaim_expired(
            worker.clock.now(), CLAIM_TIMEOUT, 10, "reclaim-1"
        )
        assert reclaimed.job_id == "fenced"
        second = worker.claim_one("fenced", "run-2")
        worker.enqueue(second, "m-2")
        answer = worker.post(envelope("fenced", second.generation, message_id="m-2"))
        assert answer.status_code == 204
        assert worker.job("fenced").state is State.COMPLETED
        worker.bucket.blob("src/fenced.mp4").upload_from_string(RESTORED)

        frozen.resume.set()
        stale = late.result(timeout=60)

    assert stale.status_code // 100 == 2
    assert stale.json()["outcome"] == "stale"
    # The late DELETE went out (the window is real) but carried the old generation: refused.
    assert len(frozen.generations_sent) == 2
    assert frozen.generations_sent[0] == frozen.generations_sent[1]
    restored = worker.bucket.get_blob("src/fenced.mp4")
    assert restored is not None
    assert restored.download_as_bytes() == RESTORED
    assert worker.deleter.outcomes == {DELETED: 1, REPLACED: 1}
    assert worker.completions("fenced") == 1
    job = worker.job("fenced")
    assert job.state is State.COMPLETED
    assert job.result is not None and job.result.outcome == DELETED


def _request(bucket: str, *objects: str, progress: dict[str, Any] | None = None) -> ActionRequest:
    return ActionRequest(
        "job-1",
        "media.delete_source",
        "media-1",
        {"bucket": bucket, "objects": list(objects)},
        1,
        "key-1",
        progress=progress,
    )


class _StopsAfter(Deadline):
    """A deadline reached after `checks` checks (the action's should_stop calls)."""

    def __init__(self, checks: int) -> None:  # no clock: only the count decides
        self.left = checks

    def reached(self) -> bool:
        self.left -= 1
        return self.left < 0


def test_an_interrupted_delivery_hands_its_generations_to_the_next(
    storage_client: storage.Client, storage_bucket: storage.Bucket
) -> None:
    for name in ("a.mp4", "b.mp4"):
        storage_bucket.blob(name).upload_from_string(b"original")
    deleter = SourceDeleter(storage_client)
    # Two reads, one delete, then the deadline: b.mp4's generation was read, not deleted.
    request = replace(_request(storage_bucket.name, "a.mp4", "b.mp4"), deadline=_StopsAfter(3))
    try:
        deleter(request)
    except Interrupted as stopped:
        progress = dict(stopped.progress)
    else:
        raise AssertionError("the action did not stop at its deadline")
    assert progress["deleted"] == ["a.mp4"]
    assert set(progress["generations"]) == {"b.mp4"}

    storage_bucket.blob("b.mp4").upload_from_string(RESTORED)
    result = deleter(_request(storage_bucket.name, "a.mp4", "b.mp4", progress=progress))

    assert result.outcome == REPLACED
    assert result.details["deleted"] == ["a.mp4"]
    assert result.details["replaced"] == ["b.mp4"]
    kept = storage_bucket.get_blob("b.mp4")
    assert kept is not None and kept.download_as_bytes() == RESTORED
