"""The action catalogue: the built-in actions and every installed distribution's entry points
in `deferred_jobs.actions`, read by every component; a broken or conflicting plug-in stops the
process at start, naming the distribution and the entry point; and no other place lists
actions."""

from __future__ import annotations

import ast
import io
import json
from contextlib import redirect_stdout
from dataclasses import replace
from datetime import UTC, datetime
from pathlib import Path

import pytest

from services.api.app import create_app as create_api
from services.cli.app import main as jobsctl
from services.edge import startup
from services.jobs.actions import Action, ActionRequest
from services.jobs.catalogue import ENTRY_POINT_GROUP, built_in, load_catalogue
from services.jobs.clock import FakeClock
from services.jobs.errors import CatalogueError, ValidationError
from services.jobs.model import NewJob
from services.worker.actions import runner_of
from services.worker.app import default_actions
from tests.fixtures.plugin import TRIALS_MODULE, install, on_path
from tests.unit.api.conftest import SETTINGS as API_SETTINGS
from tests.unit.api.fakes import GOOD, FakeStore, FakeVerifier
from tests.unit.worker.test_app import SETTINGS as WORKER_SETTINGS

ROOT = Path(__file__).resolve().parents[3]
T0 = datetime(2026, 1, 1, tzinfo=UTC)
T0_CLOCK = FakeClock(T0)
TRIAL = NewJob("trial-1", "trials.expire", "trial-1", T0, {"trial_id": "t-1"})


def test_the_built_in_catalogue_holds_the_media_actions_and_http_request() -> None:
    catalogue = built_in()
    assert catalogue.names() == ["media.delete_source", "media.delete_prefix", "http.request"]
    assert catalogue.default() == "media.delete_source"


def test_an_installed_plugins_action_joins_the_catalogue_with_its_source(
    trials_plugin: Path,
) -> None:
    catalogue = load_catalogue()
    assert catalogue.names() == [
        "media.delete_source",
        "media.delete_prefix",
        "http.request",
        "trials.expire",
    ]
    action = catalogue.get("trials.expire")
    assert action is not None and action.budget is not None and action.budget.per_second == 5
    source = catalogue.source_of("trials.expire")
    assert "my-trials 1.0" in source and "trials.expire = my_trials.actions:EXPIRE" in source


def test_schedule_validation_checks_a_plugins_params(trials_plugin: Path) -> None:
    catalogue = load_catalogue()
    assert TRIAL.validated(catalogue).params == {"trial_id": "t-1"}
    with pytest.raises(ValidationError, match=r"params\.trial_id is required for trials\.expire"):
        replace(TRIAL, params={"trail_id": "t-1"}).validated(catalogue)
    # Without the plug-in the action is unknown, as before.
    with pytest.raises(ValidationError, match=r"unknown action 'trials\.expire'"):
        TRIAL.validated(built_in())


def test_jobsctl_help_names_the_plugins_action(trials_plugin: Path) -> None:
    out = io.StringIO()
    with redirect_stdout(out):
        assert jobsctl(["schedule", "--help"]) == 0
    text = " ".join(out.getvalue().split())
    assert "trials.expire (params: trial_id (string), notify (boolean))" in text


def test_the_apis_document_lists_the_plugins_action(trials_plugin: Path) -> None:
    app = create_api(API_SETTINGS, store=FakeStore(T0_CLOCK), verifier=FakeVerifier())
    served = app.test_client().get("/v1/openapi.json", headers={"Authorization": GOOD})
    action = served.get_json()["components"]["schemas"]["ScheduleRequest"]["properties"]["action"]
    assert action["enum"] == [
        "media.delete_source",
        "media.delete_prefix",
        "http.request",
        "trials.expire",
    ]


@pytest.fixture
def no_credentials(monkeypatch: pytest.MonkeyPatch) -> None:
    """The storage client of the built-in action, built without credentials (never called)."""
    monkeypatch.setenv("STORAGE_EMULATOR_HOST", "http://127.0.0.1:9")


@pytest.mark.usefixtures("no_credentials")
def test_the_worker_binds_the_plugins_action(trials_plugin: Path) -> None:
    registry = default_actions(WORKER_SETTINGS, load_catalogue())
    action = registry.get("trials.expire")
    assert action is not None
    request = ActionRequest("trial-1", "trials.expire", "trial-1", {"trial_id": "t-1"}, 1, "k")
    assert runner_of(action)(request).outcome == "expired"
    # Its own policy; the built-in one gets the worker's configured policy.
    assert action.policy is not None and action.policy.long_retry_delay.total_seconds() == 3600
    media = registry.get("media.delete_source")
    assert media is not None and media.policy == WORKER_SETTINGS.retry_policy


def _broken(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, source: str, value: str) -> str:
    """Install `bad-plugin` whose module is `source` and entry point `value`; the message."""
    site = tmp_path / "site"
    install(site, "bad-plugin", {"bad_plugin": source}, {"bad.action": value})
    with on_path(monkeypatch, site), pytest.raises(CatalogueError) as caught:
        load_catalogue()
    return str(caught.value)


@pytest.mark.parametrize(
    ("source", "value", "why"),
    [
        ("import not_a_module_anywhere\n", "bad_plugin:X", "ModuleNotFoundError"),
        ("X = 3\n", "bad_plugin:X", "is int, not an Action declaration"),
        ("X = 3\n", "bad_plugin:MISSING", "AttributeError"),
        (
            "from services.jobs.actions import Action\nX = Action('other.action', run=len)\n",
            "bad_plugin:X",
            "the entry point's name must be the action's name",
        ),
        (
            "from services.jobs.actions import Action\nX = Action('bad.action', run=None)\n",
            "bad_plugin:X",
            "give exactly one of run",
        ),
    ],
)
def test_a_broken_plugin_stops_the_start_naming_the_distribution_and_entry_point(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, source: str, value: str, why: str
) -> None:
    message = _broken(tmp_path, monkeypatch, source, value)
    assert "distribution bad-plugin 1.0" in message
    assert f"entry point bad.action = {value} in {ENTRY_POINT_GROUP}" in message
    assert why in message


def test_a_plugin_that_takes_a_built_in_name_conflicts(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    site = tmp_path / "site"
    source = "from services.jobs.media import DELETE_SOURCE as X\n"
    install(site, "copycat", {"copycat": source}, {"media.delete_source": "copycat:X"})
    with on_path(monkeypatch, site), pytest.raises(CatalogueError) as caught:
        load_catalogue()
    assert "distribution copycat 1.0 (entry point media.delete_source" in str(caught.value)
    assert "already declared by deferred-jobs (built in)" in str(caught.value)


def test_two_plugins_declaring_one_name_conflict_naming_both(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    site = tmp_path / "site"
    install(site, "my-trials", {"my_trials": TRIALS_MODULE}, {"trials.expire": "my_trials:EXPIRE"})
    install(
        site,
        "their-trials",
        {"their_trials": TRIALS_MODULE},
        {"trials.expire": "their_trials:EXPIRE"},
    )
    with on_path(monkeypatch, site), pytest.raises(CatalogueError) as caught:
        load_catalogue()
    assert "my-trials" in str(caught.value) and "their-trials" in str(caught.value)


@pytest.mark.usefixtures("no_credentials")
def test_every_process_start_refuses_a_broken_plugin(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    site = tmp_path / "site"
    install(
        site,
        "bad-plugin",
        {"bad_plugin": "raise RuntimeError('boom')\n"},
        {"bad.x": "bad_plugin:X"},
    )
    with on_path(monkeypatch, site):
        # The services' start-up check (the image runs it before the port opens).
        stream = io.StringIO()
        assert startup.check_catalogue("worker", stream=stream) == startup.EXIT_BAD_SETTINGS
        line = json.loads(stream.getvalue())
        assert line["event"] == startup.EVENT_CATALOGUE_INVALID
        assert "bad-plugin" in line["message"] and "RuntimeError: boom" in line["message"]
        # jobsctl, before any command.
        assert jobsctl(["actions", "--names"]) == 2
        assert "distribution bad-plugin 1.0" in capsys.readouterr().err
        # The API and the worker, built without a catalogue, load it themselves.
        with pytest.raises(CatalogueError):
            create_api(API_SETTINGS, store=FakeStore(T0_CLOCK), verifier=FakeVerifier())
        with pytest.raises(CatalogueError):
            default_actions(WORKER_SETTINGS)


def test_a_declaration_refuses_a_bad_name_or_reference() -> None:
    with pytest.raises(ValueError, match="dotted lower-case words"):
        Action("Trials Expire", run=len)
    with pytest.raises(ValueError, match=r"not a 'package\.module:attribute' reference"):
        Action("trials.expire", run="my_trials.actions.expire")


def _string_constants(path: Path) -> list[tuple[int, str]]:
    """The string literals of a module, docstrings left out."""
    tree = ast.parse(path.read_text())
    docstrings = {
        id(node.body[0].value)
        for node in ast.walk(tree)
        if isinstance(node, ast.Module | ast.ClassDef | ast.FunctionDef | ast.AsyncFunctionDef)
        and node.body
        and isinstance(node.body[0], ast.Expr)
        and isinstance(node.body[0].value, ast.Constant)
    }
    return [
        (node.lineno, node.value)
        for node in ast.walk(tree)
        if isinstance(node, ast.Constant)
        and isinstance(node.value, str)
        and id(node) not in docstrings
    ]


def test_nothing_but_its_declaration_spells_an_actions_name() -> None:
    """Every component reads the catalogue: no code outside an action's declaring module names
    it (docstrings may, as prose), and the OpenAPI file names none (the served document gets
    them from the catalogue)."""
    declaring = {ROOT / "services" / "jobs" / name for name in ("media.py", "http_request.py")}
    names = built_in().names()
    found = [
        f"{path.relative_to(ROOT)}:{line} {value!r}"
        for top in ("services", "infra", "emulators")
        for path in sorted((ROOT / top).rglob("*.py"))
        if path not in declaring
        for line, value in _string_constants(path)
        if any(name in value for name in names)
    ]
    assert found == []
    openapi = (ROOT / "services" / "api" / "openapi.json").read_text()
    assert [name for name in names if name in openapi] == []
