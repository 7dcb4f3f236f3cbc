"""Test-wide setup: tier markers by folder, a clean JOBS_ environment, shared fixtures."""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path

import pytest

pytest_plugins = [
    "tests.fixtures.emulator_set",
    "tests.fixtures.firestore",
    "tests.fixtures.pubsub",
    "tests.fixtures.oidc",
    "tests.fixtures.storage",
    "tests.fixtures.cloudrun",
    "tests.fixtures.plugin",
]

_TIERS = {"integration": "integration", "infra": "infra"}


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    for item in items:
        parts = Path(str(item.fspath)).parts
        for folder, marker in _TIERS.items():
            if folder in parts:
                item.add_marker(getattr(pytest.mark, marker))


@pytest.fixture(autouse=True)
def _clean_jobs_environment(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    """Settings come from JOBS_* variables; a developer's shell must not leak into tests."""
    for key in list(os.environ):
        if key.startswith("JOBS_"):
            monkeypatch.delenv(key)
    yield
