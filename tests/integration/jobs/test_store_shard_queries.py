"""With JOBS_SHARDS > 1 every query on a timestamp names its shards (the claim one shard at a
time, other reads one `shard in [...]` group of up to 30), on the emulator serving that N's
index set (no unsharded timestamp index; an unsharded query fails as in production), and
the answers are the ones one unsharded query would give: counts summed, the oldest of the
shards' oldest, listings in one global order with the limit and cursor kept, the reclaims
and the due_at type check reaching every shard."""

from __future__ import annotations

from collections.abc import Callable
from datetime import timedelta
from typing import Any

import pytest
from google.api_core import exceptions as gexc
from google.cloud import firestore

from services.jobs import schema
from services.jobs.clock import FakeClock
from services.jobs.errors import StoreRejected
from services.jobs.shard import shard_of
from services.jobs.state import State
from services.store.job_store import FirestoreJobStore
from tests.integration.jobs.conftest import T0, QueryLog, new_job

SHARDS = 4
TIMEOUT = timedelta(minutes=10)


# 4: one `shard in [...]` group per read; 64: three groups (0-29, 30-59, 60-63) merged here.
@pytest.fixture(params=[SHARDS, 64], ids=["4-shards", "64-shards"])
def sharded(
    request: pytest.FixtureRequest,
    firestore_client: firestore.Client,
    clock: FakeClock,
    shard_indexes: Callable[[int], None],
) -> FirestoreJobStore:
    shards: int = request.param
    shard_indexes(shards)
    log = QueryLog(shards)
    return FirestoreJobStore(firestore_client, clock, query_observer=log, shards=shards)


def _ids(count: int, prefix: str = "job") -> list[str]:
    return [f"{prefix}-{n:03d}" for n in range(count)]


def _schedule(store: FirestoreJobStore, ids: list[str], step: timedelta) -> None:
    # Due times interleave the shards: a global order is not any one shard's.
    outcomes = store.schedule_many([new_job(j, T0 + step * n) for n, j in enumerate(ids)])
    assert all(not isinstance(o, Exception) and o.created for o in outcomes)


@pytest.mark.production_strict("composite-index enforcement")
def test_the_emulator_refuses_the_unsharded_queries_at_four_shards(
    firestore_client: firestore.Client, clock: FakeClock, shard_indexes: Callable[[int], None]
) -> None:
    # The N = 4 index set has no (state, due_at) index: a store left at N = 1 fails, loudly.
    """Production refuses a compound query no composite index serves
    (https://cloud.google.com/firestore/docs/query-data/indexing)."""
    shard_indexes(SHARDS)
    unsharded = FirestoreJobStore(firestore_client, clock)
    with pytest.raises((StoreRejected, gexc.FailedPrecondition)):
        unsharded.backlog(clock.now(), TIMEOUT, TIMEOUT)


def test_stats_and_backlog_sum_the_shards_and_take_the_oldest_of_them(
    sharded: FirestoreJobStore, clock: FakeClock
) -> None:
    ids = _ids(40)
    _schedule(sharded, ids, timedelta(minutes=1))  # due T0, T0+1m, ..., T0+39m
    assert len({shard_of(j, SHARDS) for j in ids}) == SHARDS  # (and more than 30 of 64)
    clock.set(T0 + timedelta(minutes=29, seconds=30))  # 30 due: T0 .. T0+29m
    claimed = sharded.claim_due(clock.now(), "run-1", 5)  # the 5 oldest due... per shard order
    assert len(claimed) == 5
    clock.advance(TIMEOUT + timedelta(seconds=1))  # those 5 claims are stuck now
    now = clock.now()
    due = [j for n, j in enumerate(ids) if T0 + timedelta(minutes=n) <= now]
    left_due = [j for j in due if j not in {c.job_id for c in claimed}]
    oldest = min(T0 + timedelta(minutes=ids.index(j)) for j in left_due)

    stats = sharded.stats(now, TIMEOUT)
    backlog = sharded.backlog(now, TIMEOUT, TIMEOUT)

    assert stats.due_count == backlog.due_count == len(left_due)
    assert stats.stuck_claims == backlog.stuck_claims == 5
    assert stats.per_state[State.DEFERRED] == 35 and stats.per_state[State.CLAIMED] == 5
    expected_age = (now - oldest).total_seconds()
    assert stats.oldest_overdue_age_s == backlog.oldest_overdue_age_s == expected_age


@pytest.mark.parametrize("page_size", [1, 7, 50])
def test_listing_merges_the_shards_into_one_due_order_page_by_page(
    sharded: FirestoreJobStore, page_size: int
) -> None:
    ids = _ids(30)
    # Two jobs per due time: the ID breaks the tie, as Firestore's __name__ order does.
    _schedule(sharded, ids, timedelta(0))
    _schedule(sharded, _ids(10, "late"), timedelta(seconds=1))
    expected = sorted(ids) + sorted(_ids(10, "late"), key=lambda j: int(j.split("-")[1]))
    listed: list[str] = []
    cursor = None
    while True:
        page = sharded.list_jobs(limit=page_size, cursor=cursor)
        assert len(page.jobs) <= page_size
        listed.extend(j.job_id for j in page.jobs)
        cursor = page.next_cursor
        if cursor is None:
            break
    assert listed == expected

    first = sharded.list_jobs(state=State.DEFERRED, due_before=T0 + timedelta(seconds=3), limit=5)
    assert [j.job_id for j in first.jobs] == expected[:5]


@pytest.mark.production_strict("pessimistic locking: concurrent shard claims wait or abort")
def test_reclaims_of_claims_and_of_lost_messages_reach_every_shard_within_the_limit(
    sharded: FirestoreJobStore, clock: FakeClock
) -> None:
    """Production locks what a transaction reads and delays or aborts one side of a conflict
    (https://cloud.google.com/firestore/docs/transaction-data-contention); on Google's emulator
    the 64 shards' concurrent claims claim 16-21 of the 24 due jobs."""
    ids = _ids(24)
    _schedule(sharded, ids, timedelta(0))
    claims = sharded.claim_due(clock.now(), "run-1", 24)
    assert len(claims) == 24
    enqueued = claims[:8]
    marks = sharded.mark_enqueued_many(
        [(c.job_id, c.generation, f"m-{c.job_id}") for c in enqueued]
    )
    assert all(m.error is None for m in marks)
    clock.advance(TIMEOUT + timedelta(seconds=1))

    first = sharded.reclaim_expired(clock.now(), TIMEOUT, 10, "r-1", enqueued_timeout=TIMEOUT)
    assert len(first.reclaimed) == 10  # the limit holds across shards
    rest = sharded.reclaim_expired(clock.now(), TIMEOUT, 100, "r-2", enqueued_timeout=TIMEOUT)

    reclaimed = [r.job_id for r in (*first.reclaimed, *rest.reclaimed)]
    assert sorted(reclaimed) == sorted(ids)  # each once: 16 stuck claims, 8 lost messages
    reasons = {r.job_id: r.reason for r in (*first.reclaimed, *rest.reclaimed)}
    assert {reasons[c.job_id] for c in enqueued} == {"enqueued_timeout"}
    assert sharded.stats(clock.now(), TIMEOUT).per_state[State.DEFERRED] == 24


def test_a_wrong_typed_due_at_is_found_in_whichever_shard_it_sits(
    sharded: FirestoreJobStore, firestore_client: firestore.Client, clock: FakeClock
) -> None:
    ids = _ids(120)
    _schedule(sharded, ids, timedelta(days=1))  # all in the future
    spoiled = {shard_of(j, 64) // 16: j for j in ids}  # one in each quarter of 64 shards
    assert len(spoiled) == 4
    for job_id in spoiled.values():
        firestore_client.collection(schema.JOBS).document(job_id).update({"due_at": "soon"})

    report = sharded.reclaim_expired(clock.now(), TIMEOUT, 10, "reclaimer-1")

    assert sorted(report.quarantined) == sorted(spoiled.values())


@pytest.mark.builtin_emulator("billing counters")
@pytest.mark.parametrize(("shards", "probes"), [(4, 1), (64, 3)])
def test_a_sharded_claim_with_nothing_due_bills_one_read_per_30_shards(
    firestore_client: firestore.Client,
    clock: FakeClock,
    shard_indexes: Callable[[int], None],
    firestore_stats: Any,
    shards: int,
    probes: int,
) -> None:
    shard_indexes(shards)
    store = FirestoreJobStore(
        firestore_client, clock, query_observer=QueryLog(shards), shards=shards
    )
    store.schedule_many([new_job(j, T0 + timedelta(days=1)) for j in _ids(40)])  # all future
    firestore_stats.reset()
    assert store.claim_due(clock.now(), "run-1", 100) == []
    # `shard in [...]` probes (30 shards each) instead of one empty query per shard.
    assert firestore_stats.get()["document_reads"] == probes
    clock.advance(timedelta(days=1, hours=1))
    claimed = store.claim_due(clock.now(), "run-2", 100)
    assert sorted(c.job_id for c in claimed) == _ids(40)
