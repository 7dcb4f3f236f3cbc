"""The scan request: its body (empty, or a small JSON object of known options) and the two
Cloud Scheduler headers that name the scheduled execution it belongs to.

Cloud Scheduler sends whatever body the job is configured with; the operator may send
`{"dry_run": true}` to measure without claiming, and a partitioned deployment's jobs send
`{"partition": k}`. Anything else is refused with a message that says exactly what was wrong,
so a misconfigured scheduler job is obvious in its logs.

This is the one place in the scan that reads `X-CloudScheduler-JobName` and
`X-CloudScheduler-ScheduleTime`. Cloud Scheduler delivers at least once: a run slower than the
attempt deadline is retried while it still runs, and a lost acknowledgement repeats a request
even with no retries; the schedule time is "constant across all retries of the same scheduled
execution", so the pair tells a duplicate apart
(https://cloud.google.com/scheduler/docs/configuring/deduplicate-job-requests). A forced run
(`gcloud scheduler jobs run`) may carry no schedule time, or the next one's.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any

from services.edge.auth import RequestHeaders

# The headers Cloud Scheduler adds to every HTTP-target request (the page cited above), named
# once for the scan and the local Cloud Scheduler (emulators/scheduler) that sends them.
from services.edge.scheduler_request import JOB_NAME_HEADER, SCHEDULE_TIME_HEADER

# The largest body we read; a valid one is a few dozen bytes.
MAX_BODY_BYTES = 1024

# Allowed keys and the Python type each value must have.
ALLOWED_KEYS: dict[str, type] = {"dry_run": bool, "partition": int}
# Partitions are numbered 0..k-1 (services/scan/partitions.py bounds k).
MAX_PARTITION = 63

# A JOB_ID is at most 500 characters (Job.name, Cloud Scheduler API reference); an RFC 3339
# time is about 30.
MAX_JOB_NAME = 500
MAX_SCHEDULE_TIME = 64


# Cloud Scheduler dispatches a scheduled execution at its schedule time or after it, never
# before; a forced run (jobs.run) "may use the timestamp of the next scheduled execution" (the
# dedup page above). A request this far ahead of its ScheduleTime is therefore a forced run:
# remembering it as that execution would make the real one, when it comes, a "duplicate" that
# claims nothing for a whole interval. It still takes its partition's lease like any run.
FORCED_RUN_LEAD = timedelta(seconds=5)


class TriggerError(ValueError):
    """The scan request body is not empty or a JSON object of known options."""

    def __init__(self, message: str | None = None) -> None:
        super().__init__(message or (self.__doc__ or "").strip())


@dataclass(frozen=True)
class Execution:
    """The scheduled execution a request belongs to, as Cloud Scheduler's headers name it."""

    job_name: str
    schedule_time: datetime

    @property
    def key(self) -> str:
        """What a duplicate shares: the job and the scheduled time (normalised to UTC)."""
        return f"{self.job_name}@{self.schedule_time.isoformat()}"


@dataclass(frozen=True)
class Trigger:
    """What one scan request asks for."""

    dry_run: bool = False
    partition: int = 0
    # None: not a scheduled execution (a manual call, or a forced run without the header).
    execution: Execution | None = None


def parse_execution(headers: RequestHeaders | None) -> Execution | None:
    """The scheduled execution named by the request's headers, or None when it names none.
    A header present but malformed is refused (TriggerError): only a caller other than Cloud
    Scheduler sends one, and silently ignoring it would turn off the duplicate check."""
    if headers is None:
        return None
    name = headers.get(JOB_NAME_HEADER)
    when = headers.get(SCHEDULE_TIME_HEADER)
    if name is None or when is None:
        return None
    problems = []
    if not name.strip() or len(name) > MAX_JOB_NAME:
        problems.append(f"{JOB_NAME_HEADER} must be 1-{MAX_JOB_NAME} characters")
    try:
        if len(when) > MAX_SCHEDULE_TIME:
            raise ValueError(when)
        parsed = datetime.fromisoformat(when.strip().replace("Z", "+00:00"))
        if parsed.tzinfo is None:
            raise ValueError(when)
    except ValueError:
        problems.append(
            f"{SCHEDULE_TIME_HEADER} must be an RFC 3339 time with an offset "
            "(e.g. 2026-10-16T12:00:00Z)"
        )
    if problems:
        raise TriggerError("; ".join(problems))
    return Execution(name.strip(), parsed.astimezone(UTC))


def scheduled_execution(execution: Execution | None, now: datetime) -> Execution | None:
    """`execution` when the request can be that scheduled execution (or its retry); None for a
    forced run carrying the next execution's time (it arrived before that time)."""
    if execution is None or execution.schedule_time > now + FORCED_RUN_LEAD:
        return None
    return execution


def parse_trigger(body: bytes, headers: RequestHeaders | None = None) -> Trigger:
    """A Trigger from the raw request body and headers; raises TriggerError with the reason."""
    execution = parse_execution(headers)
    if len(body) > MAX_BODY_BYTES:
        raise TriggerError(f"body is larger than {MAX_BODY_BYTES} bytes")
    if not body.strip():
        return Trigger(execution=execution)
    try:
        text = body.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise TriggerError("body is not UTF-8 text") from exc
    try:
        payload: Any = json.loads(text)
    except json.JSONDecodeError as exc:
        raise TriggerError(f"body is not valid JSON: {exc.msg} at position {exc.pos}") from exc
    except RecursionError as exc:
        # 1 KiB of "[" nests deeper than the interpreter allows; it is bad input, not a crash.
        raise TriggerError("body is not valid JSON: nested too deeply") from exc
    if not isinstance(payload, dict):
        raise TriggerError(f"body must be a JSON object (or empty), got {type(payload).__name__}")
    problems = [f"unknown key {key!r}" for key in sorted(payload) if key not in ALLOWED_KEYS]
    for key, expected in ALLOWED_KEYS.items():
        if key in payload and type(payload[key]) is not expected:
            problems.append(f"{key!r} must be a JSON {_json_type(expected)}")
    partition = payload.get("partition", 0)
    if type(partition) is int and not 0 <= partition <= MAX_PARTITION:
        problems.append(f"'partition' must be from 0 to {MAX_PARTITION}")
    if problems:
        allowed = ", ".join(sorted(ALLOWED_KEYS))
        raise TriggerError("; ".join(problems) + f" (allowed keys: {allowed})")
    return Trigger(
        dry_run=bool(payload.get("dry_run", False)),
        partition=int(partition),
        execution=execution,
    )


def _json_type(python_type: type) -> str:
    return {bool: "boolean", int: "number", str: "string"}.get(python_type, python_type.__name__)
