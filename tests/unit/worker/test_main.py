"""The functions-framework target builds nothing at import and reads settings on first use."""

from __future__ import annotations

import importlib
import json

import flask


def test_importing_the_entry_point_builds_no_app() -> None:
    main = importlib.import_module("services.worker.main")
    assert not main._shared_handler.built
    assert callable(main.worker)


def test_first_request_with_missing_settings_answers_json_naming_the_keys() -> None:
    # The image's start-up check exits first (tests/infra/test_startup.py); a process started
    # without it still answers JSON, never a traceback.
    main = importlib.import_module("services.worker.main")
    app = flask.Flask("probe")
    with app.test_request_context("/", method="POST"):
        response = main.worker(flask.request)
    assert (response.status_code, response.mimetype) == (500, "application/json")
    error = response.get_json()["error"]  # Google's error model
    assert (error["code"], error["status"]) == (500, "INTERNAL")
    assert "JOBS_WORKER_AUDIENCE" in error["message"]
    assert "JOBS_WORKER_AUDIENCE" in json.loads(error["details"][0]["metadata"]["keys"])
    assert not main._shared_handler.built
