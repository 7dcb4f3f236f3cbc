"""Scheduling: the application's side of the store, creating deferred jobs.

`schedule` and `schedule_many` create records with a create (never an overwrite), and the one
decision-identity rule (`same_decision`) settles a job ID that already exists.
"""

from __future__ import annotations

import json
import logging
import os
import time
from collections.abc import Collection, Iterable, Iterator, Mapping, Sequence
from typing import Any

from google.api_core import exceptions as api_exceptions

from services.jobs import schema
from services.jobs.catalogue import Catalogue, load_catalogue
from services.jobs.deployment import Deployment
from services.jobs.errors import InvalidRecord, LostRace, ScheduleConflict, ValidationError
from services.jobs.limits import life_headroom_problem
from services.jobs.model import NewJob
from services.jobs.record import Job, decode_job
from services.jobs.results import ScheduleResult
from services.jobs.shard import shard_of
from services.jobs.state import HistoryEntry, Role, State
from services.jobs.write_pacer import WritePacer
from services.store.documents import Documents, require_due_in_horizon
from services.store.transactions import Contention, store_errors

logger = logging.getLogger(__name__)

# A decision's identity beyond its job ID (docs/job-record.md, "Scheduling twice"): the same
# values again are the same decision. The due time is not part of it: a retry of `--due +30d`
# computes a new instant for the same decision.
_SCHEDULE_COMPARED = ("action", "subject", "params", "max_attempts", "idempotency_key")
_MAX_SCHEDULE_BATCH = 500  # Firestore's writes per batched write
# A create Firestore ABORTED is read back and sent again at most this many times in all, the
# waits doubling from CREATE_RETRY_S; then Contention (a LostRace: the API's 409 ABORTED).
CREATE_ATTEMPTS = 4
CREATE_RETRY_S = 0.05
# InvalidRecord: the ID's stored record cannot be read (NewerRecord: a newer version wrote it);
# that item alone is refused and the record left as found.
ScheduleOutcome = ScheduleResult | ValidationError | ScheduleConflict | InvalidRecord


def same_decision(requested: NewJob, existing: Job) -> ScheduleResult:
    """The existing job when `requested` is the same decision; else ScheduleConflict.

    The one decision-identity rule: every JobStore implementation (fakes included) calls it.
    """
    different = [
        name
        for field_name in _SCHEDULE_COMPARED
        for name in _differences(field_name, requested, existing)
    ]
    if different:
        raise ScheduleConflict(requested.job_id, different)
    return ScheduleResult(existing, created=False)


def _decision_outcome(requested: NewJob, existing: Job) -> ScheduleResult | ScheduleConflict:
    try:
        return same_decision(requested, existing)
    except ScheduleConflict as exc:
        return exc


def _decoded_or_refusal(snapshot: Any) -> Job | InvalidRecord:
    """The stored job, or why it cannot be read: one such record refuses its own item of a
    batch, never the whole batch (the next version's records stay as found)."""
    try:
        return decode_job(snapshot.id, snapshot.to_dict())
    except InvalidRecord as exc:
        return exc


def _differences(field_name: str, requested: NewJob, existing: Job) -> list[str]:
    """The names that differ: `params.<key>` per params key, else the field itself."""
    if field_name != "params":
        same = getattr(requested, field_name) == getattr(existing, field_name)
        return [] if same else [field_name]
    asked, stored = dict(requested.params), dict(existing.params)
    return [
        f"params.{key}"
        for key in sorted(set(asked) | set(stored))
        if key not in asked
        or key not in stored
        or _canonical(asked[key]) != _canonical(stored[key])
    ]


def _canonical(value: Any) -> str:
    # Tuples read back from Firestore as lists; JSON text compares the values, not containers.
    return json.dumps(value, sort_keys=True, separators=(",", ":"))


class Scheduling:
    """Creates deferred jobs, idempotent by the decision's identity."""

    def __init__(self, docs: Documents, known_actions: Catalogue | Collection[str] | None) -> None:
        """`known_actions`: the action catalogue (None: load it, built-ins and installed
        plug-ins, checking params against this process's deployment, `JOBS_HTTP_TARGETS`; a
        broken plug-in raises CatalogueError here, bad targets TargetsError), or a plain
        collection of names (checked against the built-in schemas, nothing configured)."""
        self._docs = docs
        if known_actions is None:
            known_actions = load_catalogue(deployment=Deployment.from_env(os.environ))
        self._known_actions: Catalogue | frozenset[str] = (
            known_actions if isinstance(known_actions, Catalogue) else frozenset(known_actions)
        )

    def schedule(
        self, new_job: NewJob, *, by: str = "application", producer: str | None = None
    ) -> ScheduleResult:
        """Create a deferred job, idempotent by the decision's identity.

        The same decision again (job ID, action, subject, params, max_attempts, idempotency
        key; never the due time, so a retry of `+30d` matches) returns the existing job with
        created=False and writes nothing. A different value of one of those under the same
        ID raises ScheduleConflict naming each differing field. Invalid input (including
        params that do not fit the action's schema) raises ValidationError and writes
        nothing. Costs 1 write when new (no read), 1 read when it exists.
        """
        valid = self._validated(new_job, by)
        job = self._new_record(valid, by).replaced(producer=producer)
        ref = self._docs.jobs.document(valid.job_id)
        for attempt in range(CREATE_ATTEMPTS):
            with store_errors():
                try:
                    writes = self._docs.gateway.writes()
                    writes.create(ref, job.to_document())
                    self._docs.gateway.commit(writes)
                    logger.info("scheduled job %s due %s", job.job_id, job.due_at.isoformat())
                    return ScheduleResult(job, created=True)
                except api_exceptions.AlreadyExists:
                    snapshot = self._docs.gateway.get(ref)
                except api_exceptions.Aborted as exc:
                    # ABORTED on the create (a precondition: the document must not exist)
                    # under contention: settled as any ambiguous write, by reading back, then
                    # retrying the create while the ID is still free (issue 33, finding 5).
                    snapshot = self._docs.gateway.get(ref)
                    if not snapshot.exists:
                        if attempt + 1 == CREATE_ATTEMPTS:
                            raise Contention() from exc
                        time.sleep(CREATE_RETRY_S * 2**attempt)
                        continue
            break
        if not snapshot.exists:  # deleted (TTL) between our create and read
            raise LostRace(f"job {valid.job_id!r} vanished while scheduling; retry")
        return same_decision(valid, decode_job(valid.job_id, snapshot.to_dict()))

    def schedule_many(
        self, new_jobs: Sequence[NewJob], *, by: str = "application"
    ) -> list[ScheduleOutcome]:
        """`schedule` for up to 500 jobs in batched writes: each item's outcome, in order, is
        its ScheduleResult or the error refusing it (the others are still scheduled). Same
        identity rule as `schedule`; an ID twice in one call is compared with its first
        occurrence. An ID whose stored record cannot be decoded (written by a newer version,
        or malformed) gets that InvalidRecord as its outcome and is left as found, as
        `schedule` raises it. Firestore errors raise StoreUnavailable.

        Costs 1 write per new job and no read when none exists yet (the batch of creates
        commits); when one does, that commit changes nothing and one batched read (1 read
        per job) settles which are new."""
        if len(new_jobs) > _MAX_SCHEDULE_BATCH:
            raise ValidationError(f"at most {_MAX_SCHEDULE_BATCH} jobs per call")
        outcomes: list[ScheduleOutcome | None] = [None] * len(new_jobs)
        valid: dict[int, NewJob] = {}
        for index, new_job in enumerate(new_jobs):
            try:
                valid[index] = self._validated(new_job, by)
            except ValidationError as exc:
                valid.pop(index, None)
                outcomes[index] = exc
        if not self._create_batch(valid, {}, outcomes, by):
            refs = [self._docs.jobs.document(v.job_id) for v in valid.values()]
            with store_errors():
                found = {
                    s.id: _decoded_or_refusal(s)
                    for s in self._docs.gateway.get_all(refs)
                    if s.exists
                }
            if not self._create_batch(valid, found, outcomes, by):
                # A writer created one of them since our read: settle each one on its own.
                for index, new in valid.items():
                    if new.job_id not in found:
                        outcomes[index] = self._schedule_outcome(new, by)
        return [outcome for outcome in outcomes if outcome is not None]

    def write_pacer(self, **options: Any) -> WritePacer:
        """A `WritePacer` for this store's index ranges (one per shard) and clock; `options`
        are WritePacer's (per_range_per_s, ramp_start_per_s, sleep)."""
        return WritePacer(self._docs.clock, self._docs.shards, **options)

    def schedule_paced(
        self,
        new_jobs: Iterable[NewJob],
        pacer: WritePacer | None = None,
        *,
        by: str = "application",
    ) -> Iterator[list[ScheduleOutcome]]:
        """`schedule_many` over any number of jobs, paced: batches of `pacer.max_batch()`, each
        let through by the pacer (default: `write_pacer()`) with its writes per index range,
        so no range takes more than its rate and all of them together follow the 500/50/5 ramp
        (services/jobs/write_pacer.py). Yields each batch's outcomes, in order; a loop that
        schedules many jobs from any producer goes through here."""
        pacer = pacer or self.write_pacer()
        if pacer.ranges != self._docs.shards:
            raise ValueError(
                f"the pacer paces {pacer.ranges} index range(s); this store writes "
                f"{self._docs.shards} (one per shard)"
            )
        batch: list[NewJob] = []
        for new_job in new_jobs:
            batch.append(new_job)
            if len(batch) == pacer.max_batch():
                yield self._schedule_paced_batch(batch, pacer, by)
                batch = []
        if batch:
            yield self._schedule_paced_batch(batch, pacer, by)

    def _schedule_paced_batch(
        self, batch: Sequence[NewJob], pacer: WritePacer, by: str
    ) -> list[ScheduleOutcome]:
        per_range: dict[int, int] = {}
        for new_job in batch:
            # Counted before validation: a refused job writes nothing, so this can only
            # overcount, never let a range exceed its rate.
            index = shard_of(new_job.job_id, self._docs.shards)
            per_range[index] = per_range.get(index, 0) + 1
        pacer.take(per_range)
        return self.schedule_many(batch, by=by)

    def _create_batch(
        self,
        valid: Mapping[int, NewJob],
        existing: Mapping[str, Job | InvalidRecord],
        outcomes: list[ScheduleOutcome | None],
        by: str,
    ) -> bool:
        """Create, in one batched write, every job of `valid` not in `existing`, filling in
        each outcome; False when one already existed (a batched write is atomic: nothing was
        written, and the caller settles again)."""
        batch = self._docs.gateway.writes()
        pending: dict[str, Job] = {}
        for index, new in valid.items():
            known = existing.get(new.job_id) or pending.get(new.job_id)
            if isinstance(known, InvalidRecord):
                outcomes[index] = known  # this item alone: the others are still scheduled
                continue
            if known is not None:
                outcomes[index] = _decision_outcome(new, known)
                continue
            job = self._new_record(new, by)
            batch.create(self._docs.jobs.document(new.job_id), job.to_document())
            pending[new.job_id] = job
            outcomes[index] = ScheduleResult(job, created=True)
        if not pending:
            return True
        with store_errors():
            try:
                self._docs.gateway.commit(batch)
            except api_exceptions.AlreadyExists:
                return False
            except api_exceptions.Aborted:
                # Contention (issue 33, finding 5): nothing was written; the caller reads
                # back and settles, in the end each job by `schedule`, which retries it.
                return False
        logger.info("scheduled %d jobs in one batched write", len(pending))
        return True

    def _schedule_outcome(self, new: NewJob, by: str) -> ScheduleOutcome:
        try:
            return self.schedule(new, by=by)
        except (ScheduleConflict, InvalidRecord) as exc:
            return exc

    def _validated(self, new_job: NewJob, by: str) -> NewJob:
        """`new_job` validated, due within the horizon, and small enough to move through its
        life: its record plus what the life writes (claim, history, a result) fits under
        Firestore's 1 MiB document limit (`life_headroom_problem`, the check the claim makes
        again for records written past this; issue 33, finding 2). ValidationError otherwise."""
        valid = new_job.validated(self._known_actions)
        require_due_in_horizon(valid.due_at, self._docs.clock.now())
        record = self._new_record(valid, by).to_document()
        problem = life_headroom_problem(schema.JOBS, valid.job_id, record)
        if problem is not None:
            raise ValidationError([problem])
        return valid

    def _new_record(self, valid: NewJob, by: str) -> Job:
        now = self._docs.clock.now()
        created = HistoryEntry(now, None, State.DEFERRED, f"{Role.APPLICATION}:{by}", "scheduled")
        return Job.create(valid, now, history=(created,), shards=self._docs.shards)
