"""Who may act on which job through the API: its producer, or a trusted caller.

A job scheduled through the API records its producer (the caller's email, `Job.producer`). By
default a caller may read, cancel and reschedule only the jobs it produced; callers the
deployment lists as trusted (JOBS_API_TRUSTED_CALLERS, the stack's `apiTrustedCallers`) may
act on every job, as operators do through jobsctl (which uses the store, not the API). Job IDs
derived from (action, subject, decision) are predictable, so without this rule any allowlisted
producer could read or cancel another's jobs.

For a job the caller may not act on, the answer is 403 PERMISSION_DENIED whether or not the
job exists: Google's AIP-211 (https://google.aip.dev/211) has a service check permission before
existence and answer PERMISSION_DENIED "regardless of whether or not it exists", so a caller
learns nothing about other producers' jobs; 404 NOT_FOUND is only ever said to a caller who
may see every job. The same decision scheduled by two callers: the first creates the job and
owns it; the second, unless trusted, gets 403 and nothing is written (a trusted one gets the
existing job, 200, as any repeat). Ownership comes before content: scheduling another
producer's job ID answers that 403 whatever the body says (a 409 naming the differing fields is
said only to a caller who may act on the job), so a guess of its content is never confirmed.
"""

from __future__ import annotations

from dataclasses import dataclass
from http import HTTPStatus

from services.api.errors import ApiError
from services.jobs.record import Job


@dataclass(frozen=True)
class Ownership:
    """The rule, with the deployment's trusted callers."""

    trusted: frozenset[str] = frozenset()

    def is_trusted(self, caller: str) -> bool:
        return caller in self.trusted

    def may_act(self, caller: str, job: Job | None) -> bool:
        """Whether `caller` may see and change `job` (None: no such job)."""
        if self.is_trusted(caller):
            return True
        return job is not None and job.producer is not None and job.producer == caller


def denied(job_id: str) -> ApiError:
    """403 for a job the caller may not act on, the same words whether or not it exists."""
    return ApiError(
        HTTPStatus.FORBIDDEN,
        "PERMISSION_DENIED",
        f"job_id: the caller may not act on job {job_id[:200]!r} (or it does not exist); "
        "a caller may act only on the jobs it scheduled",
    )
