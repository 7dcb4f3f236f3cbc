"""Composite indexes the emulator's own query tests need: the session emulator is strict."""

from __future__ import annotations

from collections.abc import Callable

import pytest

from emulators.firestore.indexes import CompositeIndex
from emulators.firestore.server import Emulator

AddIndex = Callable[..., None]


@pytest.fixture
def add_index(firestore_emulator: Emulator, firestore_project: str) -> AddIndex:
    """``add_index("nums", "parity", ("i", "DESCENDING"))``: create a composite index in the
    test's project (fields ascending unless given as (path, mode))."""

    def add(collection: str, *fields: str | tuple[str, str], scope: str = "COLLECTION") -> None:
        pairs = [(f, "ASCENDING") if isinstance(f, str) else f for f in fields]
        firestore_emulator.add_index(firestore_project, CompositeIndex.of(collection, pairs, scope))

    return add
