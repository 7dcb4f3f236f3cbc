"""A file of jobs for `jobsctl schedule --from FILE|-`: JSON lines, one job each.

Each line is an object with `subject` and either `job_id` or `decision` (the job ID is then
derived from action + subject + decision, as `--decision` does), and optionally `action`
(default: the catalogue's first action), `params` (a map, checked against the action's schema),
`due` (`now`, `+30d`, ISO 8601; default now), `max_attempts` and `idempotency_key`. Blank lines
are skipped. A line that cannot be a job is refused with its line number; the others go on.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from services.cli.timespec import TimeSpecError, parse_time
from services.jobs.catalogue import built_in
from services.jobs.ids import derive_job_id
from services.jobs.model import NewJob
from services.jobs.record import DEFAULT_MAX_ATTEMPTS

KEYS = frozenset(
    {"job_id", "decision", "action", "subject", "params", "due", "max_attempts", "idempotency_key"}
)
MAX_LINE_BYTES = 64 * 1024  # a job's params are at most 16 KiB; anything far larger is a mistake


@dataclass(frozen=True)
class Line:
    """One line of the file: the job it asks for, or why it cannot be one."""

    number: int
    job: NewJob | None = None
    refusal: str | None = None
    job_id: str | None = None


def read_lines(
    lines: Iterable[str], now: datetime, default_action: str | None = None
) -> list[Line]:
    """Every non-blank line as a Line, numbered from 1 as an editor shows them."""
    parsed = []
    for number, text in enumerate(lines, start=1):
        if text.strip():
            parsed.append(parse_line(number, text, now, default_action))
    return parsed


def parse_line(number: int, text: str, now: datetime, default_action: str | None = None) -> Line:
    if len(text.encode("utf-8", errors="replace")) > MAX_LINE_BYTES:
        return Line(number, refusal=f"longer than {MAX_LINE_BYTES} bytes")
    try:
        data = json.loads(text)
    except json.JSONDecodeError as exc:
        return Line(number, refusal=f"not JSON: {exc.msg} at column {exc.colno}")
    if not isinstance(data, dict):
        return Line(number, refusal="not a JSON object")
    job_id = data.get("job_id") if isinstance(data.get("job_id"), str) else None
    problems = _problems(data)
    if problems:
        return Line(number, refusal="; ".join(problems), job_id=job_id)
    try:
        due_at = parse_time(data.get("due", "now"), now)
    except TimeSpecError as exc:
        return Line(number, refusal=f"due: {exc}", job_id=job_id)
    action = data.get("action", default_action or built_in().default())
    if "decision" in data:
        job_id = derive_job_id(action, data["subject"], data["decision"])
    job = NewJob(
        job_id=str(job_id),
        action=action,
        subject=data["subject"],
        due_at=due_at,
        params=data.get("params", {}),
        max_attempts=data.get("max_attempts", DEFAULT_MAX_ATTEMPTS),
        idempotency_key=data.get("idempotency_key"),
    )
    return Line(number, job=job, job_id=job.job_id)


def _problems(data: Mapping[str, Any]) -> list[str]:
    """What the line's shape gets wrong; the values are NewJob.validated's to judge."""
    known = ", ".join(sorted(KEYS))
    problems = [f"unknown key {key!r} (keys: {known})" for key in data if key not in KEYS]
    if ("job_id" in data) == ("decision" in data):
        problems.append("give exactly one of job_id or decision")
    for key in ("job_id", "decision", "action", "subject", "due"):
        if key in data and not isinstance(data[key], str):
            problems.append(f"{key} must be a string")
    if "subject" not in data:
        problems.append("subject is required")
    if "decision" in data and isinstance(data["decision"], str) and not data["decision"]:
        problems.append("decision must be a non-empty string")
    if "params" in data and not isinstance(data["params"], dict):
        problems.append("params must be a JSON object")
    return problems
