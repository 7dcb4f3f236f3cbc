"""`ActionRequest.record_progress` as the worker binds it: the action's write-ahead is written
under the delivery's lease before the action goes on, and a write that cannot be made stops the
action before it acts (issue 33, finding 1)."""

from __future__ import annotations

from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from services.jobs.actions import Action, ActionRequest, ActionResult, RetryPolicy
from services.jobs.clock import FakeClock
from services.jobs.errors import StoreUnavailable
from services.jobs.state import State
from services.worker.actions import ActionRegistry
from services.worker.envelope import Delivery
from services.worker.processor import OutcomeKind, Processor
from tests.unit.worker.fakes import MemoryStore

START = datetime(2026, 1, 1, tzinfo=UTC)
LEASE = timedelta(seconds=60)
PLAN = {"generations": {"a": "17"}}


def process(store: MemoryStore, clock: FakeClock, action: Callable[..., ActionResult]) -> Any:
    registry = ActionRegistry([Action("media.delete_source", action, RetryPolicy())])
    processor = Processor(store, registry, clock, lease=LEASE, worker_id="w-1")
    return processor.process(Delivery("job-1", 1, "run-1", 1))


def test_recorded_progress_is_in_the_job_before_the_action_acts() -> None:
    clock = FakeClock(START)
    store = MemoryStore(clock)
    store.add("job-1")
    seen: list[Any] = []

    def action(request: ActionRequest) -> ActionResult:
        request.record_progress(PLAN)
        job = store.jobs["job-1"]
        seen.append((job.state, job.progress, job.lease_token))
        return ActionResult("deleted")

    outcome = process(store, clock, action)

    assert outcome.kind is OutcomeKind.COMPLETED
    [(state, progress, token)] = seen
    assert (state, progress) == (State.RUNNING, PLAN) and token is not None
    assert store.calls == ["start", "save_progress", "complete"]
    assert store.jobs["job-1"].progress is None  # complete clears it


def test_a_lost_lease_stops_the_action_before_it_acts_and_answers_stale() -> None:
    clock = FakeClock(START)
    store = MemoryStore(clock)
    store.add("job-1")
    acted: list[str] = []

    def action(request: ActionRequest) -> ActionResult:
        # Another delivery takes the lapsed lease over while this one was slow.
        clock.advance(LEASE + timedelta(seconds=1))
        store.start("job-1", 1, LEASE, "w-2")
        request.record_progress(PLAN)
        acted.append("deleted")
        return ActionResult("deleted")

    outcome = process(store, clock, action)

    assert outcome.kind is OutcomeKind.STALE and outcome.acknowledged
    assert acted == []
    job = store.jobs["job-1"]
    assert (job.state, job.lease_owner, job.progress) == (State.RUNNING, "w-2", None)


def test_progress_firestore_did_not_take_is_a_transient_failure_and_nothing_is_acted_on(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    clock = FakeClock(START)
    store = MemoryStore(clock)
    store.add("job-1")
    acted: list[str] = []

    def down(*_args: Any, **_kwargs: Any) -> Any:
        raise StoreUnavailable("Firestore is down")

    monkeypatch.setattr(store, "save_progress", down)

    def action(request: ActionRequest) -> ActionResult:
        request.record_progress(PLAN)
        acted.append("deleted")
        return ActionResult("deleted")

    outcome = process(store, clock, action)

    assert outcome.kind is OutcomeKind.RETRY and not outcome.acknowledged
    assert acted == []
    assert store.jobs["job-1"].state is State.ENQUEUED


def test_without_a_recorder_record_progress_does_nothing() -> None:
    request = ActionRequest("j", "media.delete_source", "m", {}, 1, "k")
    request.record_progress(PLAN)  # a test or a dry run: no store behind it
