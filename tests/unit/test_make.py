"""`make test` runs the default tiers in parallel, and the groups that must not overlap exist."""

from __future__ import annotations

import os
import re
import subprocess
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
    runs = re.findall(r"tier (\w+) \$\(BIN\)/pytest ([^;]+);", default)
    assert runs == [
        ("unit", "$(PARALLEL) tests/unit"),
        ("integration", "$(PARALLEL) tests/integration"),
        ("infra", "$(PARALLEL) tests/infra"),
    ]
    # Together they are exactly the configured default tiers.
    pyproject = (ROOT / "pyproject.toml").read_text()
    assert 'testpaths = ["tests/unit", "tests/integration", "tests/infra"]' in pyproject


def test_make_test_runs_every_tier_when_one_fails_and_reports_each_verdict(
    tmp_path: Path,
) -> None:
    # Before (issue 33, finding 9): the first failing tier stopped `make test`, and nothing
    # said that the tiers after it never ran.
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    ran = tmp_path / "ran"
    ran.touch()
    stubs = {
        "ruff": "exit 1",  # lint fails
        "mypy": "exit 0",
        # the integration tier fails; the others pass
        "pytest": 'case "$*" in *tests/integration*) exit 7;; esac; exit 0',
    }
    for tool, body in stubs.items():
        stub = bin_dir / tool
        stub.write_text(f'#!/bin/sh\necho "{tool} $*" >> {ran}\n{body}\n')
        stub.chmod(0o755)
    result = subprocess.run(
        # STAMP: a file newer than pyproject.toml, so the venv rule has nothing to build.
        ["make", "--no-print-directory", "test", f"BIN={bin_dir}", f"STAMP={ran}", "PYTEST_ARGS="],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=60,
        # Not the variables of a `make test` this test may run under (PYTEST_ARGS, ...).
        env={k: v for k, v in os.environ.items() if k not in {"MAKEFLAGS", "MFLAGS", "MAKELEVEL"}},
    )
    assert result.returncode != 0
    tools = [line.split()[0] for line in ran.read_text().splitlines()]
    assert tools == ["ruff", "mypy", "pytest", "pytest", "pytest"]  # every tier ran
    summary = result.stdout.split("make test, each tier:", 1)[1].splitlines()
    assert [line.split(maxsplit=1) for line in summary if line.strip()] == [
        ["lint", "FAILED (exit 2)"],
        ["typecheck", "passed"],
        ["unit", "passed"],
        ["integration", "FAILED (exit 7)"],
        ["infra", "passed"],
    ]


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
