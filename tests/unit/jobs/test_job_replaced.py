"""`Job.replaced` is `dataclasses.replace` for a Job: the same new value for any changes, the
original untouched, an unknown field refused; and it may be, since Job has no __post_init__
and no init-only field (what replace would run and copying skips)."""

from __future__ import annotations

import dataclasses
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from services.jobs.model import NewJob
from services.jobs.parts import Claim
from services.jobs.record import Job
from services.jobs.state import State

NOW = datetime(2026, 3, 1, 12, 0, 0, 123456, tzinfo=UTC)
JOB = Job.create(
    NewJob("job-1", "media.delete_source", "m-1", NOW, {"bucket": "bench-media", "objects": []}),
    NOW,
)
changes = st.fixed_dictionaries(
    {},
    optional={
        "state": st.sampled_from(list(State)),
        "updated_at": st.datetimes(timezones=st.just(UTC)),
        "update_time": st.none() | st.datetimes(timezones=st.just(UTC)),
        "message_id": st.none() | st.text(max_size=5),
        "claim": st.none() | st.builds(Claim, st.text(max_size=5), st.just(NOW), st.integers(0, 9)),
        "due_at": st.just(NOW + timedelta(days=1)),
        "attempt": st.integers(1, 5),
    },
)


def test_job_has_nothing_replace_would_run_that_copying_skips() -> None:
    assert not hasattr(Job, "__post_init__")
    assert all(f.init for f in dataclasses.fields(Job))
    assert not hasattr(Job, "__slots__")


@settings(max_examples=200, deadline=None)
@given(changes)
def test_replaced_is_dataclasses_replace(change: dict[str, Any]) -> None:
    before = dataclasses.replace(JOB)
    new = JOB.replaced(**change)
    assert new == dataclasses.replace(JOB, **change)
    assert type(new) is Job and new is not JOB
    assert before == JOB
    with pytest.raises(dataclasses.FrozenInstanceError):
        new.state = State.FAILED  # type: ignore[misc]


def test_an_unknown_field_is_refused() -> None:
    with pytest.raises(TypeError):
        JOB.replaced(no_such_field=1)
