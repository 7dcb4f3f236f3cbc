"""The state machine: the states, the one TRANSITIONS table, and the pure function applying it.

This module is the only place the rules live. The store loads a job, calls
`apply_transition`, and writes the result in the same Firestore transaction; nothing else
decides which moves are allowed or who may make them.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from enum import StrEnum
from typing import TYPE_CHECKING, Any

from services.jobs.errors import AlreadyTerminal, InvalidTransition
from services.jobs.limits import MAX_REASON_BYTES, bounded_text

if TYPE_CHECKING:
    from services.jobs.record import Job

DEFAULT_HISTORY_LIMIT = 20
# The history's byte bound (its entries as stored, reasons already bounded): with the count,
# it keeps the document far below Firestore's 1 MiB whatever the reasons say.
DEFAULT_HISTORY_MAX_BYTES = 16 * 1024


class State(StrEnum):
    # Waiting for due_at. Out: scan claims it; operator cancels or reschedules it.
    DEFERRED = "deferred"
    # A scan run owns it; publish outcome not yet recorded. Out: scan (enqueued / back to
    # deferred on publish failure); reclaimer after the claim timeout; worker if the push
    # arrived first; operator cancels.
    CLAIMED = "claimed"
    # Its ID is on the queue. Out: worker starts it; operator cancels; reclaimer (reclaim_enqueued)
    # when it stayed enqueued past the enqueued timeout with no start (the message is lost).
    ENQUEUED = "enqueued"
    # A worker holds a lease and is doing the side effect. Out: worker (completed, deferred,
    # enqueued, failed, cancelled); reclaimer when the lease expired (cancelled when a cancel
    # was requested).
    RUNNING = "running"
    # Terminal: the side effect is done. Nobody moves it out.
    COMPLETED = "completed"
    # Terminal: an operator cancelled it (or a worker honoured the request). Nobody.
    CANCELLED = "cancelled"
    # Terminal: retry cycles exhausted or a permanent error. Nobody (re-schedule as a new job).
    FAILED = "failed"

    @property
    def terminal(self) -> bool:
        return self in TERMINAL


TERMINAL: frozenset[State] = frozenset({State.COMPLETED, State.CANCELLED, State.FAILED})


class Role(StrEnum):
    """Who may make a transition; the history's `by` is `<role>:<identity>`."""

    APPLICATION = "application"
    SCAN = "scan"
    RECLAIMER = "reclaimer"
    WORKER = "worker"
    OPERATOR = "operator"


@dataclass(frozen=True)
class Transition:
    name: str
    owners: frozenset[Role]
    why: str


def _t(name: str, *owners: Role, why: str) -> Transition:
    return Transition(name, frozenset(owners), why)


_D, _CL, _E, _R = State.DEFERRED, State.CLAIMED, State.ENQUEUED, State.RUNNING
_SCAN, _RECLAIMER, _WORKER, _OPERATOR = Role.SCAN, Role.RECLAIMER, Role.WORKER, Role.OPERATOR

# (from, to) → name, owners, why. Every move not listed here is refused.
TRANSITIONS: dict[tuple[State, State], Transition] = {
    (_D, _CL): _t("claim", _SCAN, why="due_at passed; a scan run takes it (generation + 1)"),
    (_D, State.CANCELLED): _t("cancel", _OPERATOR, why="operator cancels before it is due"),
    (_D, _D): _t("reschedule", _OPERATOR, why="operator moves due_at"),
    (_CL, _E): _t("mark_enqueued", _SCAN, why="publish acknowledged with a message ID"),
    (_CL, _D): _t(
        "unclaim",
        _SCAN,
        _RECLAIMER,
        why="publish failed (scan), or the claim is older than the claim timeout (reclaimer)",
    ),
    (_CL, _R): _t("start", _WORKER, why="the push reached a worker before enqueued was recorded"),
    (_CL, State.CANCELLED): _t("cancel", _OPERATOR, why="operator cancels a claimed job"),
    (_E, _R): _t("start", _WORKER, why="a worker takes the lease"),
    (_E, State.CANCELLED): _t("cancel", _OPERATOR, why="operator cancels a queued job"),
    (_E, _D): _t(
        "reclaim_enqueued",
        _RECLAIMER,
        why="enqueued longer than the enqueued timeout with no start: its message is lost; "
        "the next claim publishes it again under generation + 1",
    ),
    (_R, State.COMPLETED): _t("complete", _WORKER, why="done; result and idempotency recorded"),
    (_R, _D): _t(
        "retry_later",
        _WORKER,
        _RECLAIMER,
        why="the next retry cycle (attempt + 1): the worker defers to a new due_at, or the "
        "reclaimer finds the lease expired",
    ),
    (_R, _E): _t(
        "release", _WORKER, why="transient error; Pub/Sub redelivers the message (same attempt)"
    ),
    (_R, State.FAILED): _t(
        "fail",
        _WORKER,
        _RECLAIMER,
        why="permanent error or no retry cycle left (worker); lease expired in the last cycle",
    ),
    (_R, State.CANCELLED): _t(
        "cancel_running",
        _WORKER,
        _RECLAIMER,
        why="a cancel was requested: the worker honours it (before acting, at a deadline "
        "check, or instead of a retry), or the reclaimer finds the lease expired",
    ),
    (_R, _R): _t(
        "take_over",
        _WORKER,
        why="the previous delivery's lease expired (same generation; attempt + 1, as when "
        "the reclaimer finds it), or the lease holder heartbeats (extend_lease)",
    ),
}

del _D, _CL, _E, _R, _SCAN, _RECLAIMER, _WORKER, _OPERATOR


@dataclass(frozen=True)
class HistoryEntry:
    """One audited transition, as stored in the job's bounded `history` list."""

    at: datetime
    from_state: State | None  # None for the creation entry
    to_state: State
    by: str
    reason: str

    def to_document(self) -> dict[str, Any]:
        return {
            "at": self.at,
            "from": self.from_state.value if self.from_state else None,
            "to": self.to_state.value,
            "by": self.by,
            "reason": self.reason,
        }

    @classmethod
    def from_document(cls, data: dict[str, Any]) -> HistoryEntry:
        raw_from = data.get("from")
        if not isinstance(data["at"], datetime):
            raise TypeError("a history entry's at is not a timestamp")
        return cls(
            at=data["at"],
            from_state=State(raw_from) if raw_from else None,
            to_state=State(data["to"]),
            by=str(data.get("by", "")),
            reason=str(data.get("reason", "")),
        )


def check_transition(job_id: str, current: State, to: State, role: Role) -> Transition:
    """The transition from `current` to `to` by `role`, or InvalidTransition / AlreadyTerminal."""
    transition = TRANSITIONS.get((current, to))
    if transition is None:
        if current.terminal:
            raise AlreadyTerminal(job_id, current, to)
        raise InvalidTransition(job_id, current, to)
    if role not in transition.owners:
        owners = ", ".join(sorted(o.value for o in transition.owners))
        raise InvalidTransition(
            job_id, current, to, f"{transition.name} belongs to {owners}, not {role.value}"
        )
    return transition


def apply_transition(
    job: Job,
    to: State,
    *,
    role: Role,
    by: str,
    at: datetime,
    reason: str,
    history_limit: int = DEFAULT_HISTORY_LIMIT,
    history_max_bytes: int = DEFAULT_HISTORY_MAX_BYTES,
    **changes: Any,
) -> Job:
    """Return `job` moved to `to` with `changes`, a history entry and updated_at = `at`.

    Raises InvalidTransition (AlreadyTerminal from a terminal state) naming the job, its
    current state and the requested one. Pure: nothing is written.
    """
    check_transition(job.job_id, job.state, to, role)
    entry = HistoryEntry(at, job.state, to, f"{role.value}:{by}", _bounded(reason))
    history = bounded_history((*job.history, entry), history_limit, history_max_bytes)
    return job.replaced(**changes, state=to, updated_at=at, history=history)


def bounded_history(
    entries: tuple[HistoryEntry, ...], limit: int, max_bytes: int = DEFAULT_HISTORY_MAX_BYTES
) -> tuple[HistoryEntry, ...]:
    """The newest entries within `limit` entries and `max_bytes`, the creation entry (the
    first, from = null) always kept: how the job began is the one fact no count may drop."""
    if limit <= 0 or not entries:
        return ()
    first, rest = (entries[0], entries[1:]) if entries[0].from_state is None else (None, entries)
    kept: list[HistoryEntry] = []
    budget = max_bytes - (_entry_bytes(first) if first else 0)
    room = limit - (1 if first else 0)
    for entry in reversed(rest):
        size = _entry_bytes(entry)
        if len(kept) >= room or (kept and size > budget):
            break
        kept.append(entry)
        budget -= size
    kept.reverse()
    return (first, *kept) if first else tuple(kept)


def _entry_bytes(entry: HistoryEntry) -> int:
    return len(entry.by.encode()) + len(entry.reason.encode()) + 64  # + at, from, to, keys


def _bounded(reason: str) -> str:
    return bounded_text(reason, MAX_REASON_BYTES)
