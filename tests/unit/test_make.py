"""`make test` runs the default tiers in parallel, and the groups that must not overlap exist."""

from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def _recipe(target: str) -> str:
    text = (ROOT / "Makefile").read_text()
    match = re.search(rf"^{target}:.*\n((?:\t.*\n)+)", text, flags=re.MULTILINE)
    assert match, target
    return match.group(1)


def test_the_test_targets_run_pytest_with_xdist_load_groups() -> None:
    text = (ROOT / "Makefile").read_text()
    parallel = re.search(r"^PARALLEL \?= (.+)$", text, flags=re.MULTILINE)
    assert parallel and parallel.group(1).split() == ["-n", "2", "--dist", "loadgroup"]
    for target in ("test", "unit", "integration", "infra"):
        assert "$(BIN)/pytest" in _recipe(target) and "$(PARALLEL)" in _recipe(target), target


def test_every_test_that_starts_a_whole_local_stack_is_in_the_local_stack_group() -> None:
    for path in sorted((ROOT / "tests" / "integration" / "local").glob("test_*.py")):
        text = path.read_text()
        if '"services.local"' in text:
            assert 'pytestmark = pytest.mark.xdist_group("local_stack")' in text, path.name
