"""`make run` with a user's plug-in installed beside the project (here: a distribution on
PYTHONPATH, as pip would leave it in site-packages): the stack's banner lists its action, a job
scheduled with jobsctl (params checked at schedule time) runs in the local worker, and the
record holds the plug-in's own result."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from services.cli.app import main as jobsctl
from tests.fixtures.plugin import trials_plugin  # noqa: F401  (the fixture)
from tests.integration.local.running_stack import local_stack

pytestmark = pytest.mark.xdist_group("local_stack")


def test_a_plugin_action_runs_in_make_run(
    trials_plugin: Path,  # noqa: F811
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(trials_plugin), env.get("PYTHONPATH")]))
    with local_stack(tmp_path / "logs", env=env) as stack:
        assert "trials.expire" in stack.banner, stack.banner
        for key, value in stack.exports().items():
            monkeypatch.setenv(key, value)

        capsys.readouterr()
        bad = jobsctl(["schedule", "--action", "trials.expire", "--job-id", "trial-bad",
                       "--subject", "trial-1", "--param", "trial=t-1"])  # fmt: skip
        assert bad == 2 and "params.trial_id" in capsys.readouterr().err
        code = jobsctl(["schedule", "--action", "trials.expire", "--job-id", "trial-1",
                        "--subject", "trial-1", "--param", "trial_id=t-1"])  # fmt: skip
        assert code == 0, capsys.readouterr().err
        job = stack.completed("trial-1", capsys)
    assert job["result"]["outcome"] == "expired"
    assert job["result"]["details"] == {"trial": "t-1"}
    assert job["attempt"] == 1
