"""Holds of shared idempotency keys, taken inside a lease's transaction (plumbing for `leases`).

A job scheduled with its own idempotency key may share it with other jobs; the key's document
in the idempotency collection says which lease holds it and, once completed, the result every
holder reuses. `leases` takes, checks and frees the hold inside its own transactions through
these functions; `shared_keys.SharedKeys.get_idempotency` is the worker's read of a recorded
result.
"""

from __future__ import annotations

from datetime import datetime

from services.jobs import schema
from services.jobs.errors import LeaseHeld, LeaseLost
from services.jobs.parts import Lease
from services.jobs.record import Job
from services.store.documents import Documents
from services.store.transactions import Transaction


def hold_key(
    docs: Documents,
    transaction: Transaction,
    job: Job,
    token: str,
    until: datetime,
    now: datetime,
) -> None:
    """Take (or renew) a shared idempotency key for this lease inside its transaction:
    a live hold by another lease is refused like a held lease; a completed record is left
    alone (the worker reuses its result)."""
    key_ref = docs.idempotency.document(job.idempotency_key)
    snapshot = docs.get_in(transaction, key_ref)
    data = (snapshot.to_dict() or {}) if snapshot.exists else {}
    if "outcome" in data:
        return
    holder = data.get("holder") or {}
    held_until = holder.get("until")
    if (
        holder.get("token") not in (None, token)
        and isinstance(held_until, datetime)
        and held_until > now
    ):
        raise LeaseHeld(
            job.job_id, f"job {holder.get('job_id')!r} (shared idempotency key)", held_until
        )
    transaction.set(
        key_ref,
        {
            "holder": {"job_id": job.job_id, "token": token, "until": until},
            schema.EXPIRE_AT: until + docs.rules.retention,
        },
    )


def require_key(docs: Documents, transaction: Transaction, job: Job, lease: Lease) -> bool:
    """Whether to record the result under the job's shared key: yes while this lease
    holds it, no when a result is already recorded (the worker is completing with that
    result, which is never overwritten); LeaseLost when another lease took it over."""
    snapshot = docs.get_in(transaction, docs.idempotency.document(job.idempotency_key))
    data = (snapshot.to_dict() or {}) if snapshot.exists else {}
    if "outcome" in data:
        return False
    holder = data.get("holder") or {}
    if snapshot.exists and holder.get("token") != lease.token:
        detail = f"job {holder.get('job_id')!r} took the shared idempotency key over"
        raise LeaseLost(job.job_id, lease.owner, job.lease_owner, detail)
    return True
