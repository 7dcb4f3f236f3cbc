"""The parts of a job record (`record.Job`): its claim, its lease, a cancel request, an error
and a result, as immutable values; `record` holds the job itself and the codec.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any


@dataclass(frozen=True)
class Claim:
    """The latest claim. Kept after the job leaves `claimed` so `generation` keeps counting."""

    run_id: str
    claimed_at: datetime
    generation: int


@dataclass(frozen=True)
class Lease:
    """One delivery's hold on a running job: what every worker transition after `start`
    presents. `token` is new on every `start` (per delivery, never per process), so a stale
    delivery in the same instance is refused like any other; `update_time` is the commit
    time of the write that last set the lease (`start` or a heartbeat)."""

    job_id: str
    generation: int
    token: str
    owner: str
    until: datetime
    update_time: datetime | None = None


@dataclass(frozen=True)
class CancelRequest:
    """An operator's request to cancel a running job; the worker honours it."""

    reason: str
    by: str
    at: datetime


@dataclass(frozen=True)
class ErrorInfo:
    """An error as recorded in `last_error`; `at` is filled in by the store."""

    code: str
    message: str
    at: datetime | None = None


@dataclass(frozen=True)
class Result:
    """The outcome of the side effect; `completed_at` is filled in by the store."""

    outcome: str
    details: Mapping[str, Any] = field(default_factory=dict)
    completed_at: datetime | None = None
