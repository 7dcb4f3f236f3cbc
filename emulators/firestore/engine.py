"""The emulator's state and its consistency rules: databases, transactions, document locks.

Concurrency model (see docs/firestore-emulator.md): one condition variable guards all state
and is held only for short, non-blocking work; a transaction that must wait for a document
lock waits on the condition, which releases it. Reads and queries inside a read-write
transaction take an exclusive lock on every document they return (or name, for a missing
document). Conflicts follow wound-wait: an older transaction asking for a younger one's lock
wounds it (its locks are released, its next read or its commit answers ABORTED); a younger one
waits. A transaction keeps the age of the one it retries (``retry_transaction``), so it
eventually becomes the oldest and wins. Reads can also abort at a configured rate.
Non-transactional writes do not wait: they take precedence and abort the holders. At commit,
every document read and every query's result set is checked to be unchanged (a safety net
that also catches phantoms); any change answers ABORTED.
"""

from __future__ import annotations

import itertools
import os
import random
import threading
import time
from collections import OrderedDict
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any, TypeVar

from google.protobuf.message import DecodeError

from emulators import snapshot
from emulators.firestore.call import Call
from emulators.firestore.database import Database, Document, Stored
from emulators.firestore.errors import Aborted, Cancelled, DeadlineExceeded, InvalidArgument
from emulators.firestore.indexes import Exemption
from emulators.firestore.mutation import Outcome, apply, micros, written_name
from emulators.firestore.names import DatabaseKey
from emulators.firestore.query import Query, Result, count_by_index, run
from emulators.journal import Journal

LockKey = tuple[DatabaseKey, str]
T = TypeVar("T")
_EXPIRED = "The referenced transaction has expired or is no longer valid."
# Production's wording for a transaction that lost to contention
# (https://cloud.google.com/firestore/docs/transaction-data-contention).
CONTENTION = "Too much contention on these documents. Please try again."
_FINISHED_KEPT = 10_000
# How often a waiting handler looks whether its caller is still there. Polling rather than a
# gRPC termination callback: the callback would take the state lock from gRPC's own thread
# while a handler holding the state lock asks gRPC whether the call is active (lock order).
_POLL_S = 0.1
_NOBODY = Call()


@dataclass(eq=False)
class Transaction:
    id: bytes
    database: DatabaseKey
    read_only: bool
    read_us: int | None  # snapshot time of a read-only transaction
    priority: tuple[int, int]  # smaller = older; kept across retries
    started: float
    last_used: float
    active: int = 0
    wounded: bool = False
    finished: bool = False
    locks: set[LockKey] = field(default_factory=set)
    reads: dict[str, int] = field(default_factory=dict)  # name -> update micros (0 = missing)
    queries: list[tuple[Query, list[tuple[str, int]]]] = field(default_factory=list)


@dataclass
class Consistency:
    """How a read is to be served: in a transaction, starting one, at a time, or latest."""

    transaction: bytes | None = None
    new_transaction: Any | None = None  # TransactionOptions pb
    read_us: int | None = None


def _no_exemptions(key: DatabaseKey) -> frozenset[Exemption]:
    return frozenset()


class Engine:
    """All databases of one emulator process, and the transactions running against them."""

    def __init__(
        self,
        transaction_timeout_s: float = 270.0,
        transaction_idle_timeout_s: float = 60.0,
        lock_timeout_s: float = 20.0,
        read_abort_rate: float = 0.0,
        seed: int | None = None,
    ) -> None:
        if not 0.0 <= read_abort_rate <= 1.0:
            raise InvalidArgument("read_abort_rate must be between 0 and 1.")
        self.read_abort_rate = read_abort_rate
        self.random_read_aborts = 0
        self._random = random.Random(seed)
        self.transaction_timeout_s = transaction_timeout_s
        self.transaction_idle_timeout_s = transaction_idle_timeout_s
        self.lock_timeout_s = lock_timeout_s
        self.cond = threading.Condition(threading.Lock())
        self.databases: dict[DatabaseKey, Database] = {}
        self.transactions: dict[bytes, Transaction] = {}
        self.finished: OrderedDict[bytes, tuple[int, int]] = OrderedDict()
        self.owners: dict[LockKey, Transaction] = {}
        self._last_us = 0
        self._seq = itertools.count()
        # Strict mode: the single-field index exemptions serving a database (server.start
        # sets it from the loaded index definitions).
        self.exemptions: Callable[[DatabaseKey], frozenset[Exemption]] = _no_exemptions
        # With a data directory: every change is logged before it is applied, and every
        # answer waits until what it reports is on disk (emulators/journal.py).
        self.journal: Journal | None = None
        self._compact_after = False

    # -- time and databases ------------------------------------------------------------------

    def now_us(self) -> int:
        """A strictly increasing commit clock in microseconds (call with the lock held)."""
        now = time.time_ns() // 1000
        self._last_us = max(now, self._last_us + 1)
        return self._last_us

    def database(self, key: DatabaseKey) -> Database:
        db = self.databases.get(key)
        if db is None:
            db = Database(key, self.exemptions(key))
            self.databases[key] = db
        return db

    def refresh_exemptions(self, project: str) -> None:
        """Re-read the exemptions of a project's databases (its index definitions changed)."""
        with self.cond:
            for key, db in self.databases.items():
                if key[0] == project:
                    db.set_unindexed(self.exemptions(key))

    def reset(self, project: str | None = None, database: str | None = None) -> None:
        """Drop documents (of one project/database, or everything) and their transactions."""
        with self.cond:
            self._log({"reset": [project, database]})
            self._reset(project, database)
        self._settle()

    def _reset(self, project: str | None, database: str | None) -> None:
        for key in list(self.databases):
            if (project is None or key[0] == project) and (database is None or key[1] == database):
                del self.databases[key]
        for txn in list(self.transactions.values()):
            if project is None or txn.database[0] == project:
                self._finish(txn)
        self.cond.notify_all()

    # -- persistence ------------------------------------------------------------------------

    def export_state(self) -> dict[str, Any]:
        """Every database's current documents (transactions and old versions are not kept:
        a restart ends every transaction, as a lost connection would)."""
        with self.cond:
            return self._export()

    def _export(self) -> dict[str, Any]:
        databases = []
        for (project, database), db in sorted(self.databases.items()):
            docs = [[snapshot.encode(s.doc), s.update_us] for s in db.docs.values()]
            if docs:
                databases.append({"project": project, "database": database, "docs": docs})
        return {"databases": databases}

    def replay(self, record: dict[str, Any]) -> int:
        """Apply one logged change (see :meth:`_apply`); the documents it wrote."""
        with self.cond:
            try:
                if "reset" in record:
                    project, database = record["reset"]
                    self._reset(project, database)
                    return 0
                db = self.database((str(record["db"][0]), str(record["db"][1])))
                update_us = int(record["us"])
                for name, encoded in record["puts"]:
                    doc = None if encoded is None else snapshot.decode(Document, encoded)
                    db.put(str(name), doc, update_us)
                self._last_us = max(self._last_us, update_us)
                return len(record["puts"])
            except (KeyError, TypeError, ValueError, IndexError, DecodeError) as exc:
                raise snapshot.SnapshotError(
                    f"malformed Firestore log record {record.get('seq')}: {exc!r}"
                ) from exc

    def checkpoint(self) -> None:
        """Fold the log into a new snapshot now (a clean stop does)."""
        if self.journal is not None:
            with self.cond:
                self.journal.compact(self._export())

    def _log(self, change: dict[str, Any]) -> None:
        """Log ``change`` before it is applied (lock held); compacts a log grown too long."""
        if self.journal is not None and self.journal.append(change):
            self._compact_after = True

    def _settle(self) -> None:
        """Wait until every change logged so far is on disk (lock NOT held)."""
        if self.journal is not None:
            if self._compact_after:
                with self.cond:
                    if self._compact_after:
                        self._compact_after = False
                        self.journal.compact(self._export())
            self.journal.settle()

    def import_state(self, state: dict[str, Any]) -> int:
        """Load what :meth:`export_state` saved; the number of documents."""
        count = 0
        with self.cond:
            try:
                for entry in state["databases"]:
                    db = self.database((str(entry["project"]), str(entry["database"])))
                    for encoded, update_us in entry["docs"]:
                        doc = snapshot.decode(Document, encoded)
                        db.put(doc.name, doc, int(update_us))
                        self._last_us = max(self._last_us, int(update_us))
                        count += 1
            except (KeyError, TypeError, ValueError, DecodeError) as exc:
                raise snapshot.SnapshotError(f"malformed Firestore state: {exc!r}") from exc
        return count

    # -- transactions -----------------------------------------------------------------------

    def begin(self, database: DatabaseKey, options: Any | None) -> bytes:
        with self.cond:
            self._reap()
            return self._begin(database, options).id

    def _begin(self, database: DatabaseKey, options: Any) -> Transaction:
        now = time.monotonic()
        read_only = False
        read_us: int | None = None
        priority = (time.monotonic_ns(), next(self._seq))
        mode = options.WhichOneof("mode") if options is not None else None
        if mode == "read_only":
            read_only = True
            if options.read_only.HasField("read_time"):
                read_us = self._check_read_time(micros(options.read_only.read_time))
            else:
                read_us = self.now_us()
        elif mode == "read_write" and options.read_write.retry_transaction:
            retried = options.read_write.retry_transaction
            # Keep the retried transaction's place in line. It is normally finished already;
            # if it is still live (another thread shares the client's retry state) leave it be.
            previous = self.transactions.get(retried)
            if previous is not None:
                priority = previous.priority
            elif retried in self.finished:
                priority = self.finished[retried]
        txn = Transaction(
            id=os.urandom(16),
            database=database,
            read_only=read_only,
            read_us=read_us,
            priority=priority,
            started=now,
            last_used=now,
        )
        self.transactions[txn.id] = txn
        return txn

    def _check_read_time(self, read_us: int) -> int:
        if read_us > self.now_us():
            raise InvalidArgument("read_time cannot be in the future.")
        return read_us

    def rollback(self, database: DatabaseKey, tid: bytes) -> None:
        with self.cond:
            txn = self.transactions.get(tid)
            if txn is None:
                if tid in self.finished:
                    return
                raise InvalidArgument(_EXPIRED)
            if txn.database != database:
                raise InvalidArgument("Transaction belongs to another database.")
            self._finish(txn)
            self.cond.notify_all()

    def end(self, tid: bytes) -> None:
        """End a live transaction as an ABORTED answer does: locks released, nothing applied."""
        with self.cond:
            txn = self.transactions.get(tid)
            if txn is not None:
                self._finish(txn)
                self.cond.notify_all()

    def _expired(self, txn: Transaction, now: float) -> bool:
        if now - txn.started > self.transaction_timeout_s:
            return True
        return txn.active == 0 and now - txn.last_used > self.transaction_idle_timeout_s

    def _reap(self) -> None:
        now = time.monotonic()
        expired = [t for t in self.transactions.values() if self._expired(t, now)]
        for txn in expired:
            self._finish(txn)
        if expired:
            self.cond.notify_all()

    def _finish(self, txn: Transaction) -> None:
        txn.finished = True
        self._release(txn)
        self.transactions.pop(txn.id, None)
        self.finished[txn.id] = txn.priority
        while len(self.finished) > _FINISHED_KEPT:
            self.finished.popitem(last=False)

    def _release(self, txn: Transaction) -> None:
        for key in txn.locks:
            if self.owners.get(key) is txn:
                del self.owners[key]
        txn.locks.clear()

    @contextmanager
    def _using(self, database: DatabaseKey, tid: bytes) -> Iterator[Transaction]:
        """Look up a live transaction (lock held) and mark it busy while the call runs."""
        txn = self.transactions.get(tid)
        now = time.monotonic()
        if txn is not None and self._expired(txn, now):
            self._finish(txn)
            self.cond.notify_all()
            txn = None
        if txn is None:
            raise InvalidArgument(_EXPIRED)
        if txn.database != database:
            raise InvalidArgument("Transaction belongs to another database.")
        txn.active += 1
        try:
            yield txn
        finally:
            txn.active -= 1
            txn.last_used = time.monotonic()

    # -- locks ------------------------------------------------------------------------------

    def _wound(self, victim: Transaction) -> None:
        victim.wounded = True
        self._release(victim)
        self.cond.notify_all()

    def _try_acquire(self, txn: Transaction, key: LockKey, take: bool = True) -> bool:
        """Take ``key`` for ``txn`` if possible without waiting; False means wait.

        Wound-wait, as production's pessimistic transactions: an older transaction asking
        for a lock a younger one holds wounds the younger (its locks are released at once;
        its next read or its commit answers ABORTED); a younger one waits for an older one.
        Waits only ever go from younger to older, so no deadlock can form.
        With ``take=False`` only report whether it is free: a query that waited re-runs and
        locks its new result instead of a document it may no longer return.
        """
        while True:
            if txn.finished:
                # Rolled back, expired or committed while this call waited: a finished
                # transaction never takes a lock (it would hold it for nobody).
                raise InvalidArgument(_EXPIRED)
            if txn.wounded:
                raise Aborted(CONTENTION)
            owner = self.owners.get(key)
            if owner is None or owner is txn:
                if take:
                    self.owners[key] = txn
                    txn.locks.add(key)
                return True
            if self._expired(owner, time.monotonic()):
                self._finish(owner)
                self.cond.notify_all()
                continue
            if owner.priority < txn.priority:
                return False  # the holder is older: wait for it
            self._wound(owner)

    def _abort_at_random(self, txn: Transaction) -> None:
        """With probability ``read_abort_rate``, abort ``txn`` at this read (as contention
        can in production), so the callers' handling of a read-time ABORTED gets exercised."""
        if self.read_abort_rate > 0 and self._random.random() < self.read_abort_rate:
            self.random_read_aborts += 1
            self._wound(txn)
            raise Aborted(CONTENTION)

    def _wait_for(
        self, txn: Transaction, key: LockKey, deadline: float, call: Call, take: bool = True
    ) -> None:
        """Wait (lock released) until ``key`` is free, ``txn`` is doomed or finished, the
        lock deadline passes, or the caller is gone (cancelled, or its own deadline passed)."""
        while not self._try_acquire(txn, key, take):
            if not call.active():
                if call.deadline is not None and time.monotonic() >= call.deadline:
                    raise DeadlineExceeded("Deadline exceeded.")
                raise Cancelled("The caller cancelled the request.")
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                raise Aborted("Transaction lock timeout.")
            self.cond.wait(min(remaining, _POLL_S))

    def _acquire(self, txn: Transaction, key: LockKey, deadline: float, call: Call) -> None:
        if not self._try_acquire(txn, key):
            self._wait_for(txn, key, deadline, call)

    def held_locks(self) -> int:
        """How many document locks are held right now (every one by a live transaction)."""
        with self.cond:
            return len(self.owners)

    # -- reads ------------------------------------------------------------------------------

    @contextmanager
    def _reading(
        self, database: DatabaseKey, consistency: Consistency
    ) -> Iterator[tuple[Transaction | None, bytes | None, int | None]]:
        """Yield (transaction or None, new transaction id, snapshot micros or None=latest)."""
        if consistency.read_us is not None:
            yield None, None, self._check_read_time(consistency.read_us)
            return
        new_id: bytes | None = None
        tid = consistency.transaction
        if consistency.new_transaction is not None:
            txn = self._begin(database, consistency.new_transaction)
            tid = new_id = txn.id
        if tid is None:
            yield None, None, None
            return
        with self._using(database, tid) as txn:
            yield txn, new_id, txn.read_us

    def get_documents(
        self,
        database: DatabaseKey,
        names: list[str],
        consistency: Consistency,
        call: Call = _NOBODY,
    ) -> tuple[list[Stored | None], int, bytes | None]:
        """Latest (or snapshot) versions of ``names``; locks them in a read-write transaction."""
        with self.cond, self._reading(database, consistency) as (txn, new_id, read_us):
            db = self.database(database)
            if txn is not None and not txn.read_only:
                self._abort_at_random(txn)
                deadline = time.monotonic() + self.lock_timeout_s
                for name in names:
                    self._acquire(txn, (database, name), deadline, call)
            docs = [db.get(name, read_us) for name in names]
            if txn is not None and not txn.read_only:
                for name, stored in zip(names, docs, strict=True):
                    txn.reads.setdefault(name, stored.update_us if stored else 0)
            answer = docs, read_us if read_us is not None else self.now_us(), new_id
        self._settle()  # never show a client a change that is not on disk yet
        return answer

    def run_query(
        self,
        database: DatabaseKey,
        query: Query,
        consistency: Consistency,
        ordered: bool = True,
        call: Call = _NOBODY,
    ) -> tuple[Result, int, bytes | None]:
        """Run ``query``; in a read-write transaction, lock what it returns, re-running after
        any wait so the result reflects the latest committed state."""
        with self.cond, self._reading(database, consistency) as (txn, new_id, read_us):
            db = self.database(database)
            if txn is None or txn.read_only:
                result = run(db, query, read_us, ordered)
                answer = result, read_us if read_us is not None else self.now_us(), new_id
            else:
                answer = self._locking_query(txn, database, db, query, ordered, call, new_id)
        self._settle()  # never show a client a change that is not on disk yet
        return answer

    def _locking_query(
        self,
        txn: Transaction,
        database: DatabaseKey,
        db: Database,
        query: Query,
        ordered: bool,
        call: Call,
        new_id: bytes | None,
    ) -> tuple[Result, int, bytes | None]:
        self._abort_at_random(txn)
        deadline = time.monotonic() + self.lock_timeout_s
        while True:
            result = run(db, query, None, ordered)
            blocked = None
            for stored in result.docs:
                if not self._try_acquire(txn, (database, stored.name)):
                    blocked = (database, stored.name)
                    break
            if blocked is None:
                break
            self._wait_for(txn, blocked, deadline, call, take=False)
        signature = sorted((s.name, s.update_us) for s in result.docs)
        txn.queries.append((query, signature))
        for stored in result.docs:
            txn.reads.setdefault(stored.name, stored.update_us)
        return result, self.now_us(), new_id

    def count(self, database: DatabaseKey, query: Query) -> tuple[int, int] | None:
        """(matches, read time) of a latest-state count the indexes answer, else None."""
        with self.cond:
            counted = count_by_index(self.database(database), query)
            answer = None if counted is None else (counted, self.now_us())
        self._settle()
        return answer

    def with_snapshot(
        self,
        database: DatabaseKey,
        consistency: Consistency,
        read: Callable[[Database, int | None], T],
    ) -> tuple[T, int]:
        """Run an unlocked read (listing) under the state lock; returns (result, read time)."""
        with self.cond, self._reading(database, consistency) as (_, _, read_us):
            result = read(self.database(database), read_us)
            answer = result, read_us if read_us is not None else self.now_us()
        self._settle()
        return answer

    # -- writes -----------------------------------------------------------------------------

    def commit(
        self, database: DatabaseKey, writes: list[Any], tid: bytes | None, call: Call = _NOBODY
    ) -> tuple[int, list[Outcome]]:
        """Apply ``writes`` atomically; in a transaction, only if nothing it read has changed.
        Answers once the change is on disk (with a data directory)."""
        answer = self._commit(database, writes, tid, call)
        self._settle()
        return answer

    def _commit(
        self, database: DatabaseKey, writes: list[Any], tid: bytes | None, call: Call
    ) -> tuple[int, list[Outcome]]:
        with self.cond:
            if tid is None:
                return self._write_now(database, writes)
            names = [written_name(w, database) for w in writes]
            with self._using(database, tid) as txn:
                try:
                    if txn.read_only and writes:
                        raise InvalidArgument("Cannot modify entities in a read-only transaction.")
                    deadline = time.monotonic() + self.lock_timeout_s
                    for name in names:
                        self._acquire(txn, (database, name), deadline, call)
                    if txn.wounded:
                        raise Aborted(CONTENTION)
                    self._validate(txn)
                    return self._apply(database, writes, names)
                finally:
                    self._finish(txn)
                    self.cond.notify_all()

    def _write_now(self, database: DatabaseKey, writes: list[Any]) -> tuple[int, list[Outcome]]:
        """Apply non-transactional ``writes`` atomically (lock held): they do not wait for
        document locks, they take precedence and abort the holders."""
        names = [written_name(w, database) for w in writes]
        for name in names:
            owner = self.owners.get((database, name))
            if owner is not None:
                self._wound(owner)
        return self._apply(database, writes, names)

    def _validate(self, txn: Transaction) -> None:
        db = self.database(txn.database)
        for name, seen in txn.reads.items():
            current = db.docs.get(name)
            if (current.update_us if current else 0) != seen:
                raise Aborted(f"Document {name} changed since this transaction read it.")
        for query, signature in txn.queries:
            now = sorted((s.name, s.update_us) for s in run(db, query, None, False).docs)
            if now != signature:
                raise Aborted("A query's result changed since this transaction ran it.")

    def _apply(
        self, database: DatabaseKey, writes: list[Any], names: list[str]
    ) -> tuple[int, list[Outcome]]:
        db = self.database(database)
        commit_us = self.now_us()
        staged: dict[str, Stored | None] = {}
        outcomes = []
        for write, name in zip(writes, names, strict=True):
            current = staged[name] if name in staged else db.get(name)
            outcome = apply(write, name, current, commit_us)
            outcomes.append(outcome)
            staged[name] = (
                Stored(outcome.doc, micros(outcome.doc.update_time)) if outcome.doc else None
            )
        changed = [outcome for outcome in outcomes if outcome.changed]
        if changed:
            # Logged before it is applied: a change the log cannot take is never applied.
            puts = [[o.name, snapshot.encode(o.doc) if o.doc else None] for o in changed]
            self._log({"db": list(database), "us": commit_us, "puts": puts})
        for outcome in outcomes:
            if outcome.changed:
                db.put(outcome.name, outcome.doc, commit_us, outcome.touched)
        return commit_us, outcomes

    def batch_write(
        self, database: DatabaseKey, writes: list[Any]
    ) -> list[tuple[Outcome | None, Exception | None]]:
        """Apply each write on its own (non-atomic), reporting a status per write.

        One hold of the state lock for the whole request: each write still succeeds or fails
        alone, with its own commit time; no other request runs between them, one of the
        interleavings production allows ("does not apply the write operations atomically
        and can apply them out of order",
        https://cloud.google.com/firestore/docs/reference/rest/v1/projects.databases.documents/batchWrite).
        """
        results: list[tuple[Outcome | None, Exception | None]] = []
        with self.cond:
            for write in writes:
                try:
                    _, outcomes = self._write_now(database, [write])
                    results.append((outcomes[0], None))
                except Exception as exc:  # each write gets its own status
                    results.append((None, exc))
        self._settle()
        return results
