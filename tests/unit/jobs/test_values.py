"""The value rules shared by params (refused) and result details / progress (replaced)."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

from services.jobs.errors import ValidationError
from services.jobs.limits import bounded_details
from services.jobs.model import NewJob
from services.jobs.values import MAX_MAP_DEPTH, value_problems

T0 = datetime(2026, 1, 1, tzinfo=UTC)


def nested(levels: int) -> dict[str, Any]:
    value: dict[str, Any] = {"leaf": 1}
    for _ in range(levels - 1):
        value = {"k": value}
    return value


def test_the_same_rules_refuse_params_and_replace_details() -> None:
    for bad in ({"a": [[1]]}, {"__x__": 1}, nested(MAX_MAP_DEPTH + 1)):
        assert value_problems(bad, "details")
        note = bounded_details(bad)
        assert note["invalid"] is True and not value_problems(note, "details")
        assert set(note["keys"]) == set(bad)
        try:
            NewJob("j", "media.delete_source", "s", T0, bad).validated()
        except ValidationError as exc:
            assert any("params" in problem for problem in exc.problems)
        else:
            raise AssertionError("params that break a value rule were accepted")


def test_depth_counts_the_maps_above_the_value() -> None:
    assert value_problems(nested(MAX_MAP_DEPTH), "progress") == []
    assert value_problems(nested(MAX_MAP_DEPTH), "details", depth=2)
    assert bounded_details({"objects": [1, 2], "by": {"k": "v"}}) == {
        "objects": [1, 2],
        "by": {"k": "v"},
    }
