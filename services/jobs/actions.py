"""What an action is: its declaration (`Action`), and the contract between the worker and the
callable that performs the side effect (`ActionRequest` in, `ActionResult` out).

An action is declared once, in one place, and every component reads that declaration from the
catalogue (`services.jobs.catalogue`): its `name`, the callable (`run`, or a `build` that makes
it from the worker's deployment), its `params` schema (checked when a job is scheduled), its
retry `policy`, its `budget` (the rate its jobs may be claimed at) and what it `needs` from the
deployment (settings, IAM grants). A user's own package declares its actions the same way and
names each in the entry-point group `deferred_jobs.actions` (docs/actions.md).

The callable receives an `ActionRequest` (never the raw job record) and returns an
`ActionResult`, or raises `TransientError` / `DependencyDown` / `PermanentError`
(`services.jobs.errors`). It must be safe to run again after a crash: the worker records its
result only after it returns. An action made of several units of work checks
`request.should_stop()` between them and, when it is true, raises `Interrupted` with what it
finished; the next delivery gets that back as `request.progress`.

**Write ahead what you are about to act on.** A delivery can act and then lose its outcome
(killed, or Firestore down past the lease), and a later delivery of the job (the same attempt
or the next, a take-over included) runs the action again. When what it acts on can change in
between (an object re-uploaded), the action calls `request.record_progress(progress)` with its
decision (generations, versions, ETags: the fence it will act under) **before** the side
effect, and acts only once that call returned. The worker writes it into the job's `progress`
under the delivery's lease without ending the delivery (the store's `save_progress`: refused,
raising `LeaseLost`, when the lease moved on, so the action must not act then). Every later
delivery gets it back as `request.progress` until the job completes, and acts on exactly that
fence or not at all. `record_progress` raises `TransientError` when the write could not be
made (nothing was recorded: do not act). Each call is one more billed Firestore write.

`run` and `build` may be given as a reference, `"package.module:attribute"`, resolved only by
the worker: the API, `jobsctl` and the store read a declaration without importing what the
side effect needs (a storage client, an HTTP library).
"""

from __future__ import annotations

import datetime
import re
from collections.abc import Callable, Mapping
from dataclasses import KW_ONLY, dataclass, field
from typing import Any, Protocol

from services.jobs.params import ParamsSchema

DEFAULT_LONG_RETRY_DELAY = datetime.timedelta(days=30)
# Pub/Sub's smallest dead-letter limit is 5 deliveries: decide on the 4th, before it is lost.
DEFAULT_RETRY_LATER_AFTER_ATTEMPTS = 4

# An action's name: dotted lower-case words (`media.delete_source`, `trials.expire`). It is part
# of every job ID and idempotency key derived from it, so it never changes once jobs use it.
ACTION_NAME = re.compile(r"^[a-z][a-z0-9_]*(\.[a-z][a-z0-9_]*)+\Z")
MAX_ACTION_NAME_BYTES = 128
# `package.module:attribute`, as an entry point's value.
REFERENCE = re.compile(r"^[A-Za-z_][\w.]*:[A-Za-z_][\w.]*\Z")


@dataclass(frozen=True)
class RetryPolicy:
    """How an action's failures are retried.

    An attempt is one retry cycle: the job's first due time, then each long retry; the quick
    redeliveries inside a cycle do not count. After `retry_later_after_attempts` Pub/Sub
    deliveries (below the dead-letter limit, so the message is acknowledged before Pub/Sub
    dead-letters it) a transient failure becomes a retry `long_retry_delay` later (the founding
    case: 30 days); `max_attempts` optionally caps the job's own `max_attempts` lower."""

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
class Budget:
    """The downstream pressure an action's jobs may put on their dependency: at most
    `per_second` of its jobs claimed per second (the enqueue budget), beside the global
    catch-up rate. Declared here; the scan's per-action claims read it (issue 32, item 4)."""

    per_second: float

    def __post_init__(self) -> None:
        if not self.per_second > 0:
            raise ValueError("a budget's per_second must be positive")


@dataclass(frozen=True)
class Grant:
    """What the worker's service account needs on one resource: a predefined `role`, or the
    IAM `permissions` a custom role gets. `resource` names the resource as the stack does:
    `bucket:<stack setting>`, `run-service:<name>`, `project`."""

    resource: str
    role: str | None = None
    permissions: tuple[str, ...] = ()


@dataclass(frozen=True)
class Needs:
    """What an action needs from the deployment: the worker settings (environment variable
    names) it reads, and IAM grants for the worker's account. The infra and docs read it."""

    settings: tuple[str, ...] = ()
    grants: tuple[Grant, ...] = ()


class StopSignal(Protocol):
    """When a delivery must stop between units of work (the worker's `Deadline`)."""

    def reached(self) -> bool: ...


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
    deadline: StopSignal | None = None
    # Makes `progress` durable in the job before the action acts on it (write-ahead, see the
    # module docstring); the worker binds it to the delivery's lease. None: nothing records
    # (a test, a dry run): `record_progress` then does nothing.
    progress_recorder: Callable[[Mapping[str, Any]], None] | None = None

    def should_stop(self) -> bool:
        """Whether the action must stop before its next unit of work."""
        return self.deadline is not None and self.deadline.reached()

    def record_progress(self, progress: Mapping[str, Any]) -> None:
        """Write `progress` into the job before acting on it; the next delivery of this job,
        whatever became of this one, gets it back as `request.progress`. Raises LeaseLost
        (this delivery no longer holds the job) or TransientError (not recorded): either way,
        do not act on it."""
        if self.progress_recorder is not None:
            self.progress_recorder(progress)


@dataclass(frozen=True)
class ActionResult:
    """What the side effect did: a short `outcome` code and small JSON-safe details."""

    outcome: str
    details: Mapping[str, Any] = field(default_factory=dict)


ActionFn = Callable[[ActionRequest], ActionResult]
# Makes the callable from the worker's deployment (its settings, clients): called once, at the
# worker's start. The argument is the worker's `ActionContext` (services.worker.actions).
ActionBuilder = Callable[[Any], ActionFn]


@dataclass(frozen=True)
class Action:
    """One action, declared once: everything any component needs to know about it.

    Exactly one of `run` (the callable, or its reference) and `build` (a factory the worker
    calls with its deployment context, or its reference) is given. `policy` None: the worker's
    configured retry policy. `params` None: only the generic limits every params map has."""

    name: str
    run: ActionFn | str | None = None
    policy: RetryPolicy | None = None
    _: KW_ONLY
    build: ActionBuilder | str | None = None
    params: ParamsSchema | None = None
    budget: Budget | None = None
    needs: Needs = Needs()
    description: str = ""

    def __post_init__(self) -> None:
        problems = declaration_problems(self)
        if problems:
            raise ValueError(f"action {self.name!r}: " + "; ".join(problems))


def declaration_problems(action: Action) -> list[str]:
    """Why `action` is not a valid declaration (empty when it is)."""
    found: list[str] = []
    name = action.name
    if (
        not isinstance(name, str)
        or not ACTION_NAME.match(name)
        or len(name.encode("utf-8")) > MAX_ACTION_NAME_BYTES
    ):
        found.append(
            "the name must be dotted lower-case words (like 'trials.expire'), "
            f"at most {MAX_ACTION_NAME_BYTES} bytes"
        )
    if (action.run is None) == (action.build is None):
        found.append("give exactly one of run (the callable) and build (its factory)")
    for label, value in (("run", action.run), ("build", action.build)):
        if isinstance(value, str) and not REFERENCE.match(value):
            found.append(f"{label} {value!r} is not a 'package.module:attribute' reference")
        elif value is not None and not isinstance(value, str) and not callable(value):
            found.append(f"{label} must be callable or a 'package.module:attribute' reference")
    if action.params is not None and action.params.action != name:
        found.append(f"its params schema is declared for {action.params.action!r}")
    return found
