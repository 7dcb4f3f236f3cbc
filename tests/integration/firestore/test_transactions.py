"""Transactions: serializable read-write transactions, read-only ones, expiry, contention."""

from __future__ import annotations

import threading
from collections import Counter
from typing import Any

import pytest
from google.api_core import exceptions
from google.cloud import firestore


def _run_in_threads(count: int, target: Any) -> list[BaseException]:
    errors: list[BaseException] = []

    def guarded(i: int) -> None:
        try:
            target(i)
        except BaseException as exc:  # reported by the test
            errors.append(exc)

    threads = [threading.Thread(target=guarded, args=(i,)) for i in range(count)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    return errors


def _again_after_read_aborts(body: Any, client: Any, *args: Any) -> Any:
    """Run the @transactional ``body`` in fresh transactions until it neither meets a
    read-time ABORTED (@transactional retries only an ABORTED commit) nor runs out of its 5
    commit attempts (ValueError from Aborted): production's callers must retry both, as
    services/store/ does with its contention rounds."""
    for _ in range(99):
        try:
            return body(client.transaction(), *args)
        except exceptions.Aborted:
            continue
        except ValueError as exc:
            if not isinstance(exc.__cause__, exceptions.Aborted):
                raise
    return body(client.transaction(), *args)


@pytest.mark.production_strict("pessimistic locking: contention waits or aborts")
def test_two_threads_of_200_transactional_increments_end_at_400(firestore_client: Any) -> None:
    """Production locks what a transaction reads and delays or aborts one side of a conflict
    (https://cloud.google.com/firestore/docs/transaction-data-contention)."""
    ref = firestore_client.collection("counters").document("c")
    ref.set({"n": 0})

    @firestore.transactional
    def increment(transaction: Any) -> None:
        snap = ref.get(transaction=transaction)
        transaction.update(ref, {"n": snap.get("n") + 1})

    def worker(_: int) -> None:
        for _ in range(200):
            increment(firestore_client.transaction())

    assert _run_in_threads(2, worker) == []
    assert ref.get().get("n") == 400


@pytest.mark.production_strict("pessimistic locking: contention waits or aborts")
@pytest.mark.parametrize("scanners", [2, 8])
def test_concurrent_transactions_claiming_due_documents_claim_each_once(
    firestore_client: Any, scanners: int
) -> None:
    """Production locks what a transaction reads and delays or aborts one side of a conflict
    (https://cloud.google.com/firestore/docs/transaction-data-contention)."""
    jobs = firestore_client.collection("jobs")
    batch = firestore_client.batch()
    for i in range(60):
        batch.set(jobs.document(f"j{i:03}"), {"state": "deferred", "due_at": i})
    batch.commit()
    claims: Counter[str] = Counter()
    lock = threading.Lock()

    @firestore.transactional
    def claim(transaction: Any, scanner: int) -> list[str]:
        query = (
            jobs.where(filter=firestore.FieldFilter("state", "==", "deferred"))
            .where(filter=firestore.FieldFilter("due_at", "<=", 1000))
            .order_by("due_at")
            .limit(5)
        )
        docs = list(query.stream(transaction=transaction))
        for doc in docs:
            transaction.update(doc.reference, {"state": "claimed", "by": scanner})
        return [d.id for d in docs]

    def scanner(i: int) -> None:
        while True:
            ids = _again_after_read_aborts(claim, firestore_client, i)
            if not ids:
                return
            with lock:
                claims.update(ids)

    assert _run_in_threads(scanners, scanner) == []
    assert len(claims) == 60
    assert set(claims.values()) == {1}
    states = {d.get("state") for d in jobs.stream()}
    assert states == {"claimed"}


@pytest.mark.production_strict("pessimistic locking: contention waits or aborts")
def test_a_commit_over_a_changed_read_is_aborted(firestore_client: Any) -> None:
    """Production locks what a transaction reads and delays or aborts one side of a conflict
    (https://cloud.google.com/firestore/docs/transaction-data-contention)."""
    ref = firestore_client.collection("jobs").document("a")
    ref.set({"n": 0})
    transaction = firestore_client.transaction()
    transaction._begin()
    snap = ref.get(transaction=transaction)
    ref.set({"n": 100})  # a conflicting write lands after the read
    transaction.update(ref, {"n": snap.get("n") + 1})
    with pytest.raises(exceptions.Aborted):
        transaction._commit()
    assert ref.get().get("n") == 100


@pytest.mark.production_strict("pessimistic locking: contention waits or aborts")
def test_transactional_retries_after_a_conflict_and_succeeds(firestore_client: Any) -> None:
    """Production locks what a transaction reads and delays or aborts one side of a conflict
    (https://cloud.google.com/firestore/docs/transaction-data-contention)."""
    ref = firestore_client.collection("jobs").document("a")
    ref.set({"n": 0})
    attempts = []

    @firestore.transactional
    def bump(transaction: Any) -> None:
        snap = ref.get(transaction=transaction)
        attempts.append(1)
        if len(attempts) == 1:
            ref.set({"n": 10})  # conflicting outside write during the first attempt
        transaction.update(ref, {"n": snap.get("n") + 1})

    bump(firestore_client.transaction())
    assert len(attempts) == 2
    assert ref.get().get("n") == 11


@pytest.mark.production_strict("pessimistic locking: contention waits or aborts")
def test_a_query_whose_result_changed_aborts_the_commit(firestore_client: Any) -> None:
    """Production locks what a transaction reads and delays or aborts one side of a conflict
    (https://cloud.google.com/firestore/docs/transaction-data-contention)."""
    jobs = firestore_client.collection("jobs")
    jobs.document("a").set({"state": "deferred"})
    transaction = firestore_client.transaction()
    transaction._begin()
    query = jobs.where(filter=firestore.FieldFilter("state", "==", "deferred"))
    docs = list(query.stream(transaction=transaction))
    assert [d.id for d in docs] == ["a"]
    jobs.document("b").set({"state": "deferred"})  # a phantom joins the result set
    transaction.set(jobs.document("summary"), {"count": len(docs)})
    with pytest.raises(exceptions.Aborted):
        transaction._commit()


def test_read_only_transaction_cannot_write(firestore_client: Any) -> None:
    ref = firestore_client.collection("jobs").document("a")
    ref.set({"n": 1})
    transaction = firestore_client.transaction(read_only=True)
    transaction._begin()
    assert ref.get(transaction=transaction).get("n") == 1
    # The client refuses this locally; send the commit over the wire as another client could.
    batch = firestore_client.batch()
    batch.update(ref, {"n": 2})
    with pytest.raises(exceptions.InvalidArgument):
        firestore_client._firestore_api.commit(
            request={
                "database": firestore_client._database_string,
                "writes": batch._write_pbs,
                "transaction": transaction._id,
            }
        )
    assert ref.get().get("n") == 1


def test_read_only_transaction_reads_a_stable_snapshot(firestore_client: Any) -> None:
    ref = firestore_client.collection("jobs").document("a")
    ref.set({"n": 1})
    transaction = firestore_client.transaction(read_only=True)
    transaction._begin()
    assert ref.get(transaction=transaction).get("n") == 1
    ref.set({"n": 2})
    assert ref.get(transaction=transaction).get("n") == 1
    transaction._rollback()


def test_rollback_releases_locks_for_the_next_transaction(firestore_client: Any) -> None:
    ref = firestore_client.collection("jobs").document("a")
    ref.set({"n": 1})
    first = firestore_client.transaction()
    first._begin()
    ref.get(transaction=first)
    first._rollback()
    second = firestore_client.transaction()
    second._begin()
    assert ref.get(transaction=second).get("n") == 1
    second.update(ref, {"n": 2})
    second._commit()
    assert ref.get().get("n") == 2


def test_exception_inside_transactional_function_rolls_back(firestore_client: Any) -> None:
    ref = firestore_client.collection("jobs").document("a")
    ref.set({"n": 1})

    @firestore.transactional
    def fail(transaction: Any) -> None:
        ref.get(transaction=transaction)
        transaction.update(ref, {"n": 2})
        raise RuntimeError("boom")

    with pytest.raises(RuntimeError):
        fail(firestore_client.transaction())
    assert ref.get().get("n") == 1
    ref.update({"n": 3})  # not blocked by a leftover lock
    assert ref.get().get("n") == 3


@pytest.fixture
def private_emulator(monkeypatch: pytest.MonkeyPatch) -> Any:
    """Start a private emulator with the given timeouts; returns a client of it."""
    from emulators.firestore.server import start

    started: list[tuple[Any, Any]] = []

    def make(**timeouts: float) -> Any:
        emulator = start(**timeouts)
        monkeypatch.setenv("FIRESTORE_EMULATOR_HOST", emulator.address)
        client = firestore.Client(project="private")
        started.append((emulator, client))
        return client

    yield make
    for emulator, client in started:
        client.close()
        emulator.stop()


@pytest.fixture
def short_timeouts(private_emulator: Any) -> Any:
    """Transactions expire within a second (idle 0.5 s, total 1 s)."""
    return private_emulator(transaction_timeout_s=1.0, transaction_idle_timeout_s=0.5)


def test_a_transaction_idle_past_its_timeout_is_refused(short_timeouts: Any) -> None:
    import time

    ref = short_timeouts.collection("jobs").document("a")
    ref.set({"n": 1})
    transaction = short_timeouts.transaction()
    transaction._begin()
    ref.get(transaction=transaction)
    time.sleep(0.8)  # idle longer than the 0.5 s idle timeout
    transaction.update(ref, {"n": 2})
    with pytest.raises(exceptions.InvalidArgument, match="expired"):
        transaction._commit()
    assert ref.get().get("n") == 1


def test_a_transaction_older_than_its_total_timeout_is_refused(private_emulator: Any) -> None:
    import time

    client = private_emulator(transaction_timeout_s=0.6, transaction_idle_timeout_s=60)
    ref = client.collection("jobs").document("a")
    ref.set({"n": 1})
    transaction = client.transaction()
    transaction._begin()
    ref.get(transaction=transaction)
    with pytest.raises(exceptions.InvalidArgument, match="expired"):
        for _ in range(8):  # busy, never idle for a minute, but older than 0.6 s
            time.sleep(0.25)
            ref.get(transaction=transaction)


def test_an_expired_transaction_releases_its_locks(short_timeouts: Any) -> None:
    import time

    ref = short_timeouts.collection("jobs").document("a")
    ref.set({"n": 1})
    abandoned = short_timeouts.transaction()
    abandoned._begin()
    ref.get(transaction=abandoned)
    time.sleep(0.8)
    second = short_timeouts.transaction()
    second._begin()
    assert ref.get(transaction=second).get("n") == 1
    second.update(ref, {"n": 2})
    second._commit()
    assert ref.get().get("n") == 2


def test_waiting_for_a_lock_past_the_lock_deadline_is_aborted(private_emulator: Any) -> None:
    client = private_emulator(lock_timeout_s=0.2)
    ref = client.collection("jobs").document("a")
    ref.set({"n": 1})
    holder = client.transaction()
    holder._begin()
    ref.get(transaction=holder)
    waiter = client.transaction()
    waiter._begin()
    with pytest.raises(exceptions.Aborted):
        ref.get(transaction=waiter)
    holder._rollback()


@pytest.mark.production_strict("pessimistic locking: contention waits or aborts")
def test_a_would_be_deadlock_aborts_the_younger_transaction_and_the_older_commits(
    firestore_client: Any,
) -> None:
    """Wound-wait: the older asking for the younger's lock wounds it, so the younger's next
    read answers ABORTED (a read-time abort, as production's can) and its commit would too.
    Production locks what a transaction reads and delays or aborts one side of a conflict
    (https://cloud.google.com/firestore/docs/transaction-data-contention).
    """
    jobs = firestore_client.collection("jobs")
    a, b = jobs.document("a"), jobs.document("b")
    a.set({"n": 0})
    b.set({"n": 0})
    older = firestore_client.transaction()
    older._begin()
    younger = firestore_client.transaction()
    younger._begin()
    a.get(transaction=older)
    b.get(transaction=younger)
    outcome: dict[str, Any] = {}

    def older_side() -> None:
        try:
            b.get(transaction=older)  # waits for younger's lock on b
            older.update(a, {"n": 1})
            older.update(b, {"n": 1})
            older._commit()
            outcome["older"] = "committed"
        except BaseException as exc:
            outcome["older"] = exc

    thread = threading.Thread(target=older_side)
    thread.start()
    with pytest.raises(exceptions.Aborted, match="Too much contention"):
        a.get(transaction=younger, retry=None)  # would close the cycle: the younger loses
    younger.update(a, {"n": 2})
    with pytest.raises(exceptions.Aborted):
        younger._commit()
    thread.join()
    assert outcome["older"] == "committed"
    assert a.get().get("n") == 1 and b.get().get("n") == 1


def test_databases_of_one_project_are_separate(firestore_client: Any) -> None:
    firestore_client.collection("jobs").document("a").set({"db": "default"})
    other = firestore.Client(project=firestore_client.project, database="other-db")
    try:
        ref = other.collection("jobs").document("a")
        assert not ref.get().exists
        ref.set({"db": "other"})
        assert firestore_client.collection("jobs").document("a").get().get("db") == "default"
        assert ref.get().get("db") == "other"
    finally:
        other.close()


def test_new_transaction_on_a_query_returns_a_usable_transaction(firestore_client: Any) -> None:
    jobs = firestore_client.collection("jobs")
    jobs.document("a").set({"state": "deferred"})
    api = firestore_client._firestore_api
    responses = list(
        api.run_query(
            request={
                "parent": firestore_client._database_string + "/documents",
                "structured_query": jobs.where(
                    filter=firestore.FieldFilter("state", "==", "deferred")
                )._to_protobuf(),
                "new_transaction": {"read_write": {}},
            }
        )
    )
    tid = responses[0].transaction
    assert tid
    batch = firestore_client.batch()
    batch.update(jobs.document("a"), {"state": "claimed"})
    api.commit(
        request={
            "database": firestore_client._database_string,
            "writes": batch._write_pbs,
            "transaction": tid,
        }
    )
    assert jobs.document("a").get().get("state") == "claimed"


@pytest.mark.production_strict("pessimistic locking: contention waits or aborts")
def test_concurrent_transfers_between_accounts_preserve_the_total(firestore_client: Any) -> None:
    """Production locks what a transaction reads and delays or aborts one side of a conflict
    (https://cloud.google.com/firestore/docs/transaction-data-contention)."""
    import random

    accounts = firestore_client.collection("accounts")
    refs = [accounts.document(f"acct{i}") for i in range(4)]
    for ref in refs:
        ref.set({"balance": 100})

    @firestore.transactional
    def transfer(transaction: Any, source: Any, target: Any, amount: int) -> None:
        source_balance = source.get(transaction=transaction).get("balance")
        target_balance = target.get(transaction=transaction).get("balance")
        transaction.update(source, {"balance": source_balance - amount})
        transaction.update(target, {"balance": target_balance + amount})

    def worker(seed: int) -> None:
        rng = random.Random(seed)
        for _ in range(25):
            source, target = rng.sample(refs, 2)  # opposite orders make deadlocks likely
            amount = rng.randint(1, 10)
            _again_after_read_aborts(transfer, firestore_client, source, target, amount)

    assert _run_in_threads(4, worker) == []
    assert sum(ref.get().get("balance") for ref in refs) == 400
