"""Claim lanes: a budget per action, and the pauses a dependency's 429 asks for (issue 32, item 4).

A scan run claims due jobs in **lanes**. Each action with a rate (its `Budget.per_second` in the
catalogue, or a rate the deployment adds) is a lane of its own: its own query (`action == A`),
its own budget (`min(rate, catch-up rate) x interval`, the partition's share of it) and, in a
paced run, its own token bucket. Everything else is the **rest** lane: the global catch-up
budget over every due job whose action is not a lane's and not paused (`action not-in [...]`).
So one action's backlog never fills another's pages, and a limited action drains at its rate
while the others drain at the catch-up rate.

A **pause** is what a dependency's `429`/`503` + `Retry-After` asks for: the worker records
`until` for the action (at most once per pause window: `PauseBook`), and every scan run reads
the pauses with the control document and claims none of that action's jobs until `until`.

Standard library only: the scan plans its lanes from here, the worker decides here whether a
pause is worth a write, and `jobsctl` shows both.
"""

from __future__ import annotations

import math
import threading
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any, Protocol

# Firestore's `not-in` takes at most 10 values
# (https://firebase.google.com/docs/firestore/query-data/queries#limitations): the rest lane
# can leave out at most this many actions, so at most this many actions may have a rate.
MAX_LANES = 10
# The control document's map of pauses: action -> until (a timestamp).
PAUSES_FIELD = "action_pauses"
# A Retry-After is honoured within these bounds: at least a second, at most an hour (a
# dependency asking for longer is treated as asking for an hour; the next 429 extends it).
MIN_PAUSE = timedelta(seconds=1)
MAX_PAUSE = timedelta(hours=1)
# The worker writes a pause again only when it ends later than the recorded one by more than
# this: a burst of 429s with the same Retry-After is one write, not one per job.
PAUSE_SLACK = timedelta(seconds=5)


class CatalogueRates(Protocol):
    """What `claim_rates` needs of the catalogue (services/jobs/catalogue.py)."""

    def actions(self) -> Iterable[Any]: ...


def claim_rates(
    catalogue: CatalogueRates, extra: Mapping[str, float] | None = None
) -> dict[str, float]:
    """Each action's claim rate (jobs/s): the catalogue's budgets, then `extra` (the
    deployment's own rates, e.g. an HTTP target's `rate` for its action), the lower of the two
    where both name an action. Raises ValueError past MAX_LANES or on a rate <= 0."""
    rates: dict[str, float] = {}
    for action in catalogue.actions():
        budget = getattr(action, "budget", None)
        if budget is not None:
            rates[action.name] = float(budget.per_second)
    for name, rate in (extra or {}).items():
        rates[name] = min(rates.get(name, math.inf), float(rate))
    bad = sorted(name for name, rate in rates.items() if not rate > 0 or math.isnan(rate))
    if bad:
        raise ValueError(f"claim rates must be above 0 jobs/s: {', '.join(bad)}")
    if len(rates) > MAX_LANES:
        raise ValueError(
            f"{len(rates)} actions have a claim rate; at most {MAX_LANES} may "
            "(Firestore's not-in takes 10 values)"
        )
    return dict(sorted(rates.items()))


@dataclass(frozen=True)
class ClaimFilter:
    """Which due jobs a claim takes: one action's (`action`), or every action but `exclude`
    (the rest lane). The empty filter is every due job (no lanes: the claim of before)."""

    action: str | None = None
    exclude: tuple[str, ...] = ()

    def __post_init__(self) -> None:
        if self.action is not None and self.exclude:
            raise ValueError("a claim filter names one action or excludes some, not both")
        if len(self.exclude) > MAX_LANES:
            raise ValueError(f"a claim filter excludes at most {MAX_LANES} actions")

    @property
    def everything(self) -> bool:
        return self.action is None and not self.exclude


EVERYTHING = ClaimFilter()
REST = "*"  # the rest lane's key in a run's figures


@dataclass(frozen=True)
class LaneBudget:
    """One lane of a run: its key (an action, or REST), what it claims, its budget in jobs,
    its rate (jobs/s; None for the rest: the catch-up budget's own), and the pause keeping it
    from claiming (`paused_until`, None when it claims)."""

    key: str
    claims: ClaimFilter
    limit: int
    rate_per_s: float | None
    paused_until: datetime | None = None

    @property
    def paused(self) -> bool:
        return self.paused_until is not None


def lane_limit(rate_per_s: float, catch_up_rate: float | None, interval_s: float, cap: int) -> int:
    """A lane's budget for one run: floor(min(its rate, the catch-up rate) x interval), never
    above the deployment's per-run cap."""
    rate = rate_per_s if catch_up_rate is None else min(rate_per_s, catch_up_rate)
    return max(0, min(cap, math.floor(rate * interval_s + 1e-9)))


def share(limit: int, partition: int, partitions: int) -> int:
    """Partition `partition`'s share of `limit` (evenly, the remainder to the first ones)."""
    whole, extra = divmod(limit, partitions)
    return whole + (1 if partition < extra else 0)


def plan_lanes(
    rates: Mapping[str, float],
    pauses: Mapping[str, datetime],
    now: datetime,
    *,
    rest_limit: int,
    catch_up_rate: float | None,
    interval_s: float,
    cap: int,
    partition: int = 0,
    partitions: int = 1,
) -> tuple[LaneBudget, ...]:
    """The lanes of one run: one per action with a rate (paused ones with limit 0), then the
    rest, which leaves out every laned action and every other paused one (the oldest pauses
    first past MAX_LANES: Firestore's `not-in` limit; a pause that does not fit is logged by
    the caller and waits for the next run). With no rate and no pause: one lane, every due
    job, `rest_limit`: the run of before."""
    active = active_pauses(pauses, now)
    lanes = []
    for action, rate in sorted(rates.items()):
        until = active.get(action)
        limit = (
            0
            if until
            else share(lane_limit(rate, catch_up_rate, interval_s, cap), partition, partitions)
        )
        lanes.append(LaneBudget(action, ClaimFilter(action=action), limit, rate, until))
    room = MAX_LANES - len(lanes)
    others = sorted((a for a in active if a not in rates), key=lambda a: (active[a], a))[:room]
    for action in others:
        lanes.append(LaneBudget(action, ClaimFilter(action=action), 0, None, active[action]))
    exclude = tuple(sorted(lane.key for lane in lanes))
    lanes.append(LaneBudget(REST, ClaimFilter(exclude=exclude), rest_limit, None))
    return tuple(lanes)


def active_pauses(pauses: Mapping[str, datetime], now: datetime) -> dict[str, datetime]:
    """The pauses still in force at `now` (a pause ends at its `until`)."""
    return {action: until for action, until in pauses.items() if until > now}


def pause_until(now: datetime, delay_s: float) -> datetime:
    """When a pause asked for at `now` with Retry-After `delay_s` ends, within the bounds."""
    delay = timedelta(seconds=delay_s) if math.isfinite(delay_s) else MAX_PAUSE
    return now + min(MAX_PAUSE, max(MIN_PAUSE, delay))


def pauses_from_document(data: Any) -> dict[str, datetime]:
    """The control document's pauses; entries that are not action -> timestamp are dropped
    (a malformed pause must never stop claims for good)."""
    if not isinstance(data, Mapping):
        return {}
    return {
        str(action): until.astimezone(UTC)
        for action, until in data.items()
        if isinstance(action, str) and isinstance(until, datetime) and until.tzinfo is not None
    }


def merged_pauses(
    stored: Mapping[str, datetime], action: str, until: datetime, now: datetime
) -> dict[str, datetime] | None:
    """The pauses map to store after `action` asked to pause until `until`: ended pauses
    dropped, the later `until` kept; None when the stored pause already covers it (within
    PAUSE_SLACK): nothing to write."""
    current = active_pauses(stored, now)
    known = current.get(action)
    if known is not None and known + PAUSE_SLACK >= until:
        return None
    current[action] = until if known is None else max(known, until)
    return current


class PauseBook:
    """What one worker process last recorded per action, so a burst of 429s is one write per
    pause window (per instance), not one per job. Thread-safe."""

    def __init__(self) -> None:
        self._until: dict[str, datetime] = {}
        self._lock = threading.Lock()

    def needs_write(self, action: str, until: datetime) -> bool:
        """Whether a pause of `action` until `until` goes beyond what this process recorded
        (then it is noted as recorded: the caller writes it)."""
        with self._lock:
            known = self._until.get(action)
            if known is not None and known + PAUSE_SLACK >= until:
                return False
            self._until[action] = until
            return True

    def forget(self, action: str) -> None:
        """The write failed: the next 429 tries again."""
        with self._lock:
            self._until.pop(action, None)
