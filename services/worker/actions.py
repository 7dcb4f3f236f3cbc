"""The actions one worker can run: the catalogue's declarations bound to their callables.

The catalogue (`services.jobs.catalogue`) says what each action is; this module makes each
runnable in this worker: a `run` reference is imported, a `build` factory is called once with
the worker's `ActionContext` (its settings), and an action that declares no retry policy gets
the worker's configured one. A declaration that cannot be bound (its module does not import,
its factory fails) stops the worker at start, naming the action and who declared it.
"""

from __future__ import annotations

import dataclasses
import importlib
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from services.jobs.actions import Action, ActionFn, RetryPolicy
from services.jobs.catalogue import Catalogue
from services.jobs.errors import CatalogueError

if TYPE_CHECKING:
    from services.worker.settings import WorkerSettings


@dataclass(frozen=True)
class ActionContext:
    """What a `build` factory gets: the worker's settings (project, media bucket, lease...)."""

    settings: WorkerSettings


class ActionRegistry:
    """The actions one worker can run, by name; each has a callable `run` and a `policy`."""

    def __init__(self, actions: Iterable[Action] = ()) -> None:
        self._actions: dict[str, Action] = {}
        for action in actions:
            self.register(action)

    def register(self, action: Action) -> None:
        if action.name in self._actions:
            raise ValueError(f"action {action.name!r} is registered twice")
        if not callable(action.run):
            raise ValueError(f"action {action.name!r} is not bound to a callable (see bind)")
        self._actions[action.name] = action

    def get(self, name: str) -> Action | None:
        return self._actions.get(name)

    def __contains__(self, name: object) -> bool:
        return name in self._actions

    def __iter__(self) -> Iterator[Action]:
        return iter(self._actions.values())

    def names(self) -> list[str]:
        return sorted(self._actions)


def policy_of(action: Action) -> RetryPolicy:
    """The action's retry policy (a bound action always has one; the default otherwise)."""
    return action.policy or RetryPolicy()


def runner_of(action: Action) -> ActionFn:
    """The bound action's callable (the registry admits only bound actions)."""
    run = action.run
    if isinstance(run, str) or run is None:
        raise TypeError(f"action {action.name!r} is not bound to a callable")
    return run


def bind(catalogue: Catalogue, context: ActionContext) -> ActionRegistry:
    """Every action of `catalogue`, runnable in this worker; CatalogueError when one cannot
    be bound, naming the action and its source."""
    bound = []
    for action in catalogue.actions():
        source = catalogue.source_of(action.name)
        try:
            run = _callable_of(action, context)
        except Exception as exc:
            raise CatalogueError(
                f"action {action.name!r} from {source} cannot be bound in the worker: "
                f"{type(exc).__name__}: {exc}"
            ) from exc
        policy = action.policy or context.settings.retry_policy
        bound.append(dataclasses.replace(action, run=run, build=None, policy=policy))
    return ActionRegistry(bound)


def _callable_of(action: Action, context: ActionContext) -> ActionFn:
    if action.build is not None:
        build = resolve(action.build) if isinstance(action.build, str) else action.build
        run = build(context)
    else:
        run = resolve(action.run) if isinstance(action.run, str) else action.run
    if not callable(run):
        raise TypeError(f"{run!r} is not callable")
    fn: ActionFn = run
    return fn


def resolve(reference: str) -> Any:
    """The object a `package.module:attribute` reference names."""
    module_name, _, attribute = reference.partition(":")
    found: Any = importlib.import_module(module_name)
    for part in attribute.split("."):
        found = getattr(found, part)
    return found
