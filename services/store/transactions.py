"""The Firestore transaction plumbing: the transaction runner and error translation.

`TransactionRunner.run(body)` runs a body in a read-write `Transaction` made of the public
GAPIC client's BeginTransaction, reads with the transaction's ID, Commit and Rollback
(`gateway.Gateway`), each with its own timeout: the high-level client's Transaction sends
begin, commit and rollback with the generated 60 s defaults and takes no timeout. A commit
Firestore ABORTED is begun again as the high-level client's `transactional` does
(retry_transaction keeps its place in line); contention beyond that is retried here with
jittered backoff, then LostRace. `store_errors` translates the client's errors to the store's.
"""

from __future__ import annotations

import dataclasses
import logging
import random
import time
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from datetime import UTC, datetime
from typing import Any, TypeVar, cast

from google.api_core import exceptions as api_exceptions
from google.cloud.firestore_v1.base_document import DocumentSnapshot

from services.jobs import schema
from services.jobs.errors import (
    JobsError,
    LostRace,
    OutcomeUnknown,
    StoreMisconfigured,
    StoreRejected,
    StoreUnavailable,
)
from services.jobs.record import Job

# The bounds are imported from here too (the settings, the CLI).
from services.store.decoding import update_time
from services.store.gateway import Gateway
from services.store.queries import QuerySpec

logger = logging.getLogger(__name__)
# Our own generator: backoff jitter must not move the global `random` state other code (and
# Hypothesis, which checks it around every draw) relies on.
_JITTER = random.Random()

T = TypeVar("T")

TRANSACTION_ATTEMPTS = 5  # attempts of one transaction whose commit Firestore ABORTED
CONTENTION_ROUNDS = 8  # our retries, with jittered backoff, once those are spent
_EXCEEDED = "Failed to commit transaction in {:d} attempts."


class Transaction:
    """One read-write transaction, through `Gateway` (the public GAPIC client).

    The body of `TransactionRunner.run` reads and writes through it: `get`, `get_all`,
    `query`, `stream` send their reads with the transaction's ID (which locks what they read);
    `create`, `set`, `update`, `delete` queue `Write`s the commit sends. As with the
    high-level client's Transaction, a read after a write is refused.
    """

    def __init__(self, gateway: Gateway) -> None:
        self._gateway = gateway
        self.id: bytes | None = None
        # Set once a begin succeeded: from then on the transaction may hold document locks, so
        # a DEADLINE_EXCEEDED is a wait on another transaction's lock (contention), not an
        # outage.
        self.began = False
        self._writes = gateway.writes()
        self.write_results: list[Any] = []  # raw `WriteResult`s of the commit, in write order
        self.written_names: list[str] = []  # the document of each
        self.commit_time: Any = None

    @property
    def in_progress(self) -> bool:
        return self.id is not None

    # -- reads ------------------------------------------------------------------------------

    def get(self, reference: Any) -> DocumentSnapshot:
        """One document's snapshot (exists False when missing), read in the transaction."""
        return self._gateway.get(reference, self._read_id())

    def get_all(self, references: Sequence[Any]) -> Iterator[DocumentSnapshot]:
        return self._gateway.get_all(references, self._read_id())

    def query(self, spec: QuerySpec) -> Iterator[tuple[str, Any]]:
        """(document ID, raw `Document`) of each result of `spec`, in order."""
        return self._gateway.query(spec, self._read_id())

    def stream(self, spec: QuerySpec) -> Iterator[DocumentSnapshot]:
        return self._gateway.stream(spec, self._read_id())

    # -- writes -----------------------------------------------------------------------------

    def create(self, reference: Any, data: dict[str, Any]) -> None:
        self._writes.create(reference, data)

    def set(self, reference: Any, data: dict[str, Any]) -> None:
        self._writes.set(reference, data)

    def merge(self, reference: Any, fields: dict[str, Any]) -> None:
        self._writes.merge(reference, fields)

    def update(
        self, reference: Any, fields: dict[str, Any], last_update_time: datetime | None = None
    ) -> None:
        self._writes.update(reference, fields, last_update_time)

    def delete(self, reference: Any) -> None:
        self._writes.delete(reference)

    # -- the runner's -----------------------------------------------------------------------

    def begin(self, retry_id: bytes | None) -> None:
        """Forget any earlier attempt and begin anew (with the begin's bounded retry and
        timeout: the high-level client sends it with the generated 60 s defaults)."""
        self._clean_up()
        self.id = self._gateway.begin(retry_id)
        self.began = True

    def commit(self) -> None:
        """Send the queued writes with the transaction (timeout, no retry). On an error the
        transaction stays in progress, so the runner's rollback releases it."""
        if self.id is None:
            raise ValueError("no transaction in progress to commit")
        response = self._gateway.commit(self._writes, self.id)
        self.written_names = self._writes.names
        self.write_results = list(response.write_results)
        self.commit_time = response.commit_time
        self._clean_up()

    def rollback(self) -> None:
        """Release the transaction's locks. When begin itself failed there is nothing to roll
        back, and a failed rollback must not hide the error that caused it: Firestore expires
        an abandoned transaction on its own."""
        if self.id is None:
            return
        try:
            self._gateway.rollback(self.id)
        except (api_exceptions.GoogleAPICallError, api_exceptions.RetryError) as exc:
            logger.warning("transaction rollback failed: %s", type(exc).__name__)
        finally:
            self._clean_up()

    def _clean_up(self) -> None:
        self.id = None
        self._writes = self._gateway.writes()

    def _read_id(self) -> bytes:
        if self.id is None:
            raise ValueError("the transaction is not in progress")
        if len(self._writes):
            raise ValueError("Attempted read after write in a transaction.")
        return self.id


class TransactionRunner:
    """Runs transaction bodies against one database with one set of call bounds."""

    def __init__(self, gateway: Gateway) -> None:
        self.gateway = gateway

    def get_document(self, reference: Any) -> Any | None:
        """`Gateway.get_document`: one read outside a transaction, the raw `Document` or None
        for NOT_FOUND."""
        return self.gateway.get_document(reference)

    def query_in(self, transaction: Transaction, spec: QuerySpec) -> Iterator[tuple[str, Any]]:
        """(document ID, raw `Document`) of each result of `spec` run inside `transaction`
        (which locks them), in order; `decoding.decode_fields` reads the fields. Inside a
        transaction a broken stream is not resumed: an error raises."""
        return transaction.query(spec)

    def get_in(self, transaction: Transaction, reference: Any) -> DocumentSnapshot:
        """One document read inside `transaction` (it locks the document)."""
        return transaction.get(reference)

    def run(self, body: Callable[..., T], *args: Any) -> T:
        """Run `body(transaction, *args)` transactionally, retrying contention with jittered
        backoff. Persistent contention, or a lock wait that outlasts the call timeout, raises
        LostRace; UNAVAILABLE (or a deadline with nothing held) StoreUnavailable; a refusal
        retrying cannot fix StoreRejected."""
        for round_ in range(CONTENTION_ROUNDS):
            transaction = Transaction(self.gateway)
            try:
                with store_errors():
                    return self._commit_run(transaction, body, *args)
            except Contention:
                time.sleep(_JITTER.uniform(0, min(0.5, 0.01 * 2**round_)))
            except StoreUnavailable as exc:
                if transaction.began and is_deadline(exc.__cause__):
                    # Each such wait already cost a whole call timeout: give up at once.
                    raise OutcomeUnknown(
                        "waited longer than the call timeout on a document another "
                        "transaction holds, or on the commit itself: it may have applied; "
                        "read the record back"
                    ) from exc
                raise
        raise LostRace("gave up after repeated transaction contention; retry later")

    def _commit_run(self, transaction: Transaction, body: Callable[..., T], *args: Any) -> T:
        result = _attempts(transaction, body, *args)
        if isinstance(result, Job):
            # The commit time of the job's own write (a shared key's document may be written
            # in the same commit): what a later compare-and-set conditions on.
            suffix = f"/{schema.JOBS}/{result.job_id}"
            job: Job = result
            names = transaction.written_names
            for name, written in zip(names, transaction.write_results, strict=False):
                stamp = update_time(written)
                if name.endswith(suffix) and stamp is not None:
                    job = dataclasses.replace(job, update_time=as_datetime(stamp))
            return cast(T, job)
        return result


def _attempts(transaction: Transaction, body: Callable[..., T], *args: Any) -> T:
    """Begin, run `body`, commit; a commit Firestore ABORTED is begun again (up to
    TRANSACTION_ATTEMPTS in all, each retry naming the first attempt so it keeps its place in
    line: https://cloud.google.com/firestore/docs/reference/rpc/google.firestore.v1#transactionoptions),
    then ValueError from the last Aborted. Any error rolls the transaction back. The same
    loop as the high-level client's `transactional`."""
    retry_id: bytes | None = None
    last: api_exceptions.Aborted | None = None
    try:
        for _ in range(TRANSACTION_ATTEMPTS):
            transaction.begin(retry_id)
            retry_id = retry_id or transaction.id
            result = body(transaction, *args)
            try:
                transaction.commit()
                return result
            except api_exceptions.Aborted as exc:
                last = exc
        raise ValueError(_EXCEEDED.format(TRANSACTION_ATTEMPTS)) from last
    except BaseException:
        transaction.rollback()
        raise


class Contention(LostRace):
    """Firestore answered ABORTED: a transaction lost to concurrent writers more often than the
    client retries, or a write outside a transaction met contention.

    A LostRace, so a caller outside `TransactionRunner.run` (which retries it) settles it as
    any lost race: the worker reads the record back and retries within its lease, the API
    answers 409 ABORTED ("retry the request"), the scan leaves the item for its next run.
    Firestore's error pages say to retry a non-transactional commit it ABORTED
    (https://cloud.google.com/firestore/docs/understand-error-codes); the client's default
    retry does not cover a write with a precondition, so it reaches us. It never escapes as a
    plain exception (a push answered 500 `internal_error`: issue 33, finding 5)."""

    def __init__(
        self, message: str = "Firestore aborted the write under contention; retry"
    ) -> None:
        super().__init__(message)


@contextmanager
def store_errors() -> Iterator[None]:
    """Translate the client's errors: contention to Contention; refusals retrying cannot fix
    to StoreRejected (INVALID_ARGUMENT) or StoreMisconfigured (PERMISSION_DENIED, a missing
    index, a missing database); the rest to StoreUnavailable. Our own JobsError passes.

    Status meanings: https://cloud.google.com/firestore/docs/understand-error-codes
    """
    try:
        yield
    except JobsError:
        raise
    except api_exceptions.Aborted as exc:
        raise Contention() from exc
    except api_exceptions.InvalidArgument as exc:
        if _EXPIRED_TRANSACTION in str(exc):
            # A transaction that outlived Firestore's limits (a process frozen mid-transaction,
            # 270 s in all or 60 s idle): nothing was written, and a new transaction succeeds,
            # so it is contention, not a refusal. Google's Node and Java clients retry it the
            # same way, by its message (googleapis/nodejs-firestore#1347,
            # googleapis/java-firestore#447); found answered 500 in the fault drain (issue 33).
            raise Contention() from exc
        raise translated(exc) from exc
    except ValueError as exc:
        if isinstance(exc.__cause__, api_exceptions.Aborted):
            raise Contention() from exc
        raise
    except (api_exceptions.GoogleAPICallError, api_exceptions.RetryError) as exc:
        raise translated(exc) from exc


_EXPIRED_TRANSACTION = "transaction has expired or is no longer valid"


def translated(exc: Exception) -> JobsError:
    cause = exc.cause if isinstance(exc, api_exceptions.RetryError) else exc
    if isinstance(cause, api_exceptions.InvalidArgument):
        return StoreRejected(f"Firestore refused the request as invalid: {cause}")
    if isinstance(
        cause,
        api_exceptions.PermissionDenied
        | api_exceptions.FailedPrecondition
        | api_exceptions.NotFound
        | api_exceptions.Unauthenticated,
    ):
        return StoreMisconfigured(
            f"Firestore refused the request ({type(cause).__name__}): {cause}; check the "
            "service account's roles, the declared indexes and the database name"
        )
    return StoreUnavailable(f"Firestore: {exc}")


def is_deadline(exc: BaseException | None) -> bool:
    if isinstance(exc, api_exceptions.RetryError):
        exc = exc.cause
    return isinstance(exc, api_exceptions.DeadlineExceeded)


def as_datetime(stamp: Any) -> datetime:
    if isinstance(stamp, datetime):
        return stamp.astimezone(UTC)
    return stamp.ToDatetime(tzinfo=UTC)
