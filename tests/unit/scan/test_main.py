from __future__ import annotations

import importlib


def test_importing_the_entry_point_builds_nothing_and_reads_no_environment() -> None:
    # The test environment has no JOBS_ variables: an import that read settings would fail.
    main = importlib.import_module("services.scan.main")
    assert not main._shared_handler.built
    assert callable(main.scan)
