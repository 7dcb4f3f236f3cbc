from __future__ import annotations

import pytest

from services.api.errors import field_of, from_store
from services.jobs.errors import ScheduleConflict, ValidationError
from services.jobs.model import NewJob
from tests.unit.api.fakes import T0


@pytest.mark.parametrize(
    ("problem", "field"),
    [
        ("unknown action 'x' (known: media.delete_source)", "action"),
        ("subject must be a non-empty string", "subject"),
        ("job ID 'params.x' contains '/', which Firestore forbids", "job_id"),
        ("params.objects[0] is a set, not a JSON value", "params.objects[0]"),
        ("params are 20000 bytes as JSON; the limit is 16384", "params"),
        ("max_attempts must be an integer from 1 to 100", "max_attempts"),
        ("due_at 2026-01-01 has no timezone", "due_at"),
        ("something else entirely", "body"),
    ],
)
def test_a_store_problem_names_the_field_it_is_about(problem: str, field: str) -> None:
    assert field_of(problem) == field


def test_every_problem_of_the_real_validation_names_a_request_field() -> None:
    bad = NewJob("a/b", "nope", "", T0, {"__x__": 1}, max_attempts=0)
    with pytest.raises(ValidationError) as caught:
        bad.validated()
    body = from_store(caught.value).body()["error"]
    assert body["status"] == "INVALID_ARGUMENT"
    fields = {v["field"] for v in body["details"][0]["fieldViolations"]}
    assert fields == {"job_id", "action", "subject", "params", "max_attempts"}


def test_a_conflict_names_due_at_where_the_store_says_scheduled_due_at() -> None:
    error = from_store(ScheduleConflict("j", ["params", "scheduled_due_at"]))
    body = error.body()["error"]
    assert (body["code"], body["status"]) == (409, "ALREADY_EXISTS")
    assert [v["field"] for v in body["details"][0]["fieldViolations"]] == ["params", "due_at"]
    assert body["message"].startswith("params, due_at: ")
