"""The action registry: a job's `action` name → the callable that performs the side effect.

Each action comes with its `RetryPolicy`: how long to wait when its dependency stays down
(the founding case: 30 days), after how many Pub/Sub deliveries a transient failure stops being
retried soon and becomes a retry much later (below the dead-letter limit, so the message is
acknowledged before Pub/Sub dead-letters it), and optionally a lower cap on attempts than the
job's own `max_attempts`. An attempt is one retry cycle: the job's first due time, then each
long retry; the quick redeliveries inside a cycle do not count.

An action receives an `ActionRequest` (never the raw job record) and returns an `ActionResult`,
or raises `TransientError` / `DependencyDown` / `PermanentError`. It must be safe to run again
after a crash: the worker records its result only after it returns. An action made of several
units of work checks `request.deadline.reached()` between them and, when reached, raises
`Interrupted` with what it finished; the next delivery gets that back as `request.progress`.
"""

from __future__ import annotations

import datetime
from collections.abc import Callable, Iterable, Iterator, Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from services.worker.deadline import Deadline

DEFAULT_LONG_RETRY_DELAY = datetime.timedelta(days=30)
# Pub/Sub's smallest dead-letter limit is 5 deliveries: decide on the 4th, before it is lost.
DEFAULT_RETRY_LATER_AFTER_ATTEMPTS = 4


@dataclass(frozen=True)
class RetryPolicy:
    """How an action's failures are retried."""

    long_retry_delay: datetime.timedelta = DEFAULT_LONG_RETRY_DELAY
    retry_later_after_attempts: int = DEFAULT_RETRY_LATER_AFTER_ATTEMPTS
    # None: the job's own max_attempts; a number caps it lower for this action (retry cycles).
    max_attempts: int | None = None

    def __post_init__(self) -> None:
        if self.long_retry_delay <= datetime.timedelta(0):
            raise ValueError("long_retry_delay must be positive")
        if self.retry_later_after_attempts < 1:
            raise ValueError("retry_later_after_attempts must be at least 1")
        if self.max_attempts is not None and self.max_attempts < 1:
            raise ValueError("max_attempts must be at least 1")


@dataclass(frozen=True)
class ActionRequest:
    """What an action may know about its job."""

    job_id: str
    action: str
    subject: str
    params: Mapping[str, Any]
    attempt: int  # the job's retry cycle, from 1 (the same in every redelivery of a cycle)
    idempotency_key: str
    # What an earlier, interrupted delivery finished (None: nothing yet).
    progress: Mapping[str, Any] | None = None
    # When to stop between units of work; None: no deadline (the action runs to the end).
    deadline: Deadline | None = None

    def should_stop(self) -> bool:
        """Whether the action must stop before its next unit of work."""
        return self.deadline is not None and self.deadline.reached()


@dataclass(frozen=True)
class ActionResult:
    """What the side effect did: a short `outcome` code and small JSON-safe details."""

    outcome: str
    details: Mapping[str, Any] = field(default_factory=dict)


ActionFn = Callable[[ActionRequest], ActionResult]


@dataclass(frozen=True)
class Action:
    """A named side effect and its retry policy."""

    name: str
    run: ActionFn
    policy: RetryPolicy = RetryPolicy()


class ActionRegistry:
    """The actions one worker can run, by name."""

    def __init__(self, actions: Iterable[Action] = ()) -> None:
        self._actions: dict[str, Action] = {}
        for action in actions:
            self.register(action)

    def register(self, action: Action) -> None:
        if action.name in self._actions:
            raise ValueError(f"action {action.name!r} is registered twice")
        self._actions[action.name] = action

    def get(self, name: str) -> Action | None:
        return self._actions.get(name)

    def __contains__(self, name: object) -> bool:
        return name in self._actions

    def __iter__(self) -> Iterator[Action]:
        return iter(self._actions.values())

    def names(self) -> list[str]:
        return sorted(self._actions)
