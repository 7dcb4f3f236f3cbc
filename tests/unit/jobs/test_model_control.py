"""The operator's control document: defaults, validated changes, audit, round trip."""

from datetime import UTC, datetime, timedelta

import pytest

from services.jobs.control import CONTROL_HISTORY_LIMIT, Control
from services.jobs.errors import ValidationError

AT = datetime(2026, 1, 1, tzinfo=UTC)


def test_a_missing_document_means_the_defaults() -> None:
    assert Control.from_document(None) == Control()
    assert Control.from_document({}) == Control()
    assert Control.from_document({"paused": True}).claim_budget == Control().claim_budget


def test_a_change_is_applied_audited_and_survives_the_round_trip() -> None:
    changed = Control().changed(
        by="ann", reason="drain", at=AT, catch_up_rate=50, claim_timeout=timedelta(minutes=2)
    )
    assert (changed.catch_up_rate, changed.changed_by, changed.changed_at) == (50.0, "ann", AT)
    assert changed.history[-1].changes == {
        "catch_up_rate": 50.0,
        "claim_timeout": timedelta(minutes=2),
    }
    back = Control.from_document(changed.to_document())
    assert back.claim_timeout == timedelta(minutes=2)
    assert back.history[-1].changes == {"catch_up_rate": 50.0, "claim_timeout": 120.0}
    assert (back.paused, back.catch_up_rate, back.reason) == (False, 50.0, "drain")


@pytest.mark.parametrize(
    ("changes", "expected"),
    [
        ({"claim_budget": 0}, "claim_budget must be an integer from 1"),
        ({"claim_budget": 2.5}, "claim_budget must be an integer"),
        ({"catch_up_rate": 0}, "catch_up_rate must be a number of jobs per second above 0"),
        ({"catch_up_rate": float("inf")}, "finite"),
        # Values the scan's arithmetic overflows on (rate x interval, now - timeout): every
        # scan run answered 500 until the operator undid the change.
        ({"catch_up_rate": 1e308}, "catch_up_rate must be at most 1,000,000"),
        ({"claim_timeout": timedelta(days=9_999_999)}, "claim_timeout must be at most 30 d"),
        ({"claim_timeout": timedelta(0)}, "claim_timeout must be a positive duration"),
        ({"paused": "yes"}, "paused must be true or false"),
        ({"colour": "red"}, "unknown control setting(s): colour"),
    ],
)
def test_invalid_changes_are_refused(changes: dict[str, object], expected: str) -> None:
    with pytest.raises(ValidationError) as caught:
        Control().changed(by="ann", reason="r", at=AT, **changes)
    assert expected in str(caught.value)


def test_the_largest_allowed_rate_and_timeout_are_accepted() -> None:
    control = Control().changed(
        by="ann", reason="r", at=AT, catch_up_rate=1_000_000, claim_timeout=timedelta(days=30)
    )
    assert (control.catch_up_rate, control.claim_timeout) == (1e6, timedelta(days=30))


def test_who_and_why_are_required() -> None:
    with pytest.raises(ValidationError, match=r"by .* must be non-empty; reason must be"):
        Control().changed(by="", reason=" ", at=AT, paused=True)


def test_the_change_history_is_bounded() -> None:
    control = Control()
    for n in range(CONTROL_HISTORY_LIMIT + 5):
        control = control.changed(by="ann", reason=f"r{n}", at=AT, claim_budget=n + 1)
    assert len(control.history) == CONTROL_HISTORY_LIMIT
    assert control.history[-1].reason == f"r{CONTROL_HISTORY_LIMIT + 4}"


@pytest.mark.parametrize(
    ("stored", "field", "expected"),
    [
        ({"catch_up_rate": 1e308}, "catch_up_rate", Control().catch_up_rate),
        ({"catch_up_rate": "fast"}, "catch_up_rate", Control().catch_up_rate),
        ({"claim_budget": -3}, "claim_budget", Control().claim_budget),
        ({"claim_budget": "many"}, "claim_budget", Control().claim_budget),
        ({"claim_timeout_s": 1e300}, "claim_timeout", Control().claim_timeout),
        ({"claim_timeout_s": "soon"}, "claim_timeout", Control().claim_timeout),
        ({"paused": "no"}, "paused", True),
    ],
)
def test_a_stored_value_out_of_range_reads_as_its_safe_default(
    stored: dict[str, object],
    field: str,
    expected: object,
    caplog: pytest.LogCaptureFixture,
) -> None:
    control = Control.from_document(stored)
    assert getattr(control, field) == expected
    assert any(field in r.getMessage() and r.levelname == "ERROR" for r in caplog.records)


def test_valid_stored_values_are_read_back_unchanged() -> None:
    stored = {"paused": True, "claim_budget": 7, "catch_up_rate": 2.5, "claim_timeout_s": 90}
    control = Control.from_document(stored)
    assert (control.paused, control.claim_budget, control.catch_up_rate) == (True, 7, 2.5)
    assert control.claim_timeout == timedelta(seconds=90)


def test_no_claim_budget_leaves_the_deployment_cap_and_a_set_one_lowers_it() -> None:
    assert Control().claim_budget is None
    assert Control().per_run_cap(12_000) == 12_000
    lowered = Control().changed(by="ann", reason="r", at=AT, claim_budget=500)
    assert lowered.per_run_cap(12_000) == 500 and lowered.per_run_cap(100) == 100
    cleared = lowered.changed(by="ann", reason="r", at=AT, claim_budget=None)
    assert Control.from_document(cleared.to_document()).per_run_cap(12_000) == 12_000
