"""The action catalogue: every action this deployment knows, built once when a process starts.

It holds the built-in actions (`services.jobs.media.BUILT_IN`) and every action an installed
distribution declares in the entry-point group `deferred_jobs.actions`:

    [project.entry-points."deferred_jobs.actions"]
    "trials.expire" = "my_trials.actions:EXPIRE"

The entry point's name is the action's name; its object is an `Action` declaration
(`services.jobs.actions`). The store's scheduling validation, the API (and its OpenAPI
document), `jobsctl`, the worker and `make run` all read this one catalogue, so a plug-in
installed beside the project is known to all of them with no change to this code base.

A plug-in that cannot be loaded (an import error, an object that is not an `Action`, a name
other than its entry point's) or that declares a name another one already has stops the
process at start: `CatalogueError` names the distribution and the entry point. Nothing is
read at import time; `load_catalogue()` reads the installed distributions' metadata.
"""

from __future__ import annotations

import logging
import sys
from collections.abc import Iterable, Iterator, Mapping
from importlib import metadata
from typing import Any

from services.jobs.actions import Action
from services.jobs.deployment import Deployment
from services.jobs.errors import CatalogueError
from services.jobs.params import ParamsSchema, params_problems

logger = logging.getLogger(__name__)

ENTRY_POINT_GROUP = "deferred_jobs.actions"
BUILT_IN_SOURCE = "deferred-jobs (built in)"


class Catalogue:
    """The actions one process knows, by name; iterating it yields their names (so it is a
    `Collection[str]` wherever a set of action names is asked for). `deployment`: what the
    process's environment configures (its HTTP targets), for the params checks that need it."""

    def __init__(
        self,
        actions: Iterable[Action] = (),
        *,
        sources: Mapping[str, str] = {},
        deployment: Deployment | None = None,
    ) -> None:
        self._actions: dict[str, Action] = {}
        self._sources: dict[str, str] = {}
        self.deployment = deployment or Deployment()
        for action in actions:
            self.add(action, sources.get(action.name, BUILT_IN_SOURCE))

    def add(self, action: Action, source: str) -> None:
        """Add `action`, declared by `source` (a distribution and entry point, for messages);
        a name already present raises CatalogueError naming both."""
        if not isinstance(action, Action):
            raise CatalogueError(f"{source}: {action!r} is not an Action declaration")
        if action.name in self._actions:
            raise CatalogueError(
                f"{source} declares action {action.name!r}, already declared by "
                f"{self._sources[action.name]}; remove one of them"
            )
        self._actions[action.name] = action
        self._sources[action.name] = source

    def get(self, name: str) -> Action | None:
        return self._actions.get(name)

    def source_of(self, name: str) -> str:
        """Who declared `name`: `BUILT_IN_SOURCE`, or `distribution X.Y (entry point N)`."""
        return self._sources[name]

    def names(self) -> list[str]:
        return list(self._actions)

    def actions(self) -> list[Action]:
        return list(self._actions.values())

    @property
    def schemas(self) -> Mapping[str, ParamsSchema]:
        return {name: a.params for name, a in self._actions.items() if a.params is not None}

    def params_problems(self, action: str, params: Mapping[str, Any]) -> list[str]:
        """Why `params` do not fit `action`'s declared schema in this deployment (empty when
        they do)."""
        return params_problems(action, params, self.schemas, self.deployment)

    def with_deployment(self, deployment: Deployment) -> Catalogue:
        """The same actions, checking params against `deployment`."""
        copy = Catalogue(deployment=deployment)
        for name, action in self._actions.items():
            copy.add(action, self._sources[name])
        return copy

    def default(self) -> str:
        """The first action (the first built-in): what `jobsctl schedule` schedules when
        no `--action` is given."""
        if not self._actions:
            raise CatalogueError("the catalogue has no actions")
        return next(iter(self._actions))

    def __contains__(self, name: object) -> bool:
        return name in self._actions

    def __iter__(self) -> Iterator[str]:
        return iter(self._actions)

    def __len__(self) -> int:
        return len(self._actions)

    def __repr__(self) -> str:
        return f"Catalogue({', '.join(self._actions)})"


def built_in(deployment: Deployment | None = None) -> Catalogue:
    """The built-in actions only (no installed plug-in): the media actions, then
    `http.request`."""
    from services.jobs.http_request import HTTP_REQUEST
    from services.jobs.media import BUILT_IN

    return Catalogue((*BUILT_IN, HTTP_REQUEST), deployment=deployment)


def load_catalogue(
    entry_points: Iterable[metadata.EntryPoint] | None = None,
    *,
    deployment: Deployment | None = None,
) -> Catalogue:
    """The built-in actions plus every installed plug-in's (`entry_points` overrides the
    installed ones, for tests), checking params against `deployment` (None: nothing
    configured, so an `http.request` job names no known target). Raises CatalogueError, naming
    the distribution and the entry point, for a plug-in that is broken or conflicts with
    another; the caller stops."""
    catalogue = built_in(deployment)
    found = metadata.entry_points(group=ENTRY_POINT_GROUP) if entry_points is None else entry_points
    for entry_point in sorted(found, key=lambda ep: (ep.name, ep.value)):
        source = describe(entry_point)
        try:
            declared = entry_point.load()
        except Exception as exc:
            raise CatalogueError(f"{source} cannot be loaded: {type(exc).__name__}: {exc}") from exc
        if not isinstance(declared, Action):
            raise CatalogueError(
                f"{source} is {type(declared).__name__}, not an Action declaration "
                "(services.jobs.actions.Action)"
            )
        if declared.name != entry_point.name:
            raise CatalogueError(
                f"{source} declares action {declared.name!r}: the entry point's name must be "
                "the action's name"
            )
        catalogue.add(declared, source)
        logger.info("action %s from %s", declared.name, source)
    return catalogue


def describe(entry_point: metadata.EntryPoint) -> str:
    """`distribution my-trials 1.0 (entry point trials.expire = my_trials.actions:EXPIRE)`."""
    dist = getattr(entry_point, "dist", None)
    who = f"distribution {dist.name} {dist.version}" if dist is not None else "a distribution"
    return f"{who} (entry point {entry_point.name} = {entry_point.value} in {ENTRY_POINT_GROUP})"


def load_or_exit(
    entry_points: Iterable[metadata.EntryPoint] | None = None,
    *,
    deployment: Deployment | None = None,
) -> Catalogue:
    """`load_catalogue()` for a process's start: a broken or conflicting plug-in ends the
    process with the message on stderr and exit status 78 (configuration error)."""
    try:
        return load_catalogue(entry_points, deployment=deployment)
    except CatalogueError as exc:
        logger.critical("action catalogue: %s", exc)
        sys.stderr.write(f"deferred-jobs: action catalogue: {exc}\n")
        raise SystemExit(78) from exc
