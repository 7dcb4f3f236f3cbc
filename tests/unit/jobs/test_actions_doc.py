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


def _section(title: str) -> str:
    text = DOC.read_text()
    return text[text.index(title) :]


def test_the_http_sections_json_snippets_are_targets_and_a_job_the_store_accepts() -> None:
    import json
    from datetime import datetime

    from services.jobs.deployment import Deployment
    from services.jobs.http_targets import parse_targets
    from services.jobs.model import NewJob

    section = _section("## 5. Serve an action in any language over HTTP")
    targets_json, job_json = [b for lang, b in FENCE.findall(section) if lang == "json"]
    targets = parse_targets(targets_json)
    assert set(targets) == {"trials", "billing"}
    assert targets["billing"].audience == "billing-deferred-jobs"
    body = json.loads(job_json)
    job = NewJob(
        body["job_id"],
        body["action"],
        body["subject"],
        datetime.fromisoformat(body["due_at"]),
        body["params"],
    )
    catalogue = load_catalogue(deployment=Deployment(http_targets=targets))
    assert job.validated(catalogue).params == body["params"]


def test_the_http_sections_stack_snippet_is_what_the_stack_parses() -> None:
    import json

    import yaml

    from infra.config import RunTarget, parse_config
    from services.jobs.http_targets import parse_targets
    from tests.infra.test_config import MINIMAL

    section = _section("## 5. Serve an action in any language over HTTP")
    (stack,) = [b for lang, b in FENCE.findall(section) if lang == "yaml"]
    raw = yaml.safe_load(stack)["config"]["deferred-jobs:httpTargets"]
    config = parse_config({**MINIMAL, "httpTargets": json.dumps(raw)})
    targets_json = next(b for lang, b in FENCE.findall(section) if lang == "json")
    assert config.http_targets.targets == parse_targets(targets_json)
    assert config.http_targets.run_services == (RunTarget("trials", None, "trials"),)


def test_the_response_contract_table_is_what_the_worker_applies() -> None:
    from datetime import UTC, datetime

    from services.jobs.http_targets import judge

    now = datetime(2026, 1, 1, tzinfo=UTC)
    table = _section("### The response contract")
    assert "| 2xx | done" in table and judge(204, None, now).verdict == "done"
    assert "| 429 or 503 with `Retry-After`" in table
    assert judge(429, "30", now).verdict == judge(503, "30", now).verdict == "retry_after"
    assert judge(429, "99999999", now).retry_after_s == 3600
    assert "bounded to 1 s \u2013 1 h" in table
    assert judge(503, "0", now).retry_after_s == 1
    assert "any other 5xx" in table
    assert {judge(s, None, now).verdict for s in (429, 500, 502, 503, 504)} == {"transient"}
    assert "| any other status: 4xx, and 3xx" in table
    assert {judge(s, None, now).verdict for s in (301, 400, 401, 404, 409)} == {"permanent"}
