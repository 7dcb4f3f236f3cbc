"""The runbook's transition table names every transition of the state machine and its owners."""

from __future__ import annotations

import re
from pathlib import Path

from services.jobs.state import TRANSITIONS, State

RUNBOOK = Path(__file__).resolve().parents[3] / "docs" / "runbook.md"
ROW = re.compile(r"^\| (\w+) → (\w+) \| (\w+) \| ([\w, ]+) \|", re.MULTILINE)


def _rows() -> dict[tuple[State, State], tuple[str, frozenset[str]]]:
    return {
        (State(a), State(b)): (name, frozenset(o.strip() for o in owners.split(",")))
        for a, b, name, owners in ROW.findall(RUNBOOK.read_text())
        if a != "from"  # the header row
    }


def test_runbook_lists_every_transition_with_its_name_and_owners() -> None:
    expected = {
        key: (t.name, frozenset(role.value for role in t.owners)) for key, t in TRANSITIONS.items()
    }
    assert _rows() == expected


def test_runbook_names_the_owner_of_the_five_key_moves() -> None:
    text = RUNBOOK.read_text()
    for phrase in (
        "(new) → deferred | schedule | application",
        "deferred → claimed | claim | scan",
        "records an **enqueue failure**",
        "**completed the side effect**",
        "the reclaimer takes back a claim older than `claimTimeoutS`",
    ):
        assert phrase in text
