from __future__ import annotations

import importlib
import json
from pathlib import Path

import pytest

from services.edge import scan_deployment, startup
from services.edge import settings as common_keys
from services.scan import settings as scan_keys
from tests.fixtures.plugin import install, on_path


def test_importing_the_entry_point_builds_nothing_and_reads_no_environment() -> None:
    # The test environment has no JOBS_ variables: an import that read settings would fail.
    main = importlib.import_module("services.scan.main")
    assert not main._shared_handler.built
    assert callable(main.scan)


def test_the_start_up_check_refuses_a_plugin_that_cannot_be_loaded(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    # The scan claims by each action's budget: a broken plug-in must stop its start, as the
    # worker's and the api's, not its first run.
    main = importlib.import_module("services.scan.main")
    for key, value in {
        common_keys.PROJECT: "acme-jobs",
        scan_deployment.TOPIC: "deferred-jobs-jobs",
        scan_keys.SCAN_AUDIENCE: "https://scan.example",
        scan_keys.SCAN_ALLOWED_INVOKERS: "caller@acme-jobs.iam.gserviceaccount.com",
    }.items():
        monkeypatch.setenv(key, value)
    assert main.check() == 0
    site = tmp_path / "site"
    install(site, "my-trials", {"my_trials.__init__": ""}, {"trials.expire": "my_trials.gone:X"})
    with on_path(monkeypatch, site):
        assert main.check() == startup.EXIT_BAD_SETTINGS
    line = json.loads(capsys.readouterr().err)
    assert line["event"] == startup.EVENT_CATALOGUE_INVALID
    assert (
        "distribution my-trials 1.0 (entry point trials.expire = my_trials.gone:X"
        in line["message"]
    )
