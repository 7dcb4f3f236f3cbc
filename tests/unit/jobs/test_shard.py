"""The due index's shards: a stable hash, an even split, the setting, the record field."""

from __future__ import annotations

import collections
import hashlib
from datetime import UTC, datetime

import pytest

from services.edge.settings import SHARDS, CommonSettings, EnvReader, SettingsError
from services.jobs.model import NewJob
from services.jobs.record import Job, decode_job
from services.jobs.shard import MAX_SHARDS, read_parts, shard_of, spend_over_shards, split_budget

NOW = datetime(2026, 1, 1, tzinfo=UTC)


def test_the_shard_is_a_sha256_prefix_mod_n_stable_across_processes() -> None:
    # Python's salted hash() would differ between the API's and the scan's processes.
    assert shard_of("job-0", 1) == 0
    digest = hashlib.sha256(b"order-42").digest()
    assert shard_of("order-42", 4) == int.from_bytes(digest[:8], "big") % 4


def test_ids_spread_over_every_shard() -> None:
    counts = collections.Counter(shard_of(f"job-{i}", 4) for i in range(4000))
    assert set(counts) == {0, 1, 2, 3}
    assert min(counts.values()) > 800  # 1,000 each expected; a skew this large means a bug


@pytest.mark.parametrize("bad", [0, -1, MAX_SHARDS + 1, True])
def test_a_shard_count_out_of_range_is_refused(bad: int) -> None:
    with pytest.raises(ValueError, match="shards"):
        shard_of("x", bad)


@pytest.mark.parametrize(
    ("budget", "shards", "shares"),
    [(10, 4, [3, 3, 2, 2]), (3, 4, [1, 1, 1, 0]), (0, 2, [0, 0]), (200, 1, [200])],
)
def test_the_budget_splits_evenly_and_adds_up(budget: int, shards: int, shares: list[int]) -> None:
    assert split_budget(budget, shards) == shares
    assert sum(split_budget(budget, shards)) == budget


def test_jobs_shards_defaults_to_one_and_is_bounded() -> None:
    assert CommonSettings.read(EnvReader({"JOBS_PROJECT": "p"})).shards == 1
    assert CommonSettings.read(EnvReader({"JOBS_PROJECT": "p", SHARDS: "4"})).shards == 4
    for bad in ("0", str(MAX_SHARDS + 1), "four"):
        env = EnvReader({"JOBS_PROJECT": "p", SHARDS: bad})
        CommonSettings.read(env)
        with pytest.raises(SettingsError, match=SHARDS):
            env.finish()


def _new(job_id: str) -> NewJob:
    return NewJob(job_id, "media.delete_source", "media-1", NOW, {"bucket": "b", "objects": ["a"]})


def test_a_new_record_carries_its_shard_and_reads_back() -> None:
    job = Job.create(_new("job-7"), NOW, shards=4)
    assert job.shard == shard_of("job-7", 4)
    document = job.to_document()
    assert document["shard"] == job.shard
    assert Job.from_document("job-7", document).shard == job.shard


def test_a_record_written_before_the_field_is_shard_zero() -> None:
    document = Job.create(_new("job-7"), NOW, shards=4).to_document()
    del document["shard"]
    assert Job.from_document("job-7", document).shard == 0


@pytest.mark.parametrize("bad", ["1", -1, 1.5, True])
def test_a_malformed_shard_is_an_invalid_record(bad: object) -> None:
    from services.jobs.errors import InvalidRecord

    document = Job.create(_new("job-7"), NOW).to_document()
    document["shard"] = bad
    with pytest.raises(InvalidRecord, match="shard"):
        decode_job("job-7", document)


def test_a_budget_below_the_shard_count_still_reaches_every_shard() -> None:
    # 3 jobs in each of 64 shards, a budget of 100: the shards without a share in the first
    # round (budget 100 over 64 gives 36 of them 2 and 28 of them 1) keep their turn.
    held = {shard: 3 for shard in range(64)}

    def take(shard: int, share: int) -> list[int]:
        got = min(share, held[shard])
        held[shard] -= got
        return [shard] * got

    taken, errors = spend_over_shards(100, range(64), take)
    assert len(taken) == 100 and errors == []
    taken, _ = spend_over_shards(1000, range(64), take)
    assert len(taken) == 64 * 3 - 100 and set(held.values()) == {0}
    # A budget of 24 over 64 shards holding one job each in shards 40-63 only.
    sparse = {shard: (1 if shard >= 40 else 0) for shard in range(64)}

    def take_sparse(shard: int, share: int) -> list[int]:
        got = min(share, sparse[shard])
        sparse[shard] -= got
        return [shard] * got

    taken, _ = spend_over_shards(24, range(64), take_sparse)
    assert sorted(taken) == list(range(40, 64))


def test_reads_cover_the_shards_in_groups_one_in_filter_can_list() -> None:
    assert read_parts(1) == [None]
    assert read_parts(4) == [(0, 1, 2, 3)]
    groups = read_parts(64)
    assert [len(g) for g in groups if g is not None] == [30, 30, 4]
    assert [s for g in groups if g is not None for s in g] == list(range(64))
