"""`make run` keeps the emulators' data between runs (LOG_DIR/data) and says so; --fresh
starts empty and keeps nothing."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from tests.integration.local.test_local_stack import FIRST_RUN_CLAIMS_THE_DEMO, TIMEOUT_S, _start

# It starts whole local stacks: one at a time (see tests/unit/test_make.py).
pytestmark = pytest.mark.xdist_group("local_stack")


def _run(log_dir: Path, *extra: str) -> str:
    proc = _start(log_dir, "--exit-when-done", *extra)
    out, err = proc.communicate(timeout=TIMEOUT_S)
    assert proc.returncode == 0, err + out
    return out


def test_a_second_run_continues_from_the_kept_data_and_fresh_starts_empty(
    tmp_path: Path,
) -> None:
    first = _run(tmp_path)
    data = tmp_path / "data"
    assert f"data: kept in {data} between runs (--fresh starts empty)" in first
    assert re.search(FIRST_RUN_CLAIMS_THE_DEMO, first, flags=re.MULTILINE), first
    assert (data / "firestore.json").exists() and (data / "pubsub.json").exists()

    second = _run(tmp_path)  # the demo's jobs are kept: done at once, nothing claimed again
    assert f"data: kept in {data}" in second
    assert "demo: kept from an earlier run (not seeded again)" in second
    assert "demo done: 3/3 due jobs completed, 3/3 source files deleted" in second
    assert not re.search(r"^scan #\d+ \([^)]*\): claimed [1-9]", second, flags=re.MULTILINE)

    fresh = _run(tmp_path, "--fresh")
    assert "data: --fresh: started empty; nothing is kept" in fresh
    assert re.search(FIRST_RUN_CLAIMS_THE_DEMO, fresh, flags=re.MULTILINE), fresh
