"""The jobs package's exceptions: one base, one subclass per way an operation can be refused.

The store raises these and never speaks HTTP; the scan, the worker and the CLI map them to
status codes, acknowledgements or exit codes.
"""

from __future__ import annotations

from collections.abc import Mapping
from datetime import datetime, timedelta
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from services.jobs.state import State


class JobsError(Exception):
    """The jobs store refused or could not complete the operation."""

    def __init__(self, message: str | None = None) -> None:
        super().__init__(message or (self.__doc__ or "").strip())


class ValidationError(JobsError, ValueError):
    """The job or setting is invalid; nothing was written."""

    def __init__(self, problems: list[str] | str | None = None) -> None:
        if isinstance(problems, str):
            problems = [problems]
        self.problems: tuple[str, ...] = tuple(problems or ())
        super().__init__("; ".join(self.problems) if self.problems else None)


class JobNotFound(JobsError, LookupError):
    """No job has this ID."""

    def __init__(self, job_id: str) -> None:
        self.job_id = job_id
        super().__init__(f"job {job_id!r} not found")


class InvalidTransition(JobsError):
    """The state machine does not allow this transition."""

    def __init__(self, job_id: str, current: State, requested: State, detail: str = "") -> None:
        self.job_id = job_id
        self.current = current
        self.requested = requested
        message = f"job {job_id!r}: cannot move from {current.value!r} to {requested.value!r}"
        super().__init__(f"{message}: {detail}" if detail else message)


class AlreadyTerminal(InvalidTransition):
    """The job already reached a terminal state; nothing was changed."""

    def __init__(self, job_id: str, current: State, requested: State) -> None:
        super().__init__(
            job_id, current, requested, f"it is already {current.value} (terminal); unchanged"
        )


class ScheduleConflict(JobsError):
    """A job with this ID already exists with different content."""

    def __init__(self, job_id: str, fields: list[str]) -> None:
        self.job_id = job_id
        self.fields = tuple(fields)
        super().__init__(
            f"job {job_id!r} already exists with a different {', '.join(fields)}; "
            "schedule a new decision under a new job ID"
        )


class AttemptsExhausted(JobsError):
    """The job has used all its attempts; fail it instead."""

    def __init__(self, job_id: str, attempt: int, max_attempts: int) -> None:
        self.job_id = job_id
        self.attempt = attempt
        self.max_attempts = max_attempts
        super().__init__(f"job {job_id!r} used attempt {attempt} of {max_attempts}; no retry left")


class LostRace(JobsError):
    """Another writer changed the job first, or a transaction waited on a lock past its call
    timeout; retry later.

    Nothing was written, except in the subclass `OutcomeUnknown`: a wait that ended in a
    deadline on the commit itself (`TransactionRunner.run`) may have applied."""


class OutcomeUnknown(LostRace):
    """The write's answer was lost (a deadline on the commit itself): it may have applied or
    not. The caller settles it by reading the record back (a worker: its own lease token in
    `lease_token` or `ended_lease_token`), never by assuming it is unchanged."""


class StaleGeneration(LostRace):
    """The caller's generation is not the job's current one: a newer claim owns the job."""

    def __init__(self, job_id: str, expected: int, actual: int) -> None:
        self.job_id = job_id
        self.expected = expected
        self.actual = actual
        super().__init__(
            f"job {job_id!r}: generation {expected} is stale; the job is at generation {actual}"
        )


class LeaseHeld(LostRace):
    """Another worker holds a live lease on the job."""

    def __init__(self, job_id: str, owner: str | None, until: datetime | None) -> None:
        self.job_id = job_id
        self.owner = owner
        self.until = until
        when = until.isoformat() if until else "unknown"
        super().__init__(f"job {job_id!r} is leased by {owner!r} until {when}")


class LeaseLost(LostRace):
    """The caller no longer holds the job's lease (it expired and was taken or reclaimed)."""

    def __init__(self, job_id: str, worker_id: str, owner: str | None, detail: str = "") -> None:
        self.job_id = job_id
        self.worker_id = worker_id
        self.owner = owner
        message = (
            f"job {job_id!r}: worker {worker_id!r} no longer holds the lease (owner: {owner!r})"
        )
        super().__init__(f"{message}: {detail}" if detail else message)


class StoreUnavailable(JobsError):
    """Firestore could not be reached (UNAVAILABLE, DEADLINE_EXCEEDED with no lock held, or
    another transient error); retry later."""


class ClockSkewed(StoreUnavailable):
    """This instance's clock differs from Firestore's by more than the tolerated skew: it does
    not claim, reclaim or take a lease on that clock (docs/state-machine.md, "Clock skew").
    Retried later, like an outage (the worker answers 503, so another instance may take the
    push); each refusal is logged with event `clock_skew`."""

    def __init__(self, offset: timedelta, tolerance: timedelta, what: str) -> None:
        self.offset = offset
        self.tolerance = tolerance
        direction = "ahead of" if offset > timedelta(0) else "behind"
        super().__init__(
            f"this instance's clock is {abs(offset.total_seconds()):.3f}s {direction} "
            f"Firestore's (at most {tolerance.total_seconds():g}s tolerated): {what} refused"
        )


class StoreRejected(JobsError):
    """Firestore refused the request for a reason retrying cannot fix (INVALID_ARGUMENT, e.g.
    a document over 1 MiB); nothing was written."""


class StoreMisconfigured(StoreRejected):
    """Firestore refused the request because of the deployment, not the data: a missing
    permission (PERMISSION_DENIED), a missing index (FAILED_PRECONDITION) or a missing
    database (NOT_FOUND). A configuration error to fix, not an outage to wait out."""


class InvalidRecord(JobsError):
    """A job document cannot be decoded (a field missing or of the wrong type): it is
    quarantined as failed with last_error.code invalid_record, never a reason to stop."""

    def __init__(self, job_id: str, problem: str) -> None:
        self.job_id = job_id
        self.problem = problem
        super().__init__(f"job {job_id!r} is not a valid job record: {problem}")


class NewerRecord(InvalidRecord):
    """A job document written by a newer version of this code: a `schema_version` above
    this code's, or a state (of the record or of one history entry) it does not know. Left
    exactly as found (a rollback must not destroy what the newer version wrote), logged with
    event `job_from_newer_version`, counted and alerted; never quarantined."""


# -- what an action reports (services.jobs.actions); the worker decides what follows ---------


class ActionError(Exception):
    """The action did not complete."""

    def __init__(self, message: str | None = None) -> None:
        super().__init__(message or (self.__doc__ or "").strip())


class TransientError(ActionError):
    """The action failed for a reason that may pass; Pub/Sub should deliver it again soon."""


class DependencyDown(TransientError):
    """A dependency of the action is down for long; retry the job much later, not soon."""


class Interrupted(ActionError):
    """The action stopped between units of work at its deadline; `progress` says what it
    finished, so the next delivery resumes with what is left."""

    def __init__(self, progress: Mapping[str, Any], message: str | None = None) -> None:
        super().__init__(message or "stopped at the deadline between units of work")
        self.progress = dict(progress)


class RetryAfter(TransientError):
    """The dependency asked to be called again after `delay_s` seconds (429 or 503 with
    `Retry-After`): the job waits that long, without spending an attempt. `target` names the
    action's own target that answered (http.request's HTTP target): the pause then holds only
    that target's jobs (services/jobs/lanes.py, key `action/target`), not the action's."""

    def __init__(
        self, delay_s: float, message: str | None = None, *, target: str | None = None
    ) -> None:
        super().__init__(message or f"the dependency asked to wait {delay_s:g} s")
        self.delay_s = delay_s
        self.target = target


class PermanentError(ActionError):
    """The action can never succeed as scheduled; the job fails at once."""


class CatalogueError(Exception):
    """The action catalogue cannot be built: a plug-in is broken or conflicts with another.
    The process must not start with it (services.jobs.catalogue)."""

    def __init__(self, message: str | None = None) -> None:
        super().__init__(message or (self.__doc__ or "").strip())
