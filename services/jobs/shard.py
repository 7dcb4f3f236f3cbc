"""The jobs indexes' shards: which shard a job ID belongs to, how a budget is split over the
shards, and how one query runs on every shard.

With N > 1 a `shard` field stands before the timestamp in every jobs index
(`schema.composite_indexes(N)`), so each shard's entries are their own key range; N shards
spread the sequential index writes over N ranges (docs/capacity.md has the arithmetic). Every
query that orders or ranges on a timestamp names its shards: the claim runs once per shard,
every other read once per group of up to 30 (`read_parts`). `fan_out` runs one function per
part on a bounded pool, `spend_over_shards` spends a budget (a claim's, a reclaim's) over the
parts that still have work.
"""

from __future__ import annotations

import contextvars
import hashlib
from collections.abc import Callable, Sequence
from concurrent import futures
from typing import TypeVar

T = TypeVar("T")
P = TypeVar("P")
# What one query covers: one shard, a group of shards (`shard in [...]`), or None (every
# record, the unsharded query of N = 1).
Part = int | tuple[int, ...] | None

MAX_SHARDS = 64
# Values one `in` filter may list: Firestore takes at most 30 disjunctions in a query's filter
# (https://firebase.google.com/docs/firestore/query-data/queries#limits_on_or_queries).
MAX_IN_VALUES = 30
# Per-shard queries and claim transactions run side by side, at most this many at once,
# whatever N is.
MAX_SHARD_WORKERS = 8


def require_shards(shards: int) -> int:
    """`shards` when it is a valid count (1..MAX_SHARDS), else ValueError."""
    if isinstance(shards, bool) or not isinstance(shards, int) or not 1 <= shards <= MAX_SHARDS:
        raise ValueError(f"shards must be an integer in 1..{MAX_SHARDS}, got {shards!r}")
    return shards


def shard_of(job_id: str, shards: int) -> int:
    """The shard of `job_id` among `shards`: the first 8 bytes of its SHA-256, mod `shards`.

    Stable across processes and versions (unlike Python's salted `hash`), so every producer
    (store.schedule, schedule_many, the API through the store) writes the same shard for one
    ID."""
    digest = hashlib.sha256(job_id.encode()).digest()
    return int.from_bytes(digest[:8], "big") % require_shards(shards)


def split_budget(budget: int, shards: int) -> list[int]:
    """`budget` split over `shards` as evenly as integers allow, the remainder to the first
    ones: 10 over 4 is [3, 3, 2, 2]; the shares always add up to `budget`."""
    base, extra = divmod(max(budget, 0), require_shards(shards))
    return [base + (1 if index < extra else 0) for index in range(shards)]


def shard_groups(shards: int) -> list[tuple[int, ...]]:
    """Shards 0..N-1 in groups one `in` filter can list: 64 is [0..29], [30..59], [60..63]."""
    every = range(require_shards(shards))
    return [tuple(every[n : n + MAX_IN_VALUES]) for n in range(0, shards, MAX_IN_VALUES)]


def read_parts(shards: int) -> list[Part]:
    """What a read (a count, an "oldest", a listing page, a reclaim page) runs over: [None]
    (the unsharded query) with one shard, else one `shard in [...]` group per 30 shards. An
    `in` filter counts as an equality for the indexes, so (state, shard, <timestamp>) serves
    it, and Firestore merges the group's shards in the query's order itself: Google's
    sharded-timestamp example queries its shards this way
    (https://cloud.google.com/firestore/docs/solutions/shard-timestamp). So N <= 30 costs
    what N = 1 does; the claim alone runs shard by shard, for its parallel transactions."""
    return [None] if require_shards(shards) == 1 else list(shard_groups(shards))


def fan_out(parts: Sequence[P], run: Callable[[P], T]) -> list[T]:
    """run(part) for every part, the results in order: a single part in this thread, more on a
    pool of at most MAX_SHARD_WORKERS. Each call runs in a copy of the caller's context (its
    log fields). The first exception raised is re-raised, once every call has ended."""
    if len(parts) == 1:
        return [run(parts[0])]
    with futures.ThreadPoolExecutor(
        min(len(parts), MAX_SHARD_WORKERS), thread_name_prefix="shard"
    ) as pool:
        calls = [pool.submit(contextvars.copy_context().run, run, part) for part in parts]
        futures.wait(calls)
    return [call.result() for call in calls]


def spend_over_shards(
    budget: int,
    parts: Sequence[P],
    take: Callable[[P, int], list[T]],
    tolerated: tuple[type[Exception], ...] = (),
) -> tuple[list[T], list[Exception]]:
    """Spend `budget` over `parts` (shards, or groups of them): each round splits what is left
    evenly over the parts still full and calls take(part, share) for each, at most
    MAX_SHARD_WORKERS at once. A part that returns less than its share is done, and what it
    left goes to the others in the next round, as do parts that got no share (a budget below
    the number of parts); so the items add up to `budget` whenever that many exist.
    Exceptions of the `tolerated` types end that part and are returned; others propagate."""
    taken: list[T] = []
    errors: list[Exception] = []
    active = list(parts)
    with futures.ThreadPoolExecutor(
        max(1, min(len(active), MAX_SHARD_WORKERS)), thread_name_prefix="shard"
    ) as pool:
        while active and len(taken) < budget:
            shares = split_budget(budget - len(taken), len(active))
            rounds = [
                (part, share, pool.submit(contextvars.copy_context().run, take, part, share))
                for part, share in zip(active, shares, strict=True)
                if share > 0
            ]
            # A part left without a share this round (budget below the parts) waits for the
            # next one; only a part that came back short is done.
            active = [part for part, share in zip(active, shares, strict=True) if share == 0]
            for part, share, call in rounds:
                try:
                    items = call.result()
                except tolerated as exc:
                    errors.append(exc)
                    continue
                taken.extend(items)
                if len(items) == share:
                    active.append(part)
    return taken, errors
