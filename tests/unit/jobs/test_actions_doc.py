"""docs/actions.md runs as written: its plug-in module and its pyproject entry point, installed
as a distribution (dist-info on sys.path, as pip leaves one), make the action every component
reads, and its check snippet runs verbatim."""

from __future__ import annotations

import io
import re
import tomllib
from contextlib import redirect_stdout
from pathlib import Path

import pytest

from services.jobs.actions import ActionRequest
from services.jobs.catalogue import load_catalogue
from tests.fixtures.plugin import install, on_path

DOC = Path(__file__).resolve().parents[3] / "docs" / "actions.md"
FENCE = re.compile(r"^```(\w+)\n(.*?)^```$", re.S | re.M)


def blocks(language: str) -> list[str]:
    return [body for lang, body in FENCE.findall(DOC.read_text()) if lang == language]


def installed_from_the_doc(tmp_path: Path) -> Path:
    (module,) = [b for b in blocks("python") if b.startswith("# my_trials/actions.py\n")]
    (pyproject,) = blocks("toml")
    project = tomllib.loads(pyproject)["project"]
    site = tmp_path / "site"
    install(
        site,
        project["name"],
        {"my_trials.actions": module, "my_trials.__init__": ""},
        project["entry-points"]["deferred_jobs.actions"],
        version=project["version"],
    )
    return site


def test_the_docs_plugin_joins_the_catalogue_and_its_check_snippet_runs(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    with on_path(monkeypatch, installed_from_the_doc(tmp_path)):
        (check,) = [b for b in blocks("python") if "load_catalogue()" in b]
        out = io.StringIO()
        with redirect_stdout(out):
            exec(compile(check, str(DOC), "exec"), {})
        assert "params.trial_id is required for trials.expire" in out.getvalue()
        assert "params.trial is not a field of trials.expire" in out.getvalue()
        action = load_catalogue().get("trials.expire")
        assert action is not None and callable(action.run)
        request = ActionRequest("trial-42", "trials.expire", "trial-42", {"trial_id": "t"}, 1, "k")
        assert action.run(request).outcome == "expired"
        assert "my-trials 1.0" in load_catalogue().source_of("trials.expire")
