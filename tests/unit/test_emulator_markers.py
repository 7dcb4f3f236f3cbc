"""The two emulator markers (tests/fixtures/emulator_set.py) carry their reason: every
`builtin_emulator` and `production_strict` use names why, and every `production_strict` test
cites Google's documentation of production's behaviour in its docstring."""

from __future__ import annotations

import ast
import re
from pathlib import Path

import pytest

from tests.fixtures import emulator_set

ROOT = Path(__file__).resolve().parents[2]
MARKERS = ("builtin_emulator", "production_strict")


def _marker_name(node: ast.expr) -> str | None:
    """`pytest.mark.NAME(...)` → NAME, for the two emulator markers."""
    call = node if isinstance(node, ast.Call) else None
    target = call.func if call is not None else node
    if isinstance(target, ast.Attribute) and target.attr in MARKERS:
        return target.attr
    return None


def _uses() -> list[tuple[str, str, ast.expr, str | None]]:
    """(file:test, marker, the marker expression, the test's docstring) for every use."""
    found = []
    for path in sorted((ROOT / "tests" / "integration").rglob("test_*.py")):
        tree = ast.parse(path.read_text())
        module_doc = ast.get_docstring(tree)
        for node in ast.walk(tree):
            if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
                for decorator in node.decorator_list:
                    name = _marker_name(decorator)
                    if name:
                        where = f"{path.name}::{node.name}"
                        found.append((where, name, decorator, ast.get_docstring(node)))
            elif isinstance(node, ast.Assign) and any(
                isinstance(t, ast.Name) and t.id == "pytestmark" for t in node.targets
            ):
                values = node.value.elts if isinstance(node.value, ast.List) else [node.value]
                for value in values:
                    name = _marker_name(value)
                    if name:
                        found.append((path.name, name, value, module_doc))
    return found


def test_some_tests_carry_each_marker() -> None:
    used = {marker for _, marker, _, _ in _uses()}
    assert used == set(MARKERS)


@pytest.mark.parametrize("use", _uses(), ids=lambda use: f"{use[1]}:{use[0]}")
def test_every_marker_names_its_reason(use: tuple[str, str, ast.expr, str | None]) -> None:
    _, _, expression, _ = use
    assert isinstance(expression, ast.Call), "give the marker its reason: marker('why')"
    reasons = [*expression.args, *(k.value for k in expression.keywords if k.arg == "reason")]
    assert reasons, "give the marker its reason: marker('why')"
    assert all(isinstance(r, ast.Constant) and str(r.value).strip() for r in reasons)


@pytest.mark.parametrize(
    "use",
    [use for use in _uses() if use[1] == "production_strict"],
    ids=lambda use: use[0],
)
def test_every_production_strict_test_cites_googles_documentation(
    use: tuple[str, str, ast.expr, str | None],
) -> None:
    _, _, _, docstring = use
    assert docstring and "https://cloud.google.com/" in docstring, (
        "a production_strict test cites Google's documentation of production's behaviour"
    )


def test_an_unknown_emulator_set_is_refused_with_the_choices(
    monkeypatch: pytest.MonkeyPatch, pytestconfig: pytest.Config
) -> None:
    chosen = emulator_set.emulator_set(pytestconfig)
    try:
        monkeypatch.setenv(emulator_set.ENV_VAR, "firebase")
        with pytest.raises(pytest.UsageError, match="expected one of builtin, google"):
            emulator_set.pytest_configure(pytestconfig)
        monkeypatch.setenv(emulator_set.ENV_VAR, "")
        emulator_set.pytest_configure(pytestconfig)
        assert emulator_set.emulator_set(pytestconfig) == emulator_set.BUILTIN
    finally:  # this run's own choice back
        monkeypatch.setenv(emulator_set.ENV_VAR, chosen)
        emulator_set.pytest_configure(pytestconfig)


def test_the_markers_are_registered_for_strict_markers() -> None:
    pyproject = (ROOT / "pyproject.toml").read_text()
    for marker in MARKERS:
        assert f'"{marker}(reason):' in pyproject


def test_make_test_google_runs_every_folder_whose_tests_reach_the_emulator_fixtures() -> None:
    """A folder left out of GOOGLE_TIERS would silently never meet Google's emulators."""
    makefile = (ROOT / "Makefile").read_text()
    match = re.search(r"^GOOGLE_TIERS := \$\(addprefix tests/integration/,(.+)\)$", makefile, re.M)
    assert match, "GOOGLE_TIERS in the Makefile"
    tiers = match.group(1).split()
    fixtures = re.compile(
        r"\b(firestore_emulator|firestore_client|firestore_project|pubsub_emulator|"
        r"pubsub_project|publisher_client|subscriber_client)\b"
    )
    reaching = set()
    for path in (ROOT / "tests" / "integration").rglob("*.py"):
        if fixtures.search(path.read_text()):
            relative = path.relative_to(ROOT / "tests" / "integration")
            reaching.add(relative.as_posix())
    missed = sorted(
        r for r in reaching if not any(r == t or r.startswith(t.rstrip("/") + "/") for t in tiers)
    )
    assert missed == []
