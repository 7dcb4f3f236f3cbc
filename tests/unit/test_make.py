"""`make test` runs the default tiers in parallel, and the groups that must not overlap exist."""

from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def _recipe(target: str) -> str:
    text = (ROOT / "Makefile").read_text()
    match = re.search(rf"^{target}:.*\n((?:\t.*\n|ifeq.*\n|else\n|endif\n)+)", text, flags=re.M)
    assert match, target
    return match.group(1)


def test_the_test_targets_run_pytest_with_xdist_load_groups() -> None:
    text = (ROOT / "Makefile").read_text()
    parallel = re.search(r"^PARALLEL \?= (.+)$", text, flags=re.MULTILINE)
    assert parallel and parallel.group(1).split() == ["-n", "2", "--dist", "loadgroup"]
    for target in ("unit", "integration", "infra"):
        assert "$(BIN)/pytest" in _recipe(target) and "$(PARALLEL)" in _recipe(target), target


def test_make_test_runs_every_default_tier_and_the_infra_tier_in_its_own_processes() -> None:
    text = (ROOT / "Makefile").read_text()
    default = text.split("ifeq ($(strip $(PYTEST_ARGS)),)", 1)[1].split("else", 1)[0]
    runs = [line.split()[1:] for line in default.strip().splitlines()]
    assert runs == [
        ["$(PARALLEL)", "tests/unit", "tests/integration"],
        ["$(PARALLEL)", "tests/infra"],
    ]
    # Together they are exactly the configured default tiers.
    pyproject = (ROOT / "pyproject.toml").read_text()
    assert 'testpaths = ["tests/unit", "tests/integration", "tests/infra"]' in pyproject


def test_every_test_that_starts_a_whole_local_stack_is_in_the_local_stack_group() -> None:
    """Two stacks at once race for free ports (a container port taken between pick and bind
    is served by the other stack's process), so every test that starts one shares a group."""
    starts_a_stack = re.compile(r'"-m", "services\.local"|test_local_stack import .*_start')
    grouped = 'pytest.mark.xdist_group("local_stack")'
    for path in sorted((ROOT / "tests" / "integration").rglob("test_*.py")):
        text = path.read_text()
        if starts_a_stack.search(text) or (
            path.parent.name == "local" and '"services.local"' in text
        ):
            assert grouped in text, path.name


def test_no_test_module_draws_from_the_global_random_state() -> None:
    """pyproject.toml filters Hypothesis's "random inside strategies" warning because client
    libraries' retry jitter moves the global state from background threads; that is only sound
    while our own tests (and strategies) never use the global `random` module."""
    # A private random.Random(seed) is fine; the module's own functions share global state.
    uses = re.compile(r"\brandom\.(?!Random\b)\w+\(|from random import")
    offenders = [
        path.relative_to(ROOT).as_posix()
        for path in sorted((ROOT / "tests").rglob("*.py"))
        if path != Path(__file__).resolve() and uses.search(path.read_text())
    ]
    assert offenders == []
