"""The deadline an action works against and the heartbeat that moves it (pure logic, fakes)."""

from __future__ import annotations

import dataclasses
import threading
import time
from datetime import UTC, datetime, timedelta

from services.jobs.clock import FakeClock
from services.jobs.errors import LeaseHeld, LeaseLost, StoreUnavailable
from services.jobs.model import NewJob
from services.jobs.parts import CancelRequest, Lease
from services.jobs.record import Job
from services.jobs.state import State
from services.worker.deadline import (
    STOP_CANCEL,
    STOP_DEADLINE,
    STOP_LEASE_LOST,
    Heartbeat,
    HeartbeatStarter,
)

T0 = datetime(2026, 1, 1, tzinfo=UTC)
LEASE = timedelta(seconds=60)
MARGIN = timedelta(seconds=5)


def running_job(clock: FakeClock) -> Job:
    job = Job.create(
        NewJob("j", "media.delete_source", "m", T0, {"object": "m/source.mp4"}).validated(), T0
    )
    return dataclasses.replace(
        job,
        state=State.RUNNING,
        lease_owner="w/m-1",
        lease_token="t-1",
        lease_until=clock.now() + LEASE,
    )


class LeaseStore:
    def __init__(self, clock: FakeClock, job: Job) -> None:
        self.clock = clock
        self.job = job
        self.calls: list[Lease] = []
        self.fail_with: Exception | None = None

    def extend_lease(self, lease: Lease, duration: timedelta) -> Job:
        self.calls.append(lease)
        if self.fail_with is not None:
            raise self.fail_with
        self.job = dataclasses.replace(self.job, lease_until=self.clock.now() + duration)
        return self.job


def heartbeat(clock: FakeClock, store: LeaseStore, delivery_s: float = 600) -> Heartbeat:
    return Heartbeat(
        store,
        clock,
        store.job,
        lease=LEASE,
        margin=MARGIN,
        delivery_until=clock.now() + timedelta(seconds=delivery_s),
    )


def test_a_check_beats_every_third_of_a_lease_and_moves_the_deadline() -> None:
    clock = FakeClock(T0)
    store = LeaseStore(clock, running_job(clock))
    beat = heartbeat(clock, store)
    assert not beat.deadline.reached() and store.calls == []  # not due yet
    clock.advance(LEASE / 3)
    assert not beat.deadline.reached()
    assert len(store.calls) == 1
    assert beat.deadline.stop_at == clock.now() + LEASE - MARGIN
    assert beat.lease.until == clock.now() + LEASE


def test_without_a_successful_beat_the_deadline_stops_the_action_before_the_lease_ends() -> None:
    clock = FakeClock(T0)
    store = LeaseStore(clock, running_job(clock))
    store.fail_with = StoreUnavailable("firestore down")
    beat = heartbeat(clock, store)
    clock.advance(LEASE - MARGIN - timedelta(seconds=1))
    assert not beat.deadline.reached()
    clock.advance(timedelta(seconds=1))
    assert beat.deadline.reached() and beat.deadline.why == STOP_DEADLINE


def test_a_lost_lease_stops_at_once_and_a_cancel_request_too() -> None:
    clock = FakeClock(T0)
    store = LeaseStore(clock, running_job(clock))
    store.fail_with = LeaseLost("j", "w/m-1", "w/m-2")
    beat = heartbeat(clock, store)
    clock.advance(LEASE / 3)
    assert beat.deadline.reached() and beat.deadline.why == STOP_LEASE_LOST

    clock = FakeClock(T0)
    store = LeaseStore(clock, running_job(clock))
    beat = heartbeat(clock, store)
    store.job = dataclasses.replace(store.job, cancel_requested=CancelRequest("x", "op:a", T0))
    clock.advance(LEASE / 3)
    assert beat.deadline.reached() and beat.deadline.why == STOP_CANCEL


def test_the_delivery_limit_stops_even_a_well_kept_lease() -> None:
    clock = FakeClock(T0)
    store = LeaseStore(clock, running_job(clock))
    beat = heartbeat(clock, store, delivery_s=100)
    for _ in range(4):
        clock.advance(timedelta(seconds=20))
        assert not beat.deadline.reached()
    clock.advance(timedelta(seconds=20))
    assert beat.deadline.reached() and beat.deadline.why == STOP_DEADLINE


def test_no_beat_after_stop() -> None:
    clock = FakeClock(T0)
    store = LeaseStore(clock, running_job(clock))
    beat = heartbeat(clock, store).start(poll_s=0.01)
    beat.stop()
    clock.advance(LEASE)
    beat.beat_if_due()
    assert store.calls == []


def _heartbeat_threads() -> list[threading.Thread]:
    return [t for t in threading.enumerate() if t.name == "lease-heartbeat"]


def test_a_heartbeat_stopped_within_the_delay_never_gets_a_thread() -> None:
    clock = FakeClock(T0)
    starter = HeartbeatStarter(poll_s=0.2)
    beats = [heartbeat(clock, LeaseStore(clock, running_job(clock))) for _ in range(20)]
    for beat in beats:
        beat.start_later(starter)
    assert starter.pending == 20
    for beat in beats:
        beat.stop()
    assert starter.pending == 0  # withdrawn at once: nothing kept for the delay
    time.sleep(0.4)
    assert _heartbeat_threads() == []


def test_a_long_action_gets_its_thread_after_the_delay_and_it_beats() -> None:
    clock = FakeClock(T0)
    store = LeaseStore(clock, running_job(clock))
    starter = HeartbeatStarter(poll_s=0.05)
    beat = heartbeat(clock, store).start_later(starter)
    clock.advance(LEASE / 3)  # a beat is due; only a background check can make it now
    deadline = time.monotonic() + 10
    while not store.calls:
        assert time.monotonic() < deadline, "the heartbeat thread never beat"
        time.sleep(0.01)
    assert starter.pending == 0 and len(_heartbeat_threads()) == 1
    beat.stop()
    assert _heartbeat_threads() == []  # stop joined it
    beats = len(store.calls)
    clock.advance(LEASE)
    time.sleep(0.2)
    assert len(store.calls) == beats  # no beat after stop


def test_the_starter_serves_heartbeats_added_after_it_went_idle() -> None:
    clock = FakeClock(T0)
    starter = HeartbeatStarter(poll_s=0.02)
    for _ in range(2):
        store = LeaseStore(clock, running_job(clock))
        beat = heartbeat(clock, store).start_later(starter)
        clock.advance(LEASE / 3)
        deadline = time.monotonic() + 10
        while not store.calls:
            assert time.monotonic() < deadline, "the heartbeat thread never beat"
            time.sleep(0.01)
        beat.stop()


def test_a_beat_that_keeps_failing_backs_off_exponentially() -> None:
    # Issue 24 finding 9: a shared key held by another job (LeaseHeld) was asked again every
    # second for the rest of the lease: 20 beats in 20 s. Now 1, 2, 4, 8 s apart.
    clock = FakeClock(T0)
    store = LeaseStore(clock, running_job(clock))
    store.fail_with = LeaseHeld("j", "other-job", clock.now() + LEASE)
    beat = heartbeat(clock, store)
    clock.advance(LEASE / 3)
    for _ in range(20):  # a deadline check every second for 19 s after the first beat
        beat.deadline.reached()
        clock.advance(timedelta(seconds=1))
    assert len(store.calls) == 5  # at 0, +1, +3, +7, +15 s
    store.fail_with = None
    clock.advance(timedelta(seconds=16))
    beat.deadline.reached()
    assert beat.beats == 1  # a success resets the backoff
    store.fail_with = StoreUnavailable("down")
    clock.advance(LEASE / 3)
    beat.deadline.reached()
    clock.advance(timedelta(seconds=1))
    beat.deadline.reached()
    assert len(store.calls) == 8  # retried a second after the first failure again
