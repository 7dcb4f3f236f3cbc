"""The value rules: what a JSON-like map must satisfy to be stored as a Firestore map.

Valid JSON is not always a valid Firestore value: an array directly inside an array, a map
key matching `__.*__`, or maps nested deeper than 20 levels are refused with INVALID_ARGUMENT
(https://firebase.google.com/docs/firestore/quotas#limits, "Maximum depth of fields in a map
or array: 20"; "Constraints on field names": `__.*__` is reserved;
https://firebase.google.com/docs/firestore/manage-data/data-types: "an array cannot contain
another array value"). Params are refused at scheduling when they break a rule; result
details and progress, which a worker writes after the side effect, are replaced by a note
(`limits.bounded_details`) so a completion is never refused for what it carries.
"""

from __future__ import annotations

from collections.abc import Mapping

from services.jobs.ids import RESERVED_NAME

MAX_MAP_DEPTH = 20  # Firestore's nesting limit for maps in a document; a top-level map is 1
_INT64 = (-(2**63), 2**63 - 1)


def value_problems(value: object, what: str, depth: int = 1) -> list[str]:
    """Why `value` (a map at nesting level `depth` of its document) cannot be stored as a
    Firestore map; [] when it can."""
    if not isinstance(value, Mapping):
        return [f"{what} must be a map of string keys to JSON values"]
    problems: list[str] = []

    def walk(item: object, path: str, level: int) -> None:
        if isinstance(item, Mapping):
            if level > MAX_MAP_DEPTH:
                problems.append(
                    f"{what}{path} is nested deeper than Firestore's {MAX_MAP_DEPTH} map levels"
                )
                return
            for key, inner in item.items():
                if not isinstance(key, str) or not key:
                    problems.append(f"{what}{path} key {key!r} is not a non-empty string")
                elif RESERVED_NAME.match(key):
                    problems.append(f"{what}{path} key {key!r} matches __.*__ (reserved)")
                else:
                    walk(inner, f"{path}.{key}", level + 1)
        elif isinstance(item, list | tuple):
            for index, inner in enumerate(item):
                if isinstance(inner, list | tuple):
                    problems.append(f"{what}{path}[{index}]: Firestore forbids nested arrays")
                walk(inner, f"{path}[{index}]", level)
        elif isinstance(item, bool) or item is None or isinstance(item, str):
            return
        elif isinstance(item, int):
            if not _INT64[0] <= item <= _INT64[1]:
                problems.append(f"{what}{path} = {item} does not fit a 64-bit integer")
        elif isinstance(item, float):
            if item != item or item in (float("inf"), float("-inf")):
                problems.append(f"{what}{path} is {item}, which JSON cannot encode")
        else:
            problems.append(f"{what}{path} is a {type(item).__name__}, not a JSON value")

    walk(value, "", depth)
    return problems
