"""`make emulators` starts only the emulators (README), `make run` the whole local stack."""

from __future__ import annotations

import re
import shutil
import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[3]


def _module_run_by(target: str) -> str:
    make = shutil.which("make")
    if make is None:
        pytest.fail("make is not on PATH; the README's two commands need it")
    # -n prints the recipe without running it; ARGS is passed through to the module.
    recipe = subprocess.run(
        [make, "-n", target, "ARGS=--marker"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        check=True,
        timeout=60,
    ).stdout
    (module,) = re.findall(r"python -m (\S+) --marker", recipe)
    return module


def test_make_emulators_runs_only_the_emulators() -> None:
    assert _module_run_by("emulators") == "emulators"


def test_make_run_runs_the_local_stack() -> None:
    assert _module_run_by("run") == "services.local"
