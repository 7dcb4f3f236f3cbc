"""New jobs: what an application asks for (`NewJob`) and its validation; and, re-exported,
the job record (`record`), the job IDs (`ids`) and the values the store returns (`results`),
so `from services.jobs.model import ...` keeps working for each.
"""

from __future__ import annotations

import json
from collections.abc import Collection, Mapping
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from services.jobs.catalogue import Catalogue, built_in
from services.jobs.errors import ValidationError
from services.jobs.ids import (
    derive_idempotency_key,
    document_id_problems,
    job_id_problems,
)
from services.jobs.record import (
    DEFAULT_MAX_ATTEMPTS,
    as_utc,
)
from services.jobs.values import value_problems

MAX_SUBJECT_BYTES = 1024
MAX_PARAMS_BYTES = 16 * 1024  # JSON-encoded, compact, UTF-8
MAX_ATTEMPTS_LIMIT = 100


def _params_problems(params: object) -> list[str]:
    problems = value_problems(params, "params")
    if problems:
        return problems
    size = len(json.dumps(params, separators=(",", ":"), sort_keys=True).encode("utf-8"))
    if size > MAX_PARAMS_BYTES:
        return [f"params are {size} bytes as JSON; the limit is {MAX_PARAMS_BYTES}"]
    return []


@dataclass(frozen=True)
class NewJob:
    """What an application supplies to schedule a job. `validated()` checks it."""

    job_id: str
    action: str
    subject: str
    due_at: datetime
    params: Mapping[str, Any] = field(default_factory=dict)
    max_attempts: int = DEFAULT_MAX_ATTEMPTS
    idempotency_key: str | None = None  # default: derived from action + job_id

    def validated(self, known_actions: Catalogue | Collection[str] | None = None) -> NewJob:
        """This job with due_at in UTC and the idempotency key filled in, or ValidationError
        listing every problem. `known_actions`: the catalogue (default: the built-in actions);
        a plain collection of names (a test's) is checked against the built-in schemas."""
        catalogue = known_actions if isinstance(known_actions, Catalogue) else built_in()
        if known_actions is None:
            known_actions = catalogue
        problems = job_id_problems(self.job_id)
        if not isinstance(self.action, str) or self.action not in known_actions:
            known = ", ".join(sorted(known_actions)) or "none"
            problems.append(f"unknown action {self.action!r} (known: {known})")
        if not isinstance(self.subject, str) or not self.subject.strip():
            problems.append("subject must be a non-empty string")
        elif len(self.subject.encode("utf-8")) > MAX_SUBJECT_BYTES:
            problems.append(f"subject is longer than {MAX_SUBJECT_BYTES} bytes")
        if not isinstance(self.due_at, datetime):
            problems.append("due_at must be a datetime")
        elif self.due_at.tzinfo is None or self.due_at.utcoffset() is None:
            problems.append(f"due_at {self.due_at.isoformat()} has no timezone")
        generic = _params_problems(self.params)
        problems.extend(generic)
        if not generic and isinstance(self.action, str):
            # The action's own schema, once params are a JSON map at all.
            problems.extend(catalogue.params_problems(self.action, self.params))
        if (
            not isinstance(self.max_attempts, int)
            or isinstance(self.max_attempts, bool)
            or not 1 <= self.max_attempts <= MAX_ATTEMPTS_LIMIT
        ):
            problems.append(f"max_attempts must be an integer from 1 to {MAX_ATTEMPTS_LIMIT}")
        if self.idempotency_key is not None:
            problems.extend(document_id_problems(self.idempotency_key, "idempotency key"))
        if problems:
            raise ValidationError(problems)
        return NewJob(
            job_id=self.job_id,
            action=self.action,
            subject=self.subject,
            due_at=as_utc(self.due_at),
            params=dict(self.params),
            max_attempts=self.max_attempts,
            idempotency_key=self.idempotency_key
            or derive_idempotency_key(self.action, self.job_id),
        )
