"""The state table, pair by pair, through the pure apply_transition."""

import dataclasses
import itertools
from datetime import UTC, datetime, timedelta

import pytest

from services.jobs.errors import AlreadyTerminal, InvalidTransition
from services.jobs.model import NewJob
from services.jobs.record import Job
from services.jobs.state import (
    TERMINAL,
    TRANSITIONS,
    HistoryEntry,
    Role,
    State,
    apply_transition,
)

T0 = datetime(2026, 1, 1, tzinfo=UTC)

# Written out independently of TRANSITIONS: the design's table (docs/state-machine.md).
EXPECTED: dict[tuple[str, str], set[str]] = {
    ("deferred", "claimed"): {"scan"},
    ("deferred", "cancelled"): {"operator"},
    ("deferred", "deferred"): {"operator"},
    ("claimed", "enqueued"): {"scan"},
    ("claimed", "deferred"): {"scan", "reclaimer"},
    ("claimed", "running"): {"worker"},
    ("claimed", "cancelled"): {"operator"},
    ("enqueued", "running"): {"worker"},
    ("enqueued", "cancelled"): {"operator"},
    ("enqueued", "deferred"): {"reclaimer"},
    ("running", "completed"): {"worker"},
    ("running", "deferred"): {"worker", "reclaimer"},
    ("running", "enqueued"): {"worker"},
    ("running", "failed"): {"worker", "reclaimer"},
    ("running", "cancelled"): {"worker", "reclaimer"},
    ("running", "running"): {"worker"},
}


def job_in(state: State) -> Job:
    new = NewJob("job-1", "media.delete_source", "m1", T0, {"object": "m1/source.mp4"}).validated()
    return dataclasses.replace(Job.create(new, T0), state=state)


ALL_CASES = [
    (current, to, role) for current, to in itertools.product(State, State) for role in Role
]


def test_the_table_is_exactly_the_designed_one() -> None:
    actual = {(a.value, b.value): {o.value for o in t.owners} for (a, b), t in TRANSITIONS.items()}
    assert actual == EXPECTED


def test_no_transition_leaves_a_terminal_state() -> None:
    assert not [pair for pair in TRANSITIONS if pair[0] in TERMINAL]
    assert {s for s in State if s.terminal} == {State.COMPLETED, State.CANCELLED, State.FAILED}


@pytest.mark.parametrize(("current", "to", "role"), ALL_CASES)
def test_every_pair_and_role_is_allowed_only_as_the_table_says(
    current: State, to: State, role: Role
) -> None:
    job = job_in(current)
    at = T0 + timedelta(minutes=1)
    allowed = role.value in EXPECTED.get((current.value, to.value), set())
    if allowed:
        moved = apply_transition(job, to, role=role, by="me", at=at, reason="because")
        assert moved.state is to
        assert moved.updated_at == at
        last = moved.history[-1]
        assert (last.from_state, last.to_state, last.by, last.reason) == (
            current,
            to,
            f"{role.value}:me",
            "because",
        )
    else:
        expected_error = AlreadyTerminal if current in TERMINAL else InvalidTransition
        with pytest.raises(expected_error) as caught:
            apply_transition(job, to, role=role, by="me", at=at, reason="because")
        message = str(caught.value)
        assert "job-1" in message
        assert repr(current.value) in message
        assert repr(to.value) in message
        assert (caught.value.job_id, caught.value.current, caught.value.requested) == (
            "job-1",
            current,
            to,
        )


def test_apply_transition_is_pure_and_applies_the_changes() -> None:
    job = job_in(State.DEFERRED)
    later = T0 + timedelta(days=3)
    moved = apply_transition(
        job, State.DEFERRED, role=Role.OPERATOR, by="ops", at=T0, reason="r", due_at=later
    )
    assert moved.due_at == later
    assert job.due_at == T0
    assert job.history == ()


def test_history_keeps_only_the_newest_entries() -> None:
    job = job_in(State.DEFERRED)
    for minute in range(30):
        job = apply_transition(
            job,
            State.DEFERRED,
            role=Role.OPERATOR,
            by="ops",
            at=T0 + timedelta(minutes=minute),
            reason=f"move {minute}",
            history_limit=5,
        )
    assert [e.reason for e in job.history] == [f"move {m}" for m in range(25, 30)]


def _created(job: Job) -> Job:
    entry = HistoryEntry(T0, None, State.DEFERRED, "application:app", "scheduled")
    return dataclasses.replace(job, history=(entry,))


def test_history_keeps_the_creation_entry_however_many_moves_follow() -> None:
    # Finding 9: the 20-entry history dropped the creation entry within a job's retry life.
    job = _created(job_in(State.DEFERRED))
    for minute in range(30):
        job = apply_transition(
            job,
            State.DEFERRED,
            role=Role.OPERATOR,
            by="ops",
            at=T0 + timedelta(minutes=minute),
            reason=f"move {minute}",
            history_limit=5,
        )
    assert [e.reason for e in job.history] == ["scheduled"] + [f"move {m}" for m in range(26, 30)]


def test_history_is_bounded_by_bytes_and_each_reason_is_shortened() -> None:
    job = _created(job_in(State.DEFERRED))
    for minute in range(20):
        job = apply_transition(
            job,
            State.DEFERRED,
            role=Role.OPERATOR,
            by="ops",
            at=T0 + timedelta(minutes=minute),
            reason=f"{minute} " + "x" * 100_000,
            history_max_bytes=4096,
        )
    assert job.history[0].reason == "scheduled"
    assert all(len(e.reason.encode()) <= 1024 for e in job.history)
    assert sum(len(e.reason.encode()) for e in job.history) <= 4096
    assert job.history[-1].reason.startswith("19 ")
    assert len(job.history) >= 2


def test_a_role_that_does_not_own_the_transition_is_named_in_the_refusal() -> None:
    with pytest.raises(InvalidTransition, match="belongs to reclaimer, scan, not operator"):
        apply_transition(
            job_in(State.CLAIMED), State.DEFERRED, role=Role.OPERATOR, by="x", at=T0, reason=""
        )
