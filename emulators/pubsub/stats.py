"""Counters of what the emulator did, for tests, the admin endpoint and benchmarks."""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field
from typing import Any


@dataclass
class Stats:
    """Counts since start or the last reset; the broker mutates them under its lock."""

    published: int = 0
    delivered: int = 0
    acknowledged: int = 0
    nacked: int = 0
    redelivered: int = 0
    expired: int = 0
    dead_lettered: int = 0
    push_attempts_by_status: Counter[str] = field(default_factory=Counter)

    def snapshot(self) -> dict[str, Any]:
        return {
            "published": self.published,
            "delivered": self.delivered,
            "acknowledged": self.acknowledged,
            "nacked": self.nacked,
            "redelivered": self.redelivered,
            "expired": self.expired,
            "dead_lettered": self.dead_lettered,
            "push_attempts_by_status": dict(self.push_attempts_by_status),
        }
