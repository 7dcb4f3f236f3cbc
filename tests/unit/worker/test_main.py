"""The functions-framework target builds nothing at import and reads settings on first use."""

from __future__ import annotations

import importlib

import flask
import pytest

from services.jobs.settings import SettingsError


def test_importing_the_entry_point_builds_no_app() -> None:
    main = importlib.import_module("services.worker.main")
    assert main._handler is None
    assert callable(main.worker)


def test_first_request_with_missing_settings_fails_naming_the_keys() -> None:
    main = importlib.import_module("services.worker.main")
    app = flask.Flask("probe")
    with app.test_request_context("/", method="POST"), pytest.raises(SettingsError) as caught:
        main.worker(flask.request)
    assert "JOBS_WORKER_AUDIENCE" in str(caught.value)
    assert main._handler is None
