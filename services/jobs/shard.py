"""The due index's shards: which shard a job ID belongs to, and how a claim budget is split.

A `shard` field leads the sharded due index (`schema.INDEXES`), so each shard's `due_at`
entries are their own key range; N shards spread the sequential index writes over N ranges
(docs/capacity.md has the arithmetic).
"""

from __future__ import annotations

import hashlib

MAX_SHARDS = 64
# Claim transactions run side by side, at most this many at once, whatever N is.
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
