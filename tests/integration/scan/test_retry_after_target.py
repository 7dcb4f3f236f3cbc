"""An overloaded HTTP target (issue 32, Measure: `429` with `Retry-After: 30`), through the real
scan, the real worker processor and the real `http.request` action calling a real local target:
the first 429 defers its job in the same attempt and pauses `http.request`; the run's other
deliveries are held by the worker without a call (it has seen the Retry-After), and runs during
the pause claim none of its jobs, old or new, so the target sees no call then; once the pause
ends every job completes with exactly one 2xx per Idempotency-Key. Counts, not times (a
FakeClock)."""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable, Iterator
from datetime import timedelta

import pytest
import requests

from services.jobs import schema
from services.jobs.catalogue import load_catalogue
from services.jobs.deployment import Deployment
from services.jobs.http_targets import target_flag
from services.jobs.lanes import lane_key
from services.jobs.model import NewJob
from services.jobs.record import Job
from services.worker.actions import ActionRegistry
from services.worker.envelope import Delivery
from services.worker.http_request import http_request_action
from services.worker.processor import Processor
from tests.fixtures.throttled_target import ThrottledTarget
from tests.integration.scan.conftest import Rig

ACTION = "http.request"
RETRY_AFTER = timedelta(seconds=30)


class _Tokens:
    """The worker's ID tokens (this target does not check them; test_http_request.py does)."""

    def token(self, audience: str) -> str:
        return "test-token"


@pytest.fixture
def target() -> Iterator[ThrottledTarget]:
    with ThrottledTarget(retry_after_s=int(RETRY_AFTER.total_seconds()), throttle_s=None) as t:
        yield t


def _seed(rig: Rig, target: ThrottledTarget, count: int, prefix: str) -> list[str]:
    targets = target_flag(f"svc={target.url}")
    catalogue = load_catalogue(deployment=Deployment(http_targets=targets))
    ids = [f"{prefix}-{n:03d}" for n in range(count)]
    batch = rig.client.batch()
    for n, job_id in enumerate(ids):
        params = {"target": "svc", "path": f"/trials/{n}:expire", "body": {"n": n}}
        new = NewJob(job_id, ACTION, f"trial-{n}", rig.clock.now(), params)
        job = Job.create(new.validated(catalogue), rig.clock.now())
        batch.set(rig.client.collection(schema.JOBS).document(job_id), job.to_document())
    batch.commit()
    return ids


def _deliver(rig: Rig, processor: Processor, run_id: str) -> None:
    """What the push subscription does after a run: each published ID to the worker."""
    for job_id in sorted(rig.pull()):
        job = rig.store.get(job_id)
        assert job is not None and job.claim is not None
        if job.state.value != "enqueued" or job.claim.run_id != run_id:
            continue  # delivered after an earlier run already
        processor.process(Delivery(job_id, job.claim.generation, run_id, delivery_attempt=1))


def test_a_429_with_retry_after_pauses_calls_to_the_target_and_loses_or_repeats_no_job(
    scan_rig: Callable[..., Rig], target: ThrottledTarget
) -> None:
    rig = scan_rig(max_per_run=200, page_size=50)
    session = requests.Session()
    action = http_request_action(target_flag(f"svc={target.url}"), _Tokens(), session)
    processor = Processor(
        rig.store, ActionRegistry([action]), rig.clock, lease=timedelta(seconds=60), worker_id="w"
    )
    first_ids = _seed(rig, target, 20, "first")

    first = rig.scan()
    assert first["claimed"] == 20
    _deliver(rig, processor, first["run_id"])
    # One call, answered 429: every job deferred by the Retry-After in the same attempt (the
    # first by its answer, the other 19 held without a call), and the action's claims paused.
    assert len(target.calls) == 1 and {c.status for c in target.calls} == {429}
    until = rig.clock.now() + RETRY_AFTER
    for job_id in first_ids:
        job = rig.store.get(job_id)
        assert job is not None
        assert (job.state.value, job.attempt, job.due_at) == ("deferred", 1, until)
        assert job.last_error is not None and job.last_error.code in {"retry_after", "paused"}
    codes = Counter(rig.store.get(j).last_error.code for j in first_ids)  # type: ignore[union-attr]
    assert codes == Counter({"retry_after": 1, "paused": 19})
    assert rig.store.get_control().action_pauses == {lane_key(ACTION, "svc"): until}

    # During the pause: new jobs come due too; a run claims none of the action's jobs and the
    # target hears nothing.
    new_ids = _seed(rig, target, 5, "new")
    rig.clock.advance(RETRY_AFTER - timedelta(seconds=5))
    paused = rig.scan()
    assert paused["claimed"] == 0
    document = rig.runs.get(paused["run_id"])
    assert document is not None
    assert document.lanes[lane_key(ACTION, "svc")]["paused_until"] == until
    _deliver(rig, processor, paused["run_id"])
    assert len(target.calls) == 1

    # The pause over and the target recovered: every job runs once, in its first attempt.
    target.open()
    rig.clock.advance(timedelta(seconds=10))
    after = rig.scan()
    assert after["claimed"] == 25
    _deliver(rig, processor, after["run_id"])
    session.close()
    assert rig.states(first_ids + new_ids) == Counter({"completed": 25})
    done = target.done_per_key()
    keys = {c.key for c in target.calls}
    assert len(keys) == 25 and all(done[key] == 1 for key in keys)
    assert Counter(c.status for c in target.calls) == Counter({429: 1, 204: 25})
    for job_id in first_ids + new_ids:
        job = rig.store.get(job_id)
        assert job is not None and job.attempt == 1
