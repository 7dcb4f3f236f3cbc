"""`jobsctl backfill-shards` against the Firestore emulator: a dry run writes nothing, --apply
gives every non-terminal record shard_of(id, N) and nothing else, a record changed meanwhile is
re-read and never clobbered (with writers running alongside), an interrupted run resumes, and
afterwards a store at N = 4 on the N = 4 index set finds every record."""

from __future__ import annotations

import threading
from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
from google.cloud import firestore

from emulators.firestore.server import Emulator
from services.jobs import schema
from services.jobs.clock import SystemClock
from services.jobs.model import NewJob
from services.jobs.shard import shard_of
from services.jobs.state import State
from services.store.backfill import ShardBackfill
from services.store.job_store import FirestoreJobStore
from tests.integration.cli.conftest import Jobsctl

N = 4
ACTION = "media.delete_source"


def _new(job_id: str, due: timedelta = timedelta(hours=-1)) -> NewJob:
    params = {"object": f"{job_id}/source.mp4"}
    return NewJob(job_id, ACTION, f"media-{job_id}", datetime.now(UTC) + due, params)


def _seed(client: firestore.Client, count: int) -> dict[str, str]:
    """`count` jobs in four kinds: no shard (written before the field), shard 0 (written at
    N = 1), already right for N, and cancelled (terminal: left alone). Returns id -> kind."""
    store = FirestoreJobStore(client, SystemClock())
    kinds = {}
    ids = [f"job-{n:03d}" for n in range(count)]
    outcomes = store.schedule_many([_new(job_id) for job_id in ids])
    assert all(not isinstance(o, Exception) for o in outcomes)
    jobs = client.collection(schema.JOBS)
    for n, job_id in enumerate(ids):
        kind = ("missing", "zero", "right", "terminal")[n % 4]
        kinds[job_id] = kind
        if kind == "missing":
            jobs.document(job_id).update({schema.SHARD: firestore.DELETE_FIELD})
        elif kind == "right":
            jobs.document(job_id).update({schema.SHARD: shard_of(job_id, N)})
        elif kind == "terminal":
            store.cancel(job_id, reason="test", by="test")
    return kinds


def _shards(client: firestore.Client) -> dict[str, Any]:
    return {s.id: (s.to_dict() or {}).get(schema.SHARD) for s in client.collection("jobs").stream()}


def test_a_dry_run_counts_and_writes_nothing(
    jobsctl: Jobsctl, firestore_client: firestore.Client
) -> None:
    kinds = _seed(firestore_client, 40)
    before = _shards(firestore_client)
    run = jobsctl("backfill-shards", "--shards", str(N), "--json")
    assert run.code == 0, run.err
    answer = run.json()
    stale = [j for j, k in kinds.items() if k in ("missing", "zero") and shard_of(j, N) != 0]
    stale += [j for j, k in kinds.items() if k == "missing" and shard_of(j, N) == 0]
    assert answer["applied"] is False
    assert answer["scanned"] == 30  # the 10 cancelled ones are not read
    assert answer["updated"] == len(stale)
    assert answer["already_right"] == 30 - len(stale)
    assert answer["changed_meanwhile"] == 0
    assert _shards(firestore_client) == before


def test_apply_writes_every_non_terminal_shard_then_a_dry_run_finds_nothing(
    jobsctl: Jobsctl,
    firestore_client: firestore.Client,
    shard_indexes: Callable[[int], None],
) -> None:
    kinds = _seed(firestore_client, 40)
    before = {s.id: s.to_dict() for s in firestore_client.collection("jobs").stream()}

    run = jobsctl("backfill-shards", "--shards", str(N), "--apply", "--batch-size", "7")
    assert run.code == 0, run.err
    assert "scanned:" in run.out and "updated:" in run.out and "changed meanwhile:" in run.out
    after = {s.id: s.to_dict() or {} for s in firestore_client.collection("jobs").stream()}
    for job_id, kind in kinds.items():
        if kind == "terminal":
            assert after[job_id] == before[job_id]  # left to its TTL
            continue
        assert after[job_id][schema.SHARD] == shard_of(job_id, N)
        # Only `shard` changed.
        rest = {k: v for k, v in after[job_id].items() if k != schema.SHARD}
        assert rest == {k: v for k, v in (before[job_id] or {}).items() if k != schema.SHARD}
    again = jobsctl("backfill-shards", "--shards", str(N), "--json").json()
    assert (again["scanned"], again["updated"]) == (30, 0)

    # Now a deployment at N = 4 (its index set only) claims every non-terminal record.
    shard_indexes(N)
    store = FirestoreJobStore(firestore_client, SystemClock(), shards=N)
    claimed = store.claim_due(datetime.now(UTC), "run-1", 100)
    assert sorted(c.job_id for c in claimed) == sorted(
        j for j, k in kinds.items() if k != "terminal"
    )


def test_a_record_changed_between_read_and_write_is_reread_not_clobbered(
    firestore_client: firestore.Client, monkeypatch: pytest.MonkeyPatch
) -> None:
    _seed(firestore_client, 8)
    store = FirestoreJobStore(firestore_client, SystemClock())
    moved = datetime.now(UTC) + timedelta(days=3)
    write = ShardBackfill._write
    calls: list[int] = []

    def changed_first(self: ShardBackfill, snapshots: list[Any]) -> list[Any]:
        if not calls:  # another writer changes the first record after the backfill read it
            store.reschedule(snapshots[0].id, moved, reason="meanwhile", by="other")
        calls.append(len(snapshots))
        return write(self, snapshots)

    monkeypatch.setattr(ShardBackfill, "_write", changed_first)
    counts = ShardBackfill(firestore_client, N).run(apply=True)

    assert counts.changed_meanwhile == 1
    assert calls[1] == 1  # the refused one, re-read and written again on its own
    job = store.get("job-000")
    assert job is not None and job.due_at == moved  # the other writer's change stands
    assert job.history[-1].reason.startswith("meanwhile")
    assert _shards(firestore_client)["job-000"] == shard_of("job-000", N)


def test_writers_running_alongside_lose_nothing_and_every_shard_ends_right(
    firestore_client: firestore.Client,
) -> None:
    ids = [f"job-{n:03d}" for n in range(60)]
    store = FirestoreJobStore(firestore_client, SystemClock())
    store.schedule_many([_new(j) for j in ids])
    jobs = firestore_client.collection(schema.JOBS)
    for job_id in ids:
        jobs.document(job_id).update({schema.SHARD: firestore.DELETE_FIELD})
    last: dict[str, datetime] = {}
    done = threading.Event()
    errors: list[BaseException] = []

    def writer(index: int) -> None:
        mine = ids[index::3]
        n = 0
        try:
            while not done.is_set() and n < 200:
                job_id = mine[n % len(mine)]
                due = datetime(2030, 1, 1, tzinfo=UTC) + timedelta(seconds=index * 1000 + n)
                try:
                    store.reschedule(job_id, due, reason=f"w{index}-{n}", by="writer")
                    last[job_id] = due
                except Exception as exc:  # contention with the backfill: that write is lost
                    if "contention" not in str(exc).lower() and "race" not in str(exc).lower():
                        raise
                n += 1
        except BaseException as exc:
            errors.append(exc)

    threads = [threading.Thread(target=writer, args=(i,)) for i in range(3)]
    for thread in threads:
        thread.start()
    try:
        counts = ShardBackfill(firestore_client, N, batch_size=5).run(apply=True)
    finally:
        done.set()
        for thread in threads:
            thread.join()
    assert errors == []
    assert counts.scanned >= len(ids)
    for job_id in ids:
        job = store.get(job_id)
        assert job is not None and job.state is State.DEFERRED
        if job_id in last:
            assert job.due_at == last[job_id]  # no writer's last change was overwritten
    # Whatever the writers did, a second pass leaves every shard right.
    ShardBackfill(firestore_client, N).run(apply=True)
    assert _shards(firestore_client) == {j: shard_of(j, N) for j in ids}


def test_a_resumed_run_reads_only_what_comes_after_its_position(
    jobsctl: Jobsctl, firestore_client: firestore.Client
) -> None:
    kinds = _seed(firestore_client, 40)
    live = sorted(j for j, k in kinds.items() if k != "terminal")
    middle = jobsctl(
        "backfill-shards", "--shards", str(N), "--resume", f"deferred:{live[14]}", "--json"
    ).json()
    assert middle["scanned"] == len(live) - 15
    assert middle["by_state"] == {"deferred": len(live) - 15}


@pytest.mark.builtin_emulator("fault injection")
def test_an_interrupted_cli_run_prints_the_resume_command(
    jobsctl: Jobsctl, firestore_client: firestore.Client, firestore_emulator: Emulator
) -> None:
    kinds = _seed(firestore_client, 40)
    # The first batch's write succeeds, the second fails.
    writes = ShardBackfill._write
    calls = []

    def second_fails(self: ShardBackfill, snapshots: list[Any]) -> list[Any]:
        calls.append(1)
        if len(calls) == 2:
            firestore_emulator.inject_fault("BatchWrite", "UNAVAILABLE", count=1)
        return writes(self, snapshots)

    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(ShardBackfill, "_write", second_fails)
        run = jobsctl("backfill-shards", "--shards", str(N), "--apply", "--batch-size", "10")
    firestore_emulator.clear_faults()
    assert run.code == 3, run.err
    live = sorted(j for j, k in kinds.items() if k != "terminal")
    position = f"deferred:{live[9]}"  # after the first batch of 10
    assert f"resume: jobsctl backfill-shards --shards 4 --apply --resume {position}" in run.err
    rest = jobsctl("backfill-shards", "--shards", str(N), "--apply", "--resume", position)
    assert rest.code == 0, rest.err
    assert jobsctl("backfill-shards", "--shards", str(N), "--json").json()["updated"] == 0


@pytest.mark.parametrize(
    ("argv", "named"),
    [
        ([], "--shards"),
        (["--shards", "0"], "--shards"),
        (["--shards", "65"], "--shards"),
        (["--shards", "4", "--batch-size", "501"], "--batch-size"),
        (["--shards", "4", "--resume", "done:job-1"], "--resume"),
        (["--shards", "4", "--resume", "deferred"], "--resume"),
    ],
)
def test_bad_flags_are_usage_errors_naming_the_flag(
    jobsctl: Jobsctl, argv: list[str], named: str
) -> None:
    run = jobsctl("backfill-shards", *argv)
    assert run.code == 2
    assert named in run.err
