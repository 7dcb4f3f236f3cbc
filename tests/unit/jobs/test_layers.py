"""Which module may import which: the store's roles sit on their shared plumbing and never on
each other, and the CLI does not reach up into the local stack."""

from __future__ import annotations

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parents[3]
STORE = ROOT / "services" / "jobs" / "store"
ROLES = {"scheduling", "reads", "claims", "reclaims", "leases"}
PLUMBING = {"documents", "merge", "shared_keys"}


def imported(path: Path) -> set[str]:
    names: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.ImportFrom) and node.module:
            names.add(node.module)
            names.update(f"{node.module}.{alias.name}" for alias in node.names)
        elif isinstance(node, ast.Import):
            names.update(alias.name for alias in node.names)
    return names


def store_modules(path: Path) -> set[str]:
    prefix = "services.jobs.store."
    return {
        name.removeprefix(prefix).split(".")[0]
        for name in imported(path)
        if name.startswith(prefix)
    }


def test_the_store_package_holds_the_facade_the_roles_and_their_plumbing() -> None:
    found = {p.stem for p in STORE.glob("*.py")} - {"__init__"}
    assert found == ROLES | PLUMBING | {"facade"}


def test_no_role_of_the_store_imports_another() -> None:
    for role in ROLES:
        used = store_modules(STORE / f"{role}.py")
        assert not used & ROLES, (role, used & ROLES)
        assert used <= PLUMBING, (role, used - PLUMBING)


def test_the_plumbing_imports_no_role() -> None:
    for module in PLUMBING:
        used = store_modules(STORE / f"{module}.py")
        assert not used & (ROLES | {"facade"}), (module, used)
    # shared_keys sits on documents alone; documents and merge on nothing of the store.
    assert store_modules(STORE / "documents.py") == set()
    assert store_modules(STORE / "merge.py") == set()
    assert store_modules(STORE / "shared_keys.py") == {"documents"}


def test_the_cli_does_not_import_the_local_stack() -> None:
    offending = {
        str(path.relative_to(ROOT)): sorted(n for n in imported(path) if "services.local" in n)
        for path in (ROOT / "services" / "cli").rglob("*.py")
    }
    assert {path: names for path, names in offending.items() if names} == {}
