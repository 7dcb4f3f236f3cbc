"""Issue 33, finding 1: a delivery that acted and lost its outcome never lets a later delivery
act on something else. The generations `media.delete_source` reads are written into the job
(`record_progress`, under the lease) before its first delete, so the delivery after a lost
completion — a take-over of the lapsed lease, or the next attempt after a reclaim — deletes
exactly those or nothing: an object the customer uploaded again meanwhile stays, `replaced`.

The real store on the Firestore emulator, the real action on the storage emulator. Firestore's
outage is a wrapper that refuses the store's calls with StoreUnavailable while it lasts; the
killed worker is an exception no handler of the worker catches, leaving the job running under
its lease exactly as a SIGKILL between the delete and `complete` does.
"""

from __future__ import annotations

from collections.abc import Callable
from datetime import timedelta
from typing import Any

import pytest

from services.jobs.actions import Action, ActionRequest, ActionResult
from services.jobs.errors import StoreUnavailable
from services.jobs.results import ClaimedJob
from services.jobs.state import State
from services.worker.actions import ActionRegistry
from services.worker.envelope import Delivery
from services.worker.media import ACTION_NAME, DELETED, REPLACED
from services.worker.processor import OutcomeKind, Processor
from tests.integration.worker.harness import LEASE, WorkerHarness

RESTORED = b"the customer's restored video"
OBJECT = "src/restored.mp4"
# The calls an outage refuses (everything the worker makes after its action ran).
REFUSED = frozenset({"complete", "get", "fail", "release", "retry_later", "extend_lease"})


class Outage:
    """The store, with every call in REFUSED answered StoreUnavailable while `down`."""

    def __init__(self, store: Any) -> None:
        self._store = store
        self.down = False

    def __getattr__(self, name: str) -> Any:
        real = getattr(self._store, name)
        if name not in REFUSED:
            return real

        def call(*args: Any, **kwargs: Any) -> Any:
            if self.down:
                raise StoreUnavailable(f"{name}: Firestore is down (injected)")
            return real(*args, **kwargs)

        return call


class Killed(BaseException):
    """The worker process dies here: nothing of the worker handles it."""


def processor(worker: WorkerHarness, action: Callable[..., ActionResult], store: Any) -> Processor:
    return Processor(
        store,
        ActionRegistry([Action(ACTION_NAME, action)]),
        worker.clock,
        lease=LEASE,
        worker_id="w",
        sleep=lambda _s: None,
        outcome_retry_attempts=2,
    )


def delivery(claimed: ClaimedJob, message_id: str = "m-1") -> Delivery:
    return Delivery(claimed.job_id, claimed.generation, "run-1", 1, message_id)


def _first_delivery_deletes_and_loses_its_outcome(worker: WorkerHarness, how: str) -> ClaimedJob:
    """Delivery 1 deletes G1; its completion is lost (outage past the lease, or killed)."""
    worker.schedule("j", worker.upload(OBJECT))
    first_generation = worker.bucket.get_blob(OBJECT).generation
    claimed = worker.claim_one("j")
    worker.enqueue(claimed)
    outage = Outage(worker.store)

    def acts_then_loses_it(request: ActionRequest) -> ActionResult:
        result = worker.deleter(request)
        assert result.outcome == DELETED
        if how == "killed":
            raise Killed()
        outage.down = True
        return result

    if how == "killed":
        with pytest.raises(Killed):
            processor(worker, acts_then_loses_it, outage).process(delivery(claimed))
    else:
        lost = processor(worker, acts_then_loses_it, outage).process(delivery(claimed))
        assert not lost.acknowledged, lost  # 503: the outcome is not durable
    outage.down = False
    assert worker.bucket.get_blob(OBJECT) is None  # G1 is gone
    job = worker.job("j")
    assert job.state is State.RUNNING  # the completion never landed
    assert job.progress is not None
    assert job.progress["generations"] == {OBJECT: str(first_generation)}
    # The customer restores the file (G2), and the first delivery's lease lapses.
    worker.bucket.blob(OBJECT).upload_from_string(RESTORED)
    worker.clock.advance(LEASE + timedelta(seconds=1))
    return claimed


def _assert_the_restored_file_stays(worker: WorkerHarness) -> None:
    restored = worker.bucket.get_blob(OBJECT)
    assert restored is not None, "a later delivery deleted the customer's restored file"
    assert restored.download_as_bytes() == RESTORED
    job = worker.job("j")
    assert job.state is State.COMPLETED
    assert job.result is not None and job.result.outcome == REPLACED
    assert job.result.details["replaced"] == [OBJECT]
    assert job.progress is None  # cleared by complete, and only by it
    assert worker.deleter.outcomes == {DELETED: 1, REPLACED: 1}


@pytest.mark.parametrize("how", ["outage", "killed"])
def test_completion_lost_object_replaced_lease_lapsed_a_take_over_leaves_the_new_generation(
    direct_worker: WorkerHarness, how: str
) -> None:
    worker = direct_worker
    claimed = _first_delivery_deletes_and_loses_its_outcome(worker, how)

    # The redelivery of the same message takes the lapsed lease over (attempt 2).
    again = processor(worker, worker.deleter, worker.store).process(delivery(claimed))

    assert again.kind is OutcomeKind.COMPLETED, again
    assert worker.job("j").attempt == 2
    _assert_the_restored_file_stays(worker)


@pytest.mark.parametrize("how", ["outage", "killed"])
def test_completion_lost_object_replaced_lease_lapsed_the_next_attempt_leaves_the_new_generation(
    direct_worker: WorkerHarness, how: str
) -> None:
    worker = direct_worker
    _first_delivery_deletes_and_loses_its_outcome(worker, how)

    # The reclaimer finds the lapsed lease first: attempt 2, claimed and published again.
    (reclaimed,) = worker.store.reclaim_expired(
        worker.clock.now(), timedelta(minutes=10), 10, "reclaim-1"
    )
    assert reclaimed.job_id == "j"
    kept = worker.job("j")
    assert kept.state is State.DEFERRED and kept.progress is not None  # the reclaim kept it
    second = worker.claim_one("j", "run-2")
    worker.enqueue(second, "m-2")
    again = processor(worker, worker.deleter, worker.store).process(delivery(second, "m-2"))

    assert again.kind is OutcomeKind.COMPLETED, again
    assert worker.job("j").attempt == 2
    _assert_the_restored_file_stays(worker)


def test_the_generations_are_recorded_before_the_first_delete(
    direct_worker: WorkerHarness,
) -> None:
    # The order is the whole guarantee: at the moment of the delete the record has the plan.
    worker = direct_worker
    worker.schedule("j", worker.upload(OBJECT))
    claimed = worker.claim_one("j")
    worker.enqueue(claimed)
    seen: list[Any] = []
    inner = worker.deleter.inner
    delete = inner._delete

    def observed(bucket: Any, name: str, generation: str) -> str:
        seen.append(worker.job("j").progress)
        return delete(bucket, name, generation)

    inner._delete = observed  # type: ignore[method-assign]
    done = processor(worker, worker.deleter, worker.store).process(delivery(claimed))

    assert done.kind is OutcomeKind.COMPLETED
    assert len(seen) == 1 and seen[0] is not None
    assert set(seen[0]["generations"]) == {OBJECT}
    assert worker.job("j").progress is None
