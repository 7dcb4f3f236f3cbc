"""constraints.txt is exactly what a clean install of the project resolves to, asked of pip
itself (tests/image/constraints.py), so the image installs what was tested and nothing more."""

from __future__ import annotations

import pytest

from tests.image.constraints import CONSTRAINTS, differences, read_pins, render, resolve

pytestmark = pytest.mark.image


def test_constraints_pin_exactly_what_a_clean_install_resolves_with_them() -> None:
    pinned = read_pins(CONSTRAINTS.read_text())
    assert "functions-framework" in pinned and "deferred-jobs" not in pinned
    assert differences(pinned, resolve(CONSTRAINTS)) == []


def test_the_check_names_a_missing_a_stale_and_a_moved_pin() -> None:
    pinned = {"flask": "3.1.3", "gone": "1.0", "grpcio": "1.85.3"}
    resolved = {"flask": "3.1.3", "grpcio": "1.86.0", "new": "2.0"}
    assert differences(pinned, resolved) == [
        "gone==1.0: pinned but not installed",
        "grpcio: pinned 1.85.3, resolved 1.86.0",
        "new: resolved 2.0 but not pinned",
    ]


def test_the_written_file_reads_back_as_the_same_pins() -> None:
    pins = {"flask": "3.1.3", "typing-extensions": "4.16.0"}
    assert read_pins(render(pins)) == pins
    assert read_pins("Flask==3.1.3\ntyping_extensions==4.16.0\n") == pins
