"""The operator tools spell no JOBS_* variable name themselves: they import the constants of
the settings modules (or, for the CLI's own variables, of services.cli.backends), so a rename
changes every reader at once."""

from __future__ import annotations

import ast
import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[3]
NAME = re.compile(r"^JOBS_[A-Z0-9_]+$")
MODULES = [
    "services/local/system.py",
    "services/cli/app.py",
    "services/cli/backends.py",
    "services/cli/session.py",
    "services/cli/commands/backlog.py",
    "services/cli/commands/deadletter.py",
]
# The one place each CLI-only variable is named.
DEFINITIONS = {
    "services/cli/backends.py": {"OPERATOR", "FIRESTORE_DATABASE", "DEAD_LETTER_SUBSCRIPTION"}
}


def _spelled_names(path: str) -> list[tuple[int, str]]:
    tree = ast.parse((ROOT / path).read_text())
    allowed: set[int] = set()
    for node in tree.body:
        if isinstance(node, ast.Assign) and len(node.targets) == 1:
            target = node.targets[0]
            if isinstance(target, ast.Name) and target.id in DEFINITIONS.get(path, set()):
                allowed.add(id(node.value))
    return [
        (node.lineno, node.value)
        for node in ast.walk(tree)
        if isinstance(node, ast.Constant)
        and isinstance(node.value, str)
        and NAME.match(node.value)
        and id(node) not in allowed
    ]


@pytest.mark.parametrize("path", MODULES)
def test_no_module_spells_a_jobs_variable_name_itself(path: str) -> None:
    assert _spelled_names(path) == []
