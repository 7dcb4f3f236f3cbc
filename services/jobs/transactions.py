"""The Firestore transaction plumbing: bounded calls, the transaction runner, error translation.

The only module that touches the client's private internals (`Transaction._begin`,
`_commit`, `_rollback`, `_clean_up`, `_options_protobuf`, `_write_pbs`, `_id`, a batch's
`_add_write_pbs` and `_document_references`, a reference's `_document_path`,
`_helpers.decode_dict`, a query's `_get_stream_iterator`, and the client's `_firestore_api`,
`_database_string`, `_rpc_metadata`): the client's Transaction sends begin,
commit and rollback with the generated 60 s defaults and takes no timeout, so they are
re-issued here with one; `add_update` hands a batch a `Write` built by `encoding`.
`tests/unit/jobs/test_transactions.py` fails loudly if any of those internals change in a new
client release.
"""

from __future__ import annotations

import dataclasses
import logging
import random
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any, TypeVar

from google.api_core import exceptions as api_exceptions
from google.api_core import retry as api_retry
from google.cloud import firestore
from google.cloud.firestore_v1 import _helpers
from google.cloud.firestore_v1.base_document import DocumentSnapshot
from google.cloud.firestore_v1.types import write as write_types

from services.jobs import schema
from services.jobs.encoding import update_write
from services.jobs.errors import (
    JobsError,
    LostRace,
    OutcomeUnknown,
    StoreMisconfigured,
    StoreRejected,
    StoreUnavailable,
)
from services.jobs.model import Job

logger = logging.getLogger(__name__)
# Our own generator: backoff jitter must not move the global `random` state other code (and
# Hypothesis, which checks it around every draw) relies on.
_JITTER = random.Random()

T = TypeVar("T")

# Without these the client waits up to 300 s for a read and 60 s for a commit when Firestore is
# unreachable; a scan run or a push must answer 503 long before Pub/Sub or the scheduler gives up.
DEFAULT_CALL_TIMEOUT_S = 10.0
TRANSACTION_ATTEMPTS = 5  # the client's own retries of an ABORTED commit
CONTENTION_ROUNDS = 8  # our retries, with jittered backoff, once the client gives up


def bounded_retry(deadline_s: float) -> api_retry.Retry:
    """Retry transient Firestore errors with backoff, giving up after `deadline_s` in all."""
    return api_retry.Retry(
        predicate=api_retry.if_exception_type(
            api_exceptions.ServiceUnavailable,
            api_exceptions.DeadlineExceeded,
            api_exceptions.InternalServerError,
            api_exceptions.ResourceExhausted,
        ),
        initial=0.1,
        maximum=2.0,
        multiplier=2.0,
        timeout=deadline_s,
    )


@dataclass(frozen=True)
class CallBounds:
    """The per-call timeout and the retry every Firestore request of a store gets.

    `retry` None means `bounded_retry(2 * timeout_s)`: a couple of attempts, then 503.
    """

    timeout_s: float = DEFAULT_CALL_TIMEOUT_S
    retry: api_retry.Retry | None = None

    def __post_init__(self) -> None:
        if not self.timeout_s > 0:
            raise ValueError("timeout_s must be positive")

    @property
    def kwargs(self) -> dict[str, Any]:
        """`retry=` and `timeout=` for a read (get, query, aggregation, get_all)."""
        return {"retry": self.retry or bounded_retry(2 * self.timeout_s), "timeout": self.timeout_s}

    @property
    def write_kwargs(self) -> dict[str, Any]:
        """For a single write: timeout only, since a retried create would answer AlreadyExists
        for its own first attempt."""
        return {"retry": None, "timeout": self.timeout_s}


class BoundedTransaction(firestore.Transaction):
    """A transaction whose begin, commit and rollback carry a timeout.

    The client's Transaction sends them with the generated defaults (60 s and its own retries)
    and takes no timeout argument, so these three calls are re-issued here with one.
    """

    def __init__(self, client: firestore.Client, bounds: CallBounds, max_attempts: int) -> None:
        super().__init__(client, max_attempts=max_attempts)
        self._bounds = bounds
        # Set once begin succeeded: from then on the transaction may hold document locks, so
        # a DEADLINE_EXCEEDED is a wait on another transaction's lock (contention), not an
        # outage.
        self.began = False
        self.written_names: list[str] = []

    def _begin(self, retry_id: bytes | None = None) -> None:
        if self.in_progress:
            raise ValueError(f"transaction {self._id!r} already begun")
        response = self._client._firestore_api.begin_transaction(
            request={
                "database": self._client._database_string,
                "options": self._options_protobuf(retry_id),
            },
            metadata=self._client._rpc_metadata,
            **self._bounds.kwargs,
        )
        self._id = response.transaction
        self.began = True

    def _rollback(self) -> None:
        # Called on any error in the body or commit. When begin itself failed there is
        # nothing to roll back, and a failed rollback must not hide the error that caused it:
        # Firestore expires an abandoned transaction on its own.
        if not self.in_progress:
            return
        try:
            self._client._firestore_api.rollback(
                request={"database": self._client._database_string, "transaction": self._id},
                metadata=self._client._rpc_metadata,
                **self._bounds.write_kwargs,
            )
        except (api_exceptions.GoogleAPICallError, api_exceptions.RetryError) as exc:
            logger.warning("transaction rollback failed: %s", type(exc).__name__)
        finally:
            self._clean_up()

    def _commit(self) -> list[Any]:
        if not self.in_progress:
            raise ValueError("no transaction in progress to commit")
        response = self._client._firestore_api.commit(
            request={
                "database": self._client._database_string,
                "writes": self._write_pbs,
                "transaction": self._id,
            },
            metadata=self._client._rpc_metadata,
            **self._bounds.write_kwargs,
        )
        # Which document each write result belongs to (the results come in write order).
        self.written_names = [_written_name(pb) for pb in self._write_pbs]
        self._clean_up()
        self.write_results = list(response.write_results)
        self.commit_time = response.commit_time
        return self.write_results


def add_update(
    batch: Any,
    reference: Any,
    fields: dict[str, Any],
    last_update_time: datetime | None = None,
) -> None:
    """`batch.update(reference, fields)` (a transaction, a WriteBatch or a BulkWriteBatch),
    conditioned on `last_update_time` when given, with the `Write` built by
    `encoding.update_write`: the same protobuf, without the client's per-value proto-plus
    cost. What that declines goes through the client's own `update`."""
    path = reference._document_path
    pb = update_write(path, fields, last_update_time)
    if pb is None:
        option = None
        if last_update_time is not None:
            option = batch._client.write_option(last_update_time=last_update_time)
        batch.update(reference, fields, option=option)
        return
    batch._document_references[path] = reference
    batch._add_write_pbs([write_types.Write.wrap(pb)])


class TransactionRunner:
    """Runs transaction bodies against one client with one set of call bounds."""

    def __init__(self, client: firestore.Client, bounds: CallBounds) -> None:
        self._client = client
        self._bounds = bounds

    def get_document(self, ref: Any) -> Any | None:
        """One document read outside a transaction, as the unary GetDocument RPC
        (https://cloud.google.com/firestore/docs/reference/rpc/google.firestore.v1#google.firestore.v1.Firestore.GetDocument):
        its snapshot (with update_time, for a compare-and-set), or None when Firestore
        answers NOT_FOUND. The public `DocumentReference.get` sends a server-streaming
        BatchGetDocuments instead, which costs the client about twice the CPU. NOT_FOUND also
        means a missing database, so a caller treats None as "decide in a transaction", whose
        read tells the two apart."""
        try:
            document = self._client._firestore_api.get_document(
                request={"name": ref._document_path},
                metadata=self._client._rpc_metadata,
                **self._bounds.kwargs,
            )
        except api_exceptions.NotFound:
            return None
        return DocumentSnapshot(
            ref,
            _helpers.decode_dict(document.fields, self._client),
            exists=True,
            read_time=None,
            create_time=document.create_time,
            update_time=document.update_time,
        )

    def query_in(self, transaction: firestore.Transaction, query: Any) -> Iterator[tuple[str, Any]]:
        """(document ID, raw `Document` protobuf) of each result of `query` run inside
        `transaction` (which locks them), in order: the RunQuery request `query.stream`
        sends, without its per-result `DocumentSnapshot` (proto-plus wrappers, decoding and
        deep copies of every document); `decoding.decode_fields` reads the fields. Inside a
        transaction the client does not resume a broken stream either: an error raises."""
        bounds = self._bounds.kwargs
        responses, prefix = query._get_stream_iterator(
            transaction, bounds["retry"], bounds["timeout"]
        )
        for response in responses:
            raw = response._pb
            if raw.HasField("document"):
                yield _helpers.get_doc_id(raw.document, prefix), raw.document

    def get_in(self, transaction: firestore.Transaction, ref: Any) -> Any:
        """One document read inside `transaction` (it locks the document)."""
        return next(iter(transaction.get(ref, **self._bounds.kwargs)))

    def run(self, body: Callable[..., T], *args: Any) -> T:
        """Run `body(transaction, *args)` transactionally, retrying contention with jittered
        backoff. Persistent contention, or a lock wait that outlasts the call timeout, raises
        LostRace; UNAVAILABLE (or a deadline with nothing held) StoreUnavailable; a refusal
        retrying cannot fix StoreRejected."""
        for round_ in range(CONTENTION_ROUNDS):
            transaction = BoundedTransaction(self._client, self._bounds, TRANSACTION_ATTEMPTS)
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

    def _commit_run(self, transaction: BoundedTransaction, body: Callable[..., T], *args: Any) -> T:
        result = firestore.transactional(body)(transaction, *args)
        written = getattr(transaction, "write_results", None) or []
        names = getattr(transaction, "written_names", [])
        if isinstance(result, Job):
            # The commit time of the job's own write (a shared key's document may be written
            # in the same commit): what a later compare-and-set conditions on.
            suffix = f"/{schema.JOBS}/{result.job_id}"
            for name, written_result in zip(names, written, strict=False):
                if name.endswith(suffix) and written_result.update_time is not None:
                    stamp = as_datetime(written_result.update_time)
                    result = dataclasses.replace(result, update_time=stamp)
        return result


def _written_name(write_pb: Any) -> str:
    """The document a write (a proto-plus `Write`: update, delete or transform) names, read
    from the raw message (no proto-plus attribute lookups per write)."""
    raw = getattr(write_pb, "_pb", write_pb)
    return str(raw.update.name or raw.delete or raw.transform.document)


class Contention(Exception):
    """A transaction lost to concurrent writers more often than the client retries."""


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
    except ValueError as exc:
        if isinstance(exc.__cause__, api_exceptions.Aborted):
            raise Contention() from exc
        raise
    except (api_exceptions.GoogleAPICallError, api_exceptions.RetryError) as exc:
        raise translated(exc) from exc


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
