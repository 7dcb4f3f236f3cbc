"""The two fences: the claim generation and the lease token.

Every claim increments the generation the scan publishes with the job ID; every `start`
writes a new lease token. A caller holding an older one of either is refused here, so a late
message or a stale delivery never changes a record another has since taken over.
"""

from __future__ import annotations

from typing import Any

from services.jobs.errors import LeaseLost, StaleGeneration
from services.jobs.parts import Lease
from services.jobs.record import Job
from services.jobs.state import State


def require_lease(job: Job, lease: Lease) -> None:
    """LeaseLost unless `lease` is the job's running lease (same generation and token).

    Whatever happened meanwhile (the lease lapsed and was reclaimed to deferred or failed,
    taken over, the job re-claimed under a newer generation, or finished by another delivery,
    even one in this same process), the caller's result is no longer wanted: one error for
    all of it.
    """
    if job.state is not State.RUNNING:
        detail = f"the job is {job.state.value}"
    elif job.generation != lease.generation:
        detail = f"generation {lease.generation} is stale; the job is at {job.generation}"
    elif job.lease_token != lease.token:
        detail = "another delivery took the lease over"
    else:
        return
    raise LeaseLost(job.job_id, lease.owner, job.lease_owner, detail)


def require_generation(job: Job, generation: int) -> None:
    if job.generation != generation:
        raise StaleGeneration(job.job_id, generation, job.generation)


def ended_by(lease: Lease) -> dict[str, Any]:
    """The mark a lease holder's transition out of running leaves: its own token, so a
    delivery that lost its write's answer reads back whether that write applied (the running
    fields themselves are cleared)."""
    return {"ended_lease_token": lease.token}
