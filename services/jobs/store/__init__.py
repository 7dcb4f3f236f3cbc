"""The job store: `FirestoreJobStore` and the names its callers import.

A package of roles (docs/job-record.md, "Where things are"): `facade` (the one class callers
use, delegating each operation), `scheduling`, `reads`, `claims`, `reclaims`, `leases` and
`shared_keys`, on the plumbing they share in `documents` and `merge`.
"""

from services.jobs.queries import QuerySpec
from services.jobs.store.claims import MARK_PAGE_SIZE
from services.jobs.store.documents import CLAIM_PAGE_SIZE
from services.jobs.store.facade import FirestoreJobStore
from services.jobs.store.reclaims import MISFILED_CHECK_LIMIT
from services.jobs.store.scheduling import ScheduleOutcome, same_decision
from services.jobs.transitions import DEFAULT_TERMINAL_RETENTION

__all__ = [
    "CLAIM_PAGE_SIZE",
    "DEFAULT_TERMINAL_RETENTION",
    "MARK_PAGE_SIZE",
    "MISFILED_CHECK_LIMIT",
    "FirestoreJobStore",
    "QuerySpec",
    "ScheduleOutcome",
    "same_decision",
]
