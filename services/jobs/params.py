"""Each action's params schema: a small typed definition checked when a job is scheduled.

A job's params wait up to years before the worker reads them, so a typo found then is found
far too late. Every action declares what its params look like with these types, in its
declaration (`services.jobs.actions.Action.params`); `NewJob.validated` (and so
`FirestoreJobStore.schedule`, `jobsctl schedule`, and the API built on the store) checks them
against the catalogue and refuses params that do not fit, naming the field. The worker still
checks params again when it runs (a record may be written by something other than the store),
with the same limits: a test proves that what `media.delete_source`'s schema accepts, its worker
accepts.

An action declared without a schema gets only the generic limits every params map has (JSON
values, Firestore's nesting, 16 KiB).

Some checks need the deployment, not only the params: `http.request` must refuse a target the
deployment does not configure. Such a schema carries a `check` taking the params and the
`Deployment` (`services.jobs.deployment`); the catalogue passes the deployment it was loaded
with, so the store, the API and `jobsctl` refuse the job at schedule time, naming the field.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any, Literal

from services.jobs.deployment import Deployment

# `json`: any JSON value (within the generic limits every params map has).
Kind = Literal["string", "integer", "number", "boolean", "string_list", "json"]
# A check that needs the deployment: the params (already fitting the fields) and the
# deployment in, the problems out, each naming its field (`params.target: …`).
DeploymentCheck = Callable[[Mapping[str, Any], Deployment], list[str]]


@dataclass(frozen=True)
class Field:
    """One params field: its JSON type, whether it must be present, and value limits."""

    name: str
    kind: Kind
    required: bool = False
    pattern: re.Pattern[str] | None = None  # strings, and each item of a string list
    max_bytes: int | None = None  # strings, and each item of a string list (UTF-8)
    min_items: int = 0  # string lists
    max_items: int | None = None  # string lists
    forbidden: re.Pattern[str] | None = None  # characters no string may contain
    reserved: frozenset[str] = frozenset()  # string values that are refused
    describe: str = ""  # what the pattern means, for the error

    def problems(self, value: object) -> list[str]:
        where = f"params.{self.name}"
        if self.kind == "string_list":
            if not isinstance(value, list | tuple):
                return [f"{where} must be a list of strings"]
            if len(value) < self.min_items or (
                self.max_items is not None and len(value) > self.max_items
            ):
                most = f" to {self.max_items}" if self.max_items is not None else " or more"
                return [f"{where} must list {self.min_items}{most} items, not {len(value)}"]
            found: list[str] = []
            for index, item in enumerate(value):
                found.extend(self._string_problems(item, f"{where}[{index}]"))
            return found
        if self.kind == "string":
            return self._string_problems(value, where)
        if self.kind == "json":
            return []
        if self.kind == "boolean":
            return [] if isinstance(value, bool) else [f"{where} must be true or false"]
        if self.kind == "integer":
            ok = isinstance(value, int) and not isinstance(value, bool)
            return [] if ok else [f"{where} must be an integer"]
        ok = isinstance(value, int | float) and not isinstance(value, bool)
        return [] if ok else [f"{where} must be a number"]

    def _string_problems(self, value: object, where: str) -> list[str]:
        if not isinstance(value, str) or not value:
            return [f"{where} must be a non-empty string"]
        if value in self.reserved:
            return [f"{where} cannot be {value!r}"]
        if self.max_bytes is not None and len(value.encode("utf-8")) > self.max_bytes:
            return [f"{where} is longer than {self.max_bytes} bytes"]
        if self.forbidden is not None and self.forbidden.search(value):
            return [f"{where} contains a control character (CR, LF or NUL)"]
        if self.pattern is not None and not self.pattern.match(value):
            return [f"{where} {value[:80]!r} is not {self.describe or 'valid'}"]
        return []


@dataclass(frozen=True)
class ParamsSchema:
    """The params of one action: its fields, no others, groups of which exactly one, and
    optionally a `check` against the deployment (run once the fields fit)."""

    action: str
    fields: tuple[Field, ...]
    exactly_one_of: tuple[tuple[str, ...], ...] = ()
    check: DeploymentCheck | None = None

    def problems(
        self, params: Mapping[str, Any], deployment: Deployment | None = None
    ) -> list[str]:
        """Why `params` do not fit (empty when they do); every problem names its field.
        `deployment` None: nothing configured (`Deployment()`)."""
        known = {f.name: f for f in self.fields}
        found = [
            f"params.{name} is not a field of {self.action} (fields: {', '.join(known)})"
            for name in params
            if name not in known
        ]
        for group in self.exactly_one_of:
            present = [name for name in group if name in params]
            if len(present) != 1:
                names = " or ".join(f"params.{name}" for name in group)
                found.append(f"{self.action} needs exactly one of {names}")
        for spec in self.fields:
            if spec.name in params:
                found.extend(spec.problems(params[spec.name]))
            elif spec.required:
                found.append(f"params.{spec.name} is required for {self.action}")
        if not found and self.check is not None:
            found.extend(self.check(params, deployment or Deployment()))
        return found

    def summary(self) -> str:
        """One line for help texts: `bucket (string), object (string) | objects (...)`."""
        parts = [f"{f.name} ({f.kind.replace('_', ' ')})" for f in self.fields]
        return ", ".join(parts)


def params_problems(
    action: str,
    params: Mapping[str, Any],
    schemas: Mapping[str, ParamsSchema],
    deployment: Deployment | None = None,
) -> list[str]:
    """Why `params` do not fit `action`'s declared schema among `schemas` (the catalogue's),
    in `deployment`; empty when they do, or when the action declares none."""
    schema = schemas.get(action)
    return schema.problems(params, deployment) if schema is not None else []
