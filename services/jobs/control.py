"""The operator's control document (`control/scan`): pause, budgets, catch-up rate, timeouts.

The scan reads it at the start of every run; the CLI changes it through
`FirestoreJobStore.update_control`, which validates the change and records who and why.
"""

from __future__ import annotations

import dataclasses
import logging
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any

from services.jobs.errors import ValidationError
from services.jobs.lanes import PAUSES_FIELD, pauses_from_document
from services.jobs.layout import LAYOUT_FIELD, ShardLayout
from services.jobs.ramp import Ramp

CONTROL_HISTORY_LIMIT = 20
MAX_CLAIM_BUDGET = 100_000
# Far above anything a deployment drains at, low enough that rate x interval stays finite.
MAX_CATCH_UP_RATE = 1_000_000.0
# Far above any claim a run could still be publishing, low enough that now - timeout is a date.
MAX_CLAIM_TIMEOUT = timedelta(days=30)
logger = logging.getLogger(__name__)

SETTINGS = frozenset({"paused", "claim_budget", "catch_up_rate", "claim_timeout", "ramp"})
# The control document's map the scan writes after its housekeeping (never an operator).
HOUSEKEEPING_FIELD = "housekeeping"
# The backlog figures a housekeeping run measured, kept with it for the idle runs after it.
BACKLOG_FIGURES = (
    "stuck_claims",
    "stale_enqueued",
    "oldest_enqueued_age_s",
    # The shard census (services/jobs/layout.py): records the shard queries miss, and whether
    # the layout was unknown with some missed (the idle runs repeat both).
    "shard_stranded",
    "shard_layout_unknown",
)


@dataclass(frozen=True)
class ControlChange:
    """One audited change of the control document."""

    at: datetime
    by: str
    reason: str
    changes: Mapping[str, Any]


@dataclass(frozen=True)
class HousekeepingMark:
    """When a scan run last did its housekeeping (reclaim, backlog counts, run record), in
    any instance, and what it measured then. Kept in the control document because the scan
    reads that document once per run anyway: a cold instance knows the mark at no extra read.
    """

    at: datetime
    backlog: Mapping[str, float] = dataclasses.field(default_factory=dict)

    def to_document(self) -> dict[str, Any]:
        return {"at": self.at, "backlog": dict(self.backlog)}

    @classmethod
    def from_document(cls, data: Any) -> HousekeepingMark | None:
        """The stored mark, or None when absent or malformed (then the next run does its
        housekeeping: the safe side)."""
        if data is None:
            return None
        at = data.get("at") if isinstance(data, Mapping) else None
        backlog = data.get("backlog") if isinstance(data, Mapping) else None
        figures = {
            key: value
            for key, value in (backlog.items() if isinstance(backlog, Mapping) else ())
            if key in BACKLOG_FIGURES
            and isinstance(value, int | float)
            and not isinstance(value, bool)
            and 0 <= value < float("inf")
        }
        if not isinstance(at, datetime) or at.tzinfo is None:
            logger.error(
                "control document: %s is malformed; the next run does its housekeeping",
                HOUSEKEEPING_FIELD,
                extra={"fields": {"event": "control_invalid", "setting": HOUSEKEEPING_FIELD}},
            )
            return None
        return cls(at=at.astimezone(UTC), backlog=figures)


@dataclass(frozen=True)
class Control:
    """The scan's operator settings; the defaults apply while the document does not exist."""

    paused: bool = False
    reason: str = ""  # why it was last changed (e.g. why it is paused)
    # At most this many claims per scan run; None: the deployment's own cap
    # (JOBS_SCAN_MAX_PER_RUN, Pulumi key scanMaxPerRun) is the only one, so a stack drains at
    # the rate the operator sets without a second dial to find.
    claim_budget: int | None = None
    catch_up_rate: float = 20.0  # jobs per second the operator allows the backlog to drain at
    claim_timeout: timedelta = timedelta(minutes=10)  # a claim older than this is reclaimed
    changed_by: str | None = None
    changed_at: datetime | None = None
    history: tuple[ControlChange, ...] = ()
    # Written by the scan, not an operator setting; carried through operator changes.
    housekeeping: HousekeepingMark | None = None
    # `jobsctl resume --ramp`: the catch-up rate climbs to `catch_up_rate` by Firestore's
    # 500/50/5 rule (services/jobs/ramp.py); None: the set rate applies at once.
    ramp: Ramp | None = None
    # The shard count the records were last laid out for (services/jobs/layout.py): written by
    # `jobsctl backfill-shards --apply` or adopted by the scan, carried through operator changes.
    shard_layout: ShardLayout | None = None
    # Actions whose dependency asked to wait (429/503 + Retry-After): action -> until. Written
    # by the worker (services/jobs/lanes.py), carried through operator changes; the scan claims
    # none of an action's jobs until its pause ends.
    action_pauses: Mapping[str, datetime] = dataclasses.field(default_factory=dict)

    def per_run_cap(self, deployment_cap: int) -> int:
        """The claims one run may make at most: the deployment's cap, lowered by the
        operator's claim budget when one is set (the scan and jobsctl both ask here)."""
        if self.claim_budget is None:
            return deployment_cap
        return min(deployment_cap, self.claim_budget)

    def rate_at(self, now: datetime) -> float:
        """The catch-up rate in force at `now`: the set rate, or the ramp's below it."""
        if self.ramp is None:
            return self.catch_up_rate
        return self.ramp.rate_at(now, self.catch_up_rate)

    def changed(self, *, by: str, reason: str, at: datetime, **changes: Any) -> Control:
        """A validated copy with `changes` applied and the change audited; ValidationError
        lists every problem."""
        problems = []
        unknown = sorted(set(changes) - SETTINGS)
        if unknown:
            problems.append(f"unknown control setting(s): {', '.join(unknown)}")
        if not by or not by.strip():
            problems.append("by (who changes the control) must be non-empty")
        if not reason or not reason.strip():
            problems.append("reason must be non-empty")
        problems += _setting_problems(changes)
        if problems:
            raise ValidationError(problems)
        if "catch_up_rate" in changes:
            changes["catch_up_rate"] = float(changes["catch_up_rate"])
        entry = ControlChange(at=at, by=by, reason=reason, changes=dict(changes))
        return dataclasses.replace(
            self,
            **changes,
            reason=reason,
            changed_by=by,
            changed_at=at,
            history=(*self.history, entry)[-CONTROL_HISTORY_LIMIT:],
        )

    def to_document(self) -> dict[str, Any]:
        document: dict[str, Any] = {
            "paused": self.paused,
            "reason": self.reason,
            "claim_budget": self.claim_budget,
            "catch_up_rate": self.catch_up_rate,
            "claim_timeout_s": self.claim_timeout.total_seconds(),
            "changed_by": self.changed_by,
            "changed_at": self.changed_at,
            "history": [
                {
                    "at": c.at,
                    "by": c.by,
                    "reason": c.reason,
                    "changes": {k: _plain(v) for k, v in c.changes.items()},
                }
                for c in self.history
            ],
        }
        if self.housekeeping is not None:
            document[HOUSEKEEPING_FIELD] = self.housekeeping.to_document()
        document["ramp"] = self.ramp.to_document() if self.ramp is not None else None
        if self.shard_layout is not None:
            document[LAYOUT_FIELD] = self.shard_layout.to_document()
        if self.action_pauses:
            document[PAUSES_FIELD] = dict(self.action_pauses)
        return document

    @classmethod
    def from_document(cls, data: Mapping[str, Any] | None) -> Control:
        """Parse the document; missing fields (or a missing document) take the defaults.

        A dial stored out of range or with the wrong type (written by something other than
        `update_control`) must not crash every scan run: it takes its default, which the
        deployment's own caps still bound, and is logged as an error. A corrupt `paused`
        flag reads as paused, the safe side: the scan still measures and reports.
        """
        if not data:
            return cls()
        default = cls()
        timeout_s = data.get("claim_timeout_s")
        changed_at = data.get("changed_at")
        stored: dict[str, Any] = {
            "paused": data.get("paused", default.paused),
            "claim_budget": data.get("claim_budget") or default.claim_budget,
            "catch_up_rate": data.get("catch_up_rate") or default.catch_up_rate,
            "claim_timeout": _seconds(timeout_s) if timeout_s else default.claim_timeout,
        }
        settings = {}
        for key, value in stored.items():
            problems = _setting_problems({key: value})
            if problems:
                fallback = True if key == "paused" else getattr(default, key)
                logger.error(
                    "control document: %s; using %r",
                    "; ".join(problems),
                    fallback,
                    extra={"fields": {"event": "control_invalid", "setting": key}},
                )
                value = fallback
            settings[key] = value
        return cls(
            paused=settings["paused"],
            reason=str(data.get("reason") or ""),
            claim_budget=settings["claim_budget"],
            catch_up_rate=float(settings["catch_up_rate"]),
            claim_timeout=settings["claim_timeout"],
            changed_by=data.get("changed_by"),
            changed_at=changed_at.astimezone(UTC) if changed_at else None,
            history=tuple(
                ControlChange(
                    at=c["at"].astimezone(UTC),
                    by=str(c.get("by", "")),
                    reason=str(c.get("reason", "")),
                    changes=dict(c.get("changes") or {}),
                )
                for c in data.get("history") or ()
            ),
            housekeeping=HousekeepingMark.from_document(data.get(HOUSEKEEPING_FIELD)),
            ramp=Ramp.from_document(data.get("ramp")),
            shard_layout=ShardLayout.from_document(data.get(LAYOUT_FIELD)),
            action_pauses=pauses_from_document(data.get(PAUSES_FIELD)),
        )


def _seconds(value: Any) -> Any:
    """A stored claim_timeout_s as a duration, or the raw value when it is no number of
    seconds (so the range check names it)."""
    try:
        return timedelta(seconds=float(value))
    except (TypeError, ValueError, OverflowError):
        return value


def _setting_problems(changes: Mapping[str, Any]) -> list[str]:
    """What is wrong with these control settings' values; the one range check for both
    operator changes and documents read back."""
    problems = []
    if "paused" in changes and not isinstance(changes["paused"], bool):
        problems.append("paused must be true or false")
    if "claim_budget" in changes and changes["claim_budget"] is not None:
        budget = changes["claim_budget"]
        if (
            not isinstance(budget, int)
            or isinstance(budget, bool)
            or not 0 < budget <= MAX_CLAIM_BUDGET
        ):
            problems.append(f"claim_budget must be an integer from 1 to {MAX_CLAIM_BUDGET}")
    if "catch_up_rate" in changes:
        rate = changes["catch_up_rate"]
        if not isinstance(rate, int | float) or isinstance(rate, bool) or not rate > 0:
            problems.append("catch_up_rate must be a number of jobs per second above 0")
        elif rate == float("inf"):
            problems.append("catch_up_rate must be finite")
        elif rate > MAX_CATCH_UP_RATE:
            problems.append(f"catch_up_rate must be at most {MAX_CATCH_UP_RATE:,.0f} jobs/s")
    if "ramp" in changes:
        ramp = changes["ramp"]
        if ramp is not None and not isinstance(ramp, Ramp):
            problems.append("ramp must be a ramp or none")
        elif ramp is not None:
            problems += ramp.problems()
    if "claim_timeout" in changes:
        timeout = changes["claim_timeout"]
        if not isinstance(timeout, timedelta) or timeout <= timedelta(0):
            problems.append("claim_timeout must be a positive duration")
        elif timeout > MAX_CLAIM_TIMEOUT:
            problems.append(f"claim_timeout must be at most {MAX_CLAIM_TIMEOUT.days} d")
    return problems


def _plain(value: Any) -> Any:
    """Control history values as Firestore can store them (durations in seconds)."""
    if isinstance(value, Ramp):
        return value.to_document()
    return value.total_seconds() if isinstance(value, timedelta) else value
