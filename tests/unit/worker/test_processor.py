"""The Processor's decisions, over an in-memory store: one delivery → one outcome."""

from __future__ import annotations

import dataclasses
import logging
from datetime import UTC, datetime, timedelta

import pytest

from services.jobs.actions import Action, ActionRequest, ActionResult, RetryPolicy
from services.jobs.clock import FakeClock
from services.jobs.errors import DependencyDown, PermanentError, RetryAfter, TransientError
from services.jobs.parts import CancelRequest
from services.jobs.results import IdempotencyRecord
from services.jobs.state import State
from services.telemetry import metrics
from services.worker.actions import ActionRegistry
from services.worker.envelope import Delivery
from services.worker.processor import (
    UNKNOWN_ACTION_FIRST_DELAY,
    UNKNOWN_ACTION_MAX_DELAY,
    OutcomeKind,
    Processor,
    unknown_action_delay,
)
from tests.unit.worker.fakes import MemoryStore

START = datetime(2026, 1, 1, tzinfo=UTC)
LEASE = timedelta(seconds=60)


class Script:
    """An action that plays back a list of results or errors, counting its runs."""

    def __init__(self, *steps: ActionResult | Exception) -> None:
        self.steps = list(steps)
        self.runs = 0

    def __call__(self, request: ActionRequest) -> ActionResult:
        self.runs += 1
        step = self.steps.pop(0) if self.steps else ActionResult("deleted")
        if isinstance(step, Exception):
            raise step
        return step


@pytest.fixture
def clock() -> FakeClock:
    return FakeClock(START)


@pytest.fixture
def store(clock: FakeClock) -> MemoryStore:
    return MemoryStore(clock)


def processor_for(
    store: MemoryStore, clock: FakeClock, script: Script, policy: RetryPolicy | None = None
) -> Processor:
    registry = ActionRegistry([Action("media.delete_source", script, policy or RetryPolicy())])
    return Processor(store, registry, clock, lease=LEASE, worker_id="w-1")


def delivery(job_id: str = "job-1", generation: int = 1, attempt: int | None = 1) -> Delivery:
    return Delivery(job_id=job_id, generation=generation, run_id="run-1", delivery_attempt=attempt)


def test_enqueued_job_runs_once_and_completes(store: MemoryStore, clock: FakeClock) -> None:
    store.add("job-1", idempotency_key="media-1:decision-1")  # a supplied key is recorded
    script = Script(ActionResult("deleted", {"n": 1}))
    outcome = processor_for(store, clock, script).process(delivery())
    assert outcome.kind is OutcomeKind.COMPLETED and outcome.acknowledged
    assert script.runs == 1
    job = store.jobs["job-1"]
    assert job.state is State.COMPLETED and job.result is not None
    assert (job.result.outcome, dict(job.result.details)) == ("deleted", {"n": 1})
    assert store.idempotency[job.idempotency_key].outcome == "deleted"


def test_second_delivery_of_a_completed_job_is_a_duplicate_without_action(
    store: MemoryStore, clock: FakeClock
) -> None:
    store.add("job-1")
    script = Script()
    processor = processor_for(store, clock, script)
    processor.process(delivery())
    outcome = processor.process(delivery())
    assert outcome.kind is OutcomeKind.DUPLICATE and outcome.acknowledged
    assert script.runs == 1


def test_unknown_job_is_reported_as_such(store: MemoryStore, clock: FakeClock) -> None:
    outcome = processor_for(store, clock, Script()).process(delivery("nope"))
    assert outcome.kind is OutcomeKind.UNKNOWN_JOB and outcome.acknowledged


def test_older_generation_is_stale_and_acknowledged(store: MemoryStore, clock: FakeClock) -> None:
    store.add("job-1")
    script = Script()
    outcome = processor_for(store, clock, script).process(delivery(generation=0))
    assert outcome.kind is OutcomeKind.STALE and outcome.acknowledged
    assert script.runs == 0


def test_live_lease_of_another_worker_asks_for_redelivery(
    store: MemoryStore, clock: FakeClock
) -> None:
    store.add("job-1")
    store.start("job-1", 1, LEASE, "other-worker")
    script = Script()
    outcome = processor_for(store, clock, script).process(delivery())
    assert outcome.kind is OutcomeKind.LEASE_HELD and not outcome.acknowledged
    assert script.runs == 0


def test_expired_lease_is_taken_over_and_the_job_completes(
    store: MemoryStore, clock: FakeClock
) -> None:
    store.add("job-1")
    store.start("job-1", 1, LEASE, "crashed-worker")
    clock.advance(LEASE + timedelta(seconds=1))
    outcome = processor_for(store, clock, Script()).process(delivery())
    assert outcome.kind is OutcomeKind.COMPLETED
    # The lapsed lease spent its cycle, as when the reclaimer finds it (finding 9).
    assert store.jobs["job-1"].attempt == 2


def test_cancel_request_is_honoured_before_acting(store: MemoryStore, clock: FakeClock) -> None:
    job = store.add("job-1")
    store.jobs["job-1"] = dataclasses.replace(
        job, cancel_requested=CancelRequest("retention revoked", "operator:ann", START)
    )
    script = Script()
    outcome = processor_for(store, clock, script).process(delivery())
    assert outcome.kind is OutcomeKind.CANCELLED and outcome.acknowledged
    assert script.runs == 0
    assert store.jobs["job-1"].state is State.CANCELLED


def test_recorded_side_effect_completes_without_acting_again(
    store: MemoryStore, clock: FakeClock
) -> None:
    # Another job sharing the explicit key already did the side effect.
    job = store.add("job-1", idempotency_key="media-1:retention")
    store.idempotency[job.idempotency_key] = IdempotencyRecord(
        job.idempotency_key, "job-0", job.action, job.subject, "deleted", {"n": 1}, START, None
    )
    script = Script()
    outcome = processor_for(store, clock, script).process(delivery())
    assert outcome.kind is OutcomeKind.COMPLETED
    assert script.runs == 0
    assert store.jobs["job-1"].result is not None
    assert store.jobs["job-1"].result.outcome == "deleted"


def test_a_derived_key_costs_no_idempotency_read(store: MemoryStore, clock: FakeClock) -> None:
    # The derived key belongs to this job alone: start already refused it if it completed.
    store.add("job-1")
    outcome = processor_for(store, clock, Script()).process(delivery())
    assert outcome.kind is OutcomeKind.COMPLETED
    assert "get_idempotency" not in store.calls


def test_transient_error_releases_the_lease_and_asks_for_redelivery(
    store: MemoryStore, clock: FakeClock
) -> None:
    store.add("job-1")
    outcome = processor_for(store, clock, Script(TransientError("503"))).process(delivery())
    assert outcome.kind is OutcomeKind.RETRY and not outcome.acknowledged
    job = store.jobs["job-1"]
    assert job.state is State.ENQUEUED and job.lease_owner is None
    assert job.last_error is not None and job.last_error.code == "transient"


def test_transient_error_at_the_delivery_threshold_defers_by_the_long_delay(
    store: MemoryStore, clock: FakeClock
) -> None:
    store.add("job-1")
    policy = RetryPolicy(long_retry_delay=timedelta(days=30), retry_later_after_attempts=4)
    processor = processor_for(store, clock, Script(*[TransientError("down")] * 4), policy)
    kinds = [processor.process(delivery(attempt=n)).kind for n in (1, 2, 3, 4)]
    assert kinds == [OutcomeKind.RETRY] * 3 + [OutcomeKind.DEFERRED]
    job = store.jobs["job-1"]
    assert job.state is State.DEFERRED
    assert job.due_at == START + timedelta(days=30)
    assert job.attempt == 2  # the quick redeliveries were one cycle; the long retry is the next


def test_dependency_down_defers_at_once(store: MemoryStore, clock: FakeClock) -> None:
    store.add("job-1")
    outcome = processor_for(store, clock, Script(DependencyDown("storage outage"))).process(
        delivery(attempt=1)
    )
    assert outcome.kind is OutcomeKind.DEFERRED and outcome.acknowledged
    assert store.jobs["job-1"].due_at == START + timedelta(days=30)


def test_quick_redeliveries_never_spend_attempts(store: MemoryStore, clock: FakeClock) -> None:
    store.add("job-1", max_attempts=2)
    processor = processor_for(store, clock, Script(*[TransientError("down")] * 4))
    for n in (1, 2, 3):
        assert processor.process(delivery(attempt=n)).kind is OutcomeKind.RETRY
        assert store.jobs["job-1"].attempt == 1
    assert processor.process(delivery(attempt=4)).kind is OutcomeKind.DEFERRED
    assert store.jobs["job-1"].attempt == 2


def test_transient_errors_in_the_last_attempt_are_retried_quickly_then_fail_the_job(
    store: MemoryStore, clock: FakeClock, caplog: pytest.LogCaptureFixture
) -> None:
    store.add("job-1", max_attempts=1)
    processor = processor_for(store, clock, Script(*[TransientError("down")] * 4))
    with caplog.at_level(logging.INFO):
        kinds = [processor.process(delivery(attempt=n)).kind for n in (1, 2, 3, 4)]
    assert kinds == [OutcomeKind.RETRY] * 3 + [OutcomeKind.FAILED]
    job = store.jobs["job-1"]
    assert (job.state, job.attempt) == (State.FAILED, 1)
    assert store.calls.count("retry_later") == 1  # the store said no attempt was left
    failed = [r for r in caplog.records if _fields(r).get("event") == metrics.EVENT_JOB_FAILED]
    assert len(failed) == 1 and failed[0].levelno == logging.ERROR


def test_each_long_retry_is_one_attempt_and_the_max_attempts_th_fails_the_job(
    store: MemoryStore, clock: FakeClock
) -> None:
    store.add("job-1", max_attempts=3)
    processor = processor_for(store, clock, Script(*[DependencyDown("outage")] * 3))
    kinds = []
    for cycle in (1, 2, 3):
        assert store.jobs["job-1"].attempt == cycle
        kinds.append(processor.process(delivery(generation=cycle)).kind)
        if cycle < 3:
            assert store.jobs["job-1"].due_at == clock.now() + timedelta(days=30)
            clock.advance(timedelta(days=30))
            store.requeue("job-1")
    assert kinds == [OutcomeKind.DEFERRED, OutcomeKind.DEFERRED, OutcomeKind.FAILED]
    job = store.jobs["job-1"]
    assert (job.state, job.attempt) == (State.FAILED, 3)
    assert job.last_error is not None and job.last_error.code == "dependency_down"


def test_without_a_delivery_attempt_transient_errors_are_redelivered_not_deferred(
    store: MemoryStore, clock: FakeClock
) -> None:
    # A first deploy's pushes can arrive before the dead-letter IAM applies: no deliveryAttempt.
    # Unknown is not "quick retries spent": Pub/Sub redelivers, the job keeps its attempt and
    # due time, and once the field appears the threshold counts as usual.
    store.add("job-1")
    due_at = store.jobs["job-1"].due_at
    processor = processor_for(store, clock, Script(*[TransientError("503")] * 6))
    kinds = [processor.process(delivery(attempt=None)).kind for _ in range(5)]
    assert kinds == [OutcomeKind.RETRY] * 5
    job = store.jobs["job-1"]
    assert (job.attempt, job.due_at) == (1, due_at)
    assert "retry_later" not in store.calls
    outcome = processor.process(delivery(attempt=4))
    assert outcome.kind is OutcomeKind.DEFERRED and outcome.acknowledged
    assert store.jobs["job-1"].attempt == 2


def test_an_actions_lower_attempt_cap_fails_the_job_instead_of_a_long_retry(
    store: MemoryStore, clock: FakeClock
) -> None:
    store.add("job-1", max_attempts=5)
    policy = RetryPolicy(max_attempts=1)
    outcome = processor_for(store, clock, Script(DependencyDown("outage")), policy).process(
        delivery()
    )
    assert outcome.kind is OutcomeKind.FAILED
    assert "retry_later" not in store.calls


def test_permanent_error_fails_at_once(store: MemoryStore, clock: FakeClock) -> None:
    store.add("job-1")
    outcome = processor_for(store, clock, Script(PermanentError("403"))).process(delivery())
    assert outcome.kind is OutcomeKind.FAILED
    assert store.jobs["job-1"].attempt == 1


def test_unexpected_action_exception_is_treated_as_transient(
    store: MemoryStore, clock: FakeClock
) -> None:
    store.add("job-1")
    outcome = processor_for(store, clock, Script(KeyError("bug"))).process(delivery())
    assert outcome.kind is OutcomeKind.RETRY


def test_unknown_action_defers_the_job_in_the_same_attempt_and_never_fails_it(
    store: MemoryStore, clock: FakeClock, caplog: pytest.LogCaptureFixture
) -> None:
    # In its last attempt too: waiting for a worker that knows the action spends nothing.
    store.add("job-1", max_attempts=1)
    processor = Processor(store, ActionRegistry(), clock, lease=LEASE, worker_id="w-1")
    with caplog.at_level(logging.INFO):
        outcome = processor.process(delivery())
    assert outcome.kind is OutcomeKind.UNKNOWN_ACTION
    assert outcome.acknowledged  # deferred in the store: nothing for Pub/Sub to redeliver
    job = store.jobs["job-1"]
    assert job.state is State.DEFERRED
    assert job.attempt == 1
    assert job.due_at == clock.now() + UNKNOWN_ACTION_FIRST_DELAY
    assert job.last_error is not None and job.last_error.code == "unknown_action"
    events = [_fields(r) for r in caplog.records]
    counted = [f for f in events if f.get("event") == metrics.UNKNOWN_ACTIONS.event]
    assert [(f["job_id"], f["action"]) for f in counted] == [("job-1", "media.delete_source")]


def test_unknown_action_backoff_doubles_the_last_wait_within_bounds(
    store: MemoryStore, clock: FakeClock
) -> None:
    store.add("job-1")
    Processor(store, ActionRegistry(), clock, lease=LEASE, worker_id="w-1").process(delivery())
    job = store.jobs["job-1"]
    assert job.last_error is not None and job.last_error.at is not None
    deferred_at = job.last_error.at
    assert unknown_action_delay(job, deferred_at + timedelta(minutes=6)) == timedelta(minutes=12)
    assert unknown_action_delay(job, deferred_at + timedelta(hours=3)) == UNKNOWN_ACTION_MAX_DELAY
    assert unknown_action_delay(job, deferred_at) == UNKNOWN_ACTION_FIRST_DELAY
    other = dataclasses.replace(job, last_error=dataclasses.replace(job.last_error, code="x"))
    assert unknown_action_delay(other, deferred_at + timedelta(hours=3)) == (
        UNKNOWN_ACTION_FIRST_DELAY
    )


def test_every_outcome_logs_one_worker_outcome_line_with_latencies_on_completion(
    store: MemoryStore, clock: FakeClock, caplog: pytest.LogCaptureFixture
) -> None:
    store.add("job-1")
    clock.advance(timedelta(seconds=90))
    with caplog.at_level(logging.INFO):
        processor_for(store, clock, Script()).process(delivery())
    lines = [r for r in caplog.records if _fields(r).get("event") == metrics.EVENT_WORKER_OUTCOME]
    assert len(lines) == 1
    fields = _fields(lines[0])
    assert fields[metrics.LOG_OUTCOME] == "completed"
    assert fields[metrics.LOG_ATTEMPT] == 1
    assert fields[metrics.LOG_DUE_TO_DONE_S] == 90.0
    assert fields[metrics.LOG_ENQUEUE_TO_DONE_S] == 90.0
    assert (fields["job_id"], fields["action"]) == ("job-1", "media.delete_source")


def _fields(record: logging.LogRecord) -> dict[str, object]:
    return dict(getattr(record, "fields", {}) or {})


def test_job_cancelled_before_the_delivery_is_reported_cancelled(
    store: MemoryStore, clock: FakeClock
) -> None:
    job = store.add("job-1")
    store.jobs["job-1"] = dataclasses.replace(job, state=State.CANCELLED)
    script = Script()
    outcome = processor_for(store, clock, script).process(delivery())
    assert outcome.kind is OutcomeKind.CANCELLED and outcome.acknowledged
    assert script.runs == 0


def test_delivery_of_a_job_deferred_again_is_stale(store: MemoryStore, clock: FakeClock) -> None:
    job = store.add("job-1")
    store.jobs["job-1"] = dataclasses.replace(job, state=State.DEFERRED)
    outcome = processor_for(store, clock, Script()).process(delivery())
    assert outcome.kind is OutcomeKind.STALE and outcome.acknowledged


class _Crash(BaseException):
    """The process going away mid-action (what a SIGKILL looks like to a thread)."""


def test_an_action_that_dies_leaves_no_heartbeat_thread_behind(
    store: MemoryStore, clock: FakeClock
) -> None:
    import threading

    store.add("job-1")

    def dies(request: ActionRequest) -> ActionResult:
        raise _Crash()

    registry = ActionRegistry([Action("media.delete_source", dies, RetryPolicy())])
    processor = Processor(store, registry, clock, lease=LEASE, worker_id="w-1")
    with pytest.raises(_Crash):
        processor.process(delivery())
    assert not [t for t in threading.enumerate() if t.name == "lease-heartbeat"]


def test_retry_after_defers_by_its_delay_in_the_same_attempt_and_pauses_the_action_once(
    store: MemoryStore, clock: FakeClock, caplog: pytest.LogCaptureFixture
) -> None:
    store.add("job-1")
    store.add("job-2")
    script = Script(RetryAfter(30))
    processor = processor_for(store, clock, script)
    caplog.set_level(logging.WARNING)
    outcomes = [processor.process(delivery(job_id)) for job_id in ("job-1", "job-2")]
    until = START + timedelta(seconds=30)
    for outcome, job_id in zip(outcomes, ("job-1", "job-2"), strict=True):
        assert outcome.kind is OutcomeKind.DEFERRED and outcome.acknowledged
        job = store.jobs[job_id]
        assert job.state is State.DEFERRED and job.due_at == until
        assert job.attempt == 1  # the dependency refused the job; no attempt was spent
    # The dependency is called once: job-2 comes while the pause holds and waits without a call.
    assert script.runs == 1
    assert [store.jobs[j].last_error.code for j in ("job-1", "job-2")] == ["retry_after", "paused"]
    # One pause for the action, written once for the burst, not once per job.
    assert store.pauses == {"media.delete_source": until}
    assert store.pause_writes == 1
    assert store.calls.count("record_action_pause") == 1
    paused = [r for r in caplog.records if getattr(r, "fields", {}).get("event") == "action_paused"]
    assert len(paused) == 1 and paused[0].fields["action"] == "media.delete_source"
    # Once the pause has ended, the dependency is called again.
    store.add("job-3")
    clock.advance(timedelta(seconds=31))
    assert processor.process(delivery("job-3")).kind is OutcomeKind.COMPLETED
    assert script.runs == 2


def test_a_pause_of_one_target_holds_that_targets_jobs_only(
    store: MemoryStore, clock: FakeClock
) -> None:
    for job_id, target in (("t-1", "trials"), ("t-2", "trials"), ("b-1", "billing")):
        store.add(job_id, params={"target": target, "path": "/x"})
    script = Script(RetryAfter(30, target="trials"))
    processor = processor_for(store, clock, script)
    outcomes = {job_id: processor.process(delivery(job_id)) for job_id in ("t-1", "t-2", "b-1")}
    assert outcomes["t-2"].kind is OutcomeKind.DEFERRED
    assert store.jobs["t-2"].last_error is not None
    assert store.jobs["t-2"].last_error.code == "paused"
    assert outcomes["b-1"].kind is OutcomeKind.COMPLETED
    assert script.runs == 2  # t-1 (answered 429) and b-1; t-2 was never called


def test_retry_after_naming_a_target_pauses_that_targets_lane_only(
    store: MemoryStore, clock: FakeClock, caplog: pytest.LogCaptureFixture
) -> None:
    # What http.request raises on a 429 from one of its targets (services/worker/http_request.py).
    store.add("job-1")
    store.add("job-2")
    busy = RetryAfter(30, target="trials")
    processor = processor_for(store, clock, Script(busy, RetryAfter(30, target="billing")))
    caplog.set_level(logging.WARNING)
    for job_id in ("job-1", "job-2"):
        processor.process(delivery(job_id))
    until = START + timedelta(seconds=30)
    # One pause per target (key action/target), none for the action as a whole.
    assert store.pauses == {
        "media.delete_source/trials": until,
        "media.delete_source/billing": until,
    }
    paused = [r for r in caplog.records if getattr(r, "fields", {}).get("event") == "action_paused"]
    assert [(r.fields["action"], r.fields["target"]) for r in paused] == [
        ("media.delete_source", "trials"),
        ("media.delete_source", "billing"),
    ]
