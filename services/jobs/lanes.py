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

A **target lane** is a budget and a pause for one target of an action (http.request's HTTP
targets, `params.target`): its key is `action/target` (`http.request/trials`), its query
`action == A and params.target == T`. The action's other jobs (unrated targets) stay in the
action's own lane, when it has one, or in the rest, each leaving out the targets with lanes of
their own (`params.target not-in [...]`). A 429 from target T pauses the key `A/T`: only T's
jobs wait.

Standard library only: the scan plans its lanes from here, the worker decides here whether a
pause is worth a write, and `jobsctl` shows both.
"""

from __future__ import annotations

import math
import threading
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any, Protocol

# Firestore's `not-in` takes at most 10 values
# (https://firebase.google.com/docs/firestore/query-data/queries#limitations): the rest lane
# can leave out at most this many actions, so at most this many actions may have a rate.
MAX_LANES = 10
# A lane key `action/target`: the jobs of `action` whose `params.target` is `target` (action
# names and target names never hold a "/").
TARGET_SEPARATOR = "/"
# The control document's map of pauses: lane key (action, or action/target) -> until.
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


def lane_key(action: str, target: str | None = None) -> str:
    """The key of `action`'s lane, or of its lane for one target (`http.request/trials`)."""
    return action if target is None else f"{action}{TARGET_SEPARATOR}{target}"


def lane_keys_of(action: str, params: Mapping[str, Any]) -> tuple[str, ...]:
    """The lane keys a job of `action` with `params` belongs to: its action's, and its
    target's when its params name one (`params.target`, as http.request's do)."""
    target = params.get("target")
    return (action, lane_key(action, target)) if isinstance(target, str) else (action,)


def key_parts(key: str) -> tuple[str, str | None]:
    """(action, target) of a lane key; target None for an action's own key."""
    action, separator, target = key.partition(TARGET_SEPARATOR)
    return action, (target or None) if separator else None


def lane_label(key: str) -> str:
    """A lane key as an operator reads it: `rest`, `media.delete_source`, or
    `http.request target trials`."""
    if key == REST:
        return "rest"
    action, target = key_parts(key)
    return action if target is None else f"{action} target {target}"


def not_in_weight(keys: Iterable[str]) -> int:
    """What a set of lane keys asks of Firestore's not-in limit: one per lane (target lanes
    counted), plus one per action whose targets have lanes but which has none of its own (the
    rest leaves it out as well). Both not-in lists of a plan (the rest's `action not-in`, an
    action's `params.target not-in`) are at most this long."""
    keys = set(keys)
    actions = {key for key in keys if key_parts(key)[1] is None}
    split = {key_parts(key)[0] for key in keys if key_parts(key)[1] is not None} - actions
    return len(keys) + len(split)


def claim_rates(
    catalogue: CatalogueRates, extra: Mapping[str, float] | None = None
) -> dict[str, float]:
    """Each lane's claim rate (jobs/s): the catalogue's budgets, then `extra` (the
    deployment's own rates: an HTTP target's `rate` under its key `http.request/T`, or an
    action's), the lower of the two where both name a key. Raises ValueError on a rate <= 0
    or past MAX_LANES (`not_in_weight`), naming the keys beyond it."""
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
    weight = not_in_weight(rates)
    if weight > MAX_LANES:
        fitting: set[str] = set()
        beyond = []
        for key in sorted(rates):
            if not_in_weight(fitting | {key}) <= MAX_LANES:
                fitting.add(key)
            else:
                beyond.append(key)
        raise ValueError(
            f"at most {MAX_LANES} claim lanes fit Firestore's not-in limit (a target lane "
            "counts, and so does its action when it has no rate of its own); "
            f"{len(rates)} keys have a rate (actions, and targets as action/target), "
            f"weighing {weight}; beyond the limit: {', '.join(beyond)}"
        )
    return dict(sorted(rates.items()))


@dataclass(frozen=True)
class ClaimFilter:
    """Which due jobs a claim takes: one action's (`action`), or every action but `exclude`
    (the rest lane). The empty filter is every due job (no lanes: the claim of before).

    With `action`: `target` narrows it to one target's jobs (`params.target == T`), or
    `exclude_targets` leaves the targets with lanes of their own out (`params.target not-in`).
    With `exclude`: `also` names further filters the lane claims from, sharing its budget (the
    rest's share of an action whose targets have lanes but which has no lane of its own)."""

    action: str | None = None
    exclude: tuple[str, ...] = ()
    target: str | None = None
    exclude_targets: tuple[str, ...] = ()
    also: tuple[ClaimFilter, ...] = ()

    def __post_init__(self) -> None:
        if self.action is not None and self.exclude:
            raise ValueError("a claim filter names one action or excludes some, not both")
        if len(self.exclude) > MAX_LANES:
            raise ValueError(f"a claim filter excludes at most {MAX_LANES} actions")
        if (self.target is not None or self.exclude_targets) and self.action is None:
            raise ValueError("a claim filter names targets only with their action")
        if self.target is not None and self.exclude_targets:
            raise ValueError("a claim filter names one target or excludes some, not both")
        if len(self.exclude_targets) > MAX_LANES:
            raise ValueError(f"a claim filter excludes at most {MAX_LANES} targets")
        if self.also and not self.exclude:
            raise ValueError("only the rest lane (an exclude) claims from further filters")
        if any(part.action is None or part.also for part in self.also):
            raise ValueError("a further filter names one action")

    @property
    def everything(self) -> bool:
        return self.action is None and not self.exclude

    def parts(self) -> tuple[ClaimFilter, ...]:
        """The filters this one claims from: itself without `also`, then each of `also`."""
        if not self.also:
            return (self,)
        return (ClaimFilter(exclude=self.exclude), *self.also)


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
    """The lanes of one run: one per key with a rate (an action, or an action's target,
    `A/T`; paused ones with limit 0), one per other paused key (limit 0), then the rest, which
    leaves out every laned and paused action. An action's own lane leaves out its targets
    that have lanes; an action with target lanes but no lane of its own has its other jobs in
    the rest (`also`). Pauses past MAX_LANES (`not_in_weight`) wait, the oldest first in: a
    pause that does not fit is logged by the caller and waits for the next run. A target
    lane is paused by its own pause or its action's, whichever ends later. With no rate and
    no pause: one lane, every due job, `rest_limit`: the run of before."""
    active = active_pauses(pauses, now)
    keys = set(rates)
    for key in sorted((k for k in active if k not in rates), key=lambda k: (active[k], k)):
        if not_in_weight(keys | {key}) <= MAX_LANES:
            keys.add(key)
    lanes = []
    for key in sorted(keys):
        action, target = key_parts(key)
        ends = [until for until in (active.get(key), active.get(action)) if until is not None]
        until = max(ends) if target is not None and ends else active.get(key)
        rate = rates.get(key)
        if until is not None or rate is None:
            limit = 0
        else:
            limit = share(lane_limit(rate, catch_up_rate, interval_s, cap), partition, partitions)
        if target is None:
            claims = ClaimFilter(action=action, exclude_targets=_laned_targets(action, keys))
        else:
            claims = ClaimFilter(action=action, target=target)
        lanes.append(LaneBudget(key, claims, limit, rate, until))
    actions = {key for key in keys if key_parts(key)[1] is None}
    split = sorted({key_parts(key)[0] for key in keys} - actions)
    also = tuple(
        ClaimFilter(action=action, exclude_targets=_laned_targets(action, keys)) for action in split
    )
    rest = ClaimFilter(exclude=tuple(sorted(actions | set(split))), also=also)
    lanes.append(LaneBudget(REST, rest, rest_limit, None))
    return tuple(lanes)


def _laned_targets(action: str, keys: Iterable[str]) -> tuple[str, ...]:
    return tuple(
        sorted(
            target
            for owner, target in map(key_parts, keys)
            if owner == action and target is not None
        )
    )


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

    def live_until(self, keys: Sequence[str], now: datetime) -> datetime | None:
        """The latest end of a pause this process recorded for any of `keys` that still holds
        at `now`, or None."""
        with self._lock:
            live = [until for key in keys if (until := self._until.get(key)) and until > now]
        return max(live, default=None)

    def forget(self, action: str) -> None:
        """The write failed: the next 429 tries again."""
        with self._lock:
            self._until.pop(action, None)
