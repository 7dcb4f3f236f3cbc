"""A user's own image, built exactly as docs/actions.md says ("In the image"): the doc's
Dockerfile snippet, verbatim, on the project's image tagged as its `FROM` names it, with the
doc's `my-trials` distribution (its pyproject.toml and my_trials/actions.py, verbatim) in the
build context. Containers of that image know `trials.expire` everywhere: each target's start-up
check, the API that schedules it (its params checked) and `jobsctl`. The same build with an
entry point to a missing module stops every start, naming the distribution and the entry point.
"""

from __future__ import annotations

import json
import os
import subprocess
import tomllib
import urllib.error
import urllib.request
from pathlib import Path
from typing import Any

import pytest

from services.api import settings as api_keys
from services.edge import settings as common_keys
from services.edge.startup import EVENT_CATALOGUE_INVALID, EXIT_BAD_SETTINGS
from services.jobs import schema
from tests.image import podman
from tests.image.test_container import (
    APP_UID,
    CALLER,
    NOWHERE,
    PERMISSION_ERRORS,
    VALID,
    _files,
    _free_port,
    _target_env,
    _wait_listening,
)
from tests.unit.jobs.test_actions_doc import blocks

pytestmark = pytest.mark.image

USER_IMAGE = "localhost/my-deferred-jobs:image-test"
BROKEN_IMAGE = "localhost/my-deferred-jobs:image-test-broken"
ENTRY_POINT = "my_trials.actions:EXPIRE"
MISSING = "my_trials.missing:EXPIRE"  # an entry point to a module the distribution lacks


def _doc_dockerfile() -> str:
    (dockerfile,) = blocks("dockerfile")
    return dockerfile


def _doc_plugin() -> tuple[str, str, dict[str, Any]]:
    """The doc's plug-in: its module's source, its pyproject.toml, and that file's [project]."""
    (module,) = [b for b in blocks("python") if b.startswith("# my_trials/actions.py\n")]
    (pyproject,) = blocks("toml")
    return module, pyproject, tomllib.loads(pyproject)["project"]


def _build_context(root: Path, *, entry_point: str = ENTRY_POINT) -> Path:
    """A build context as the doc's reader has one: the snippet as `Dockerfile`, beside the
    distribution's folder (named as the doc names it) with the files the doc shows."""
    module, pyproject, project = _doc_plugin()
    assert project["entry-points"]["deferred_jobs.actions"] == {"trials.expire": ENTRY_POINT}
    if entry_point != ENTRY_POINT:
        pyproject = pyproject.replace(f'"{ENTRY_POINT}"', f'"{entry_point}"')
    distribution = root / project["name"]
    (distribution / "my_trials").mkdir(parents=True)
    (distribution / "pyproject.toml").write_text(pyproject)
    (distribution / "my_trials" / "actions.py").write_text(module)
    (root / "Dockerfile").write_text(_doc_dockerfile())
    return root


@pytest.fixture(scope="module")
def project_image_as_the_doc_names_it(app_image: str) -> str:
    """The tier's build of the project's Dockerfile, tagged as the snippet's FROM names it."""
    first = _doc_dockerfile().splitlines()[0]
    assert first.startswith("FROM "), first
    name = first.removeprefix("FROM ").strip()
    podman.podman("tag", app_image, f"localhost/{name}")
    return name


@pytest.fixture(scope="module")
def user_image(
    project_image_as_the_doc_names_it: str, tmp_path_factory: pytest.TempPathFactory
) -> str:
    context = _build_context(tmp_path_factory.mktemp("user-image"))
    return podman.build(context, USER_IMAGE)


@pytest.fixture(scope="module")
def broken_image(
    project_image_as_the_doc_names_it: str, tmp_path_factory: pytest.TempPathFactory
) -> str:
    context = _build_context(tmp_path_factory.mktemp("broken-image"), entry_point=MISSING)
    return podman.build(context, BROKEN_IMAGE)


def _python(image: str, source: str, env: dict[str, str] | None = None) -> str:
    done = podman.run(image, "python", "-c", source, env=env)
    assert done.returncode == 0, done.stdout + done.stderr
    return done.stdout


# --- the plug-in is known everywhere -----------------------------------------------------------


def test_the_users_image_adds_only_the_plugin_and_still_runs_as_the_app_user(
    user_image: str, app_image: str
) -> None:
    uid, home, *root_owned = podman.shell(
        user_image, 'id -u; echo "$HOME"; find "$HOME" /tmp ! -user app ! -path /tmp -print'
    ).split()
    assert (int(uid), home) == (APP_UID, "/home/app")
    assert root_owned == [], root_owned  # the doc's RUN left nothing of root's in HOME or /tmp
    site_packages = podman.shell(
        app_image, "python -c 'import site; print(site.getsitepackages()[0])'"
    ).strip()
    added = _files(user_image) - _files(app_image)
    plugin = (f"{site_packages}/my_trials/", f"{site_packages}/my_trials-1.0.dist-info/")
    assert added and [f for f in added if not f.startswith(plugin)] == [], sorted(added)


@pytest.mark.parametrize("target", sorted(VALID))
def test_each_targets_start_up_check_passes_with_the_plugin(user_image: str, target: str) -> None:
    check = podman.run(
        user_image,
        "python",
        "-m",
        f"services.{target}.main",
        env={**_target_env(target), **NOWHERE},
    )
    assert check.returncode == 0, check.stdout + check.stderr


def test_the_catalogue_in_the_image_holds_the_plugin_and_checks_its_params(
    user_image: str,
) -> None:
    # The doc's own check snippet, verbatim, in a container of the image.
    (snippet,) = [b for b in blocks("python") if "load_catalogue()" in b]
    out = _python(user_image, snippet)
    assert "params.trial_id is required for trials.expire" in out, out
    assert "params.trial is not a field of trials.expire" in out, out
    # Who declared it, and the worker's callable runs from the installed distribution.
    source, outcome = _python(
        user_image,
        "from services.jobs.actions import ActionRequest\n"
        "from services.jobs.catalogue import load_catalogue\n"
        "c = load_catalogue()\n"
        "print(c.source_of('trials.expire'))\n"
        "r = ActionRequest('trial-42', 'trials.expire', 'trial-42', {'trial_id': 't-42'}, 1, 'k')\n"
        "print(c.get('trials.expire').run(r).outcome)\n",
    ).splitlines()
    assert source.startswith(
        f"distribution my-trials 1.0 (entry point trials.expire = {ENTRY_POINT}"
    )
    assert outcome == "expired"
    helped = podman.run(user_image, "jobsctl", "schedule", "--help")
    assert helped.returncode == 0, helped.stderr
    assert "trials.expire (params: trial_id" in " ".join(helped.stdout.split()), helped.stdout


def test_jobsctl_in_the_image_schedules_the_plugins_action_and_refuses_bad_params(
    user_image: str, firestore_emulator: Any, firestore_project: str, firestore_client: Any
) -> None:
    env = {**NOWHERE, "FIRESTORE_EMULATOR_HOST": firestore_emulator.address}
    jobsctl = ["jobsctl", "schedule", f"--project={firestore_project}", "--action=trials.expire"]
    common = ["--decision=d-1", "--subject=trial-42", "--due=+14d"]
    bad = podman.run(
        user_image, *jobsctl, *common, "--param=trial=t-42", env=env, extra=["--network=host"]
    )
    assert bad.returncode == 2, bad.stdout + bad.stderr
    assert "params.trial_id is required for trials.expire" in bad.stderr, bad.stderr
    good = podman.run(
        user_image, *jobsctl, *common, "--param=trial_id=t-42", env=env, extra=["--network=host"]
    )
    assert good.returncode == 0, good.stdout + good.stderr
    assert good.stdout.startswith("scheduled: "), good.stdout
    job_id = good.stdout.split("\n", 1)[0].removeprefix("scheduled: ")
    stored = firestore_client.collection(schema.JOBS).document(job_id).get().to_dict()
    assert stored["action"] == "trials.expire"
    assert stored["params"] == {"trial_id": "t-42"}


def test_the_api_in_the_image_schedules_the_plugins_action_and_refuses_bad_params(
    user_image: str,
    firestore_emulator: Any,
    firestore_project: str,
    firestore_client: Any,
    oidc_server: Any,
) -> None:
    port = _free_port()
    audience = f"http://127.0.0.1:{port}"
    name = f"deferred-jobs-user-api-{port}"
    env = {
        **_target_env("api"),
        **NOWHERE,
        "FIRESTORE_EMULATOR_HOST": firestore_emulator.address,
        common_keys.PROJECT: firestore_project,
        common_keys.OIDC_CERTS_URL: oidc_server.certs_url,
        api_keys.API_AUDIENCE: audience,
        api_keys.API_ALLOWED_CALLERS: CALLER,
        "PORT": str(port),
        "HOST": "127.0.0.1",
    }
    podman.podman(
        "run",
        "--detach",
        f"--name={name}",
        "--network=host",
        *podman.run_flags(),
        *(f"--env={k}={v}" for k, v in env.items()),
        user_image,
    )
    try:
        _wait_listening(port, name)
        token = oidc_server.issuer.mint(audience, CALLER)
        job = {"decision_id": "d-1", "action": "trials.expire", "subject": "trial-42"}
        bad_status, bad = _post(
            f"{audience}/v1/jobs", {**job, "params": {"trial": "t"}, "delay": "60s"}, token
        )
        status, body = _post(
            f"{audience}/v1/jobs", {**job, "params": {"trial_id": "t-42"}, "delay": "60s"}, token
        )
        logs = podman.podman("logs", name)
    finally:
        podman.podman("rm", "--force", name, check=False)
    assert bad_status == 400, bad
    assert "params.trial_id is required for trials.expire" in json.dumps(bad), bad
    assert status == 201, body
    stored = firestore_client.collection(schema.JOBS).document(body["job_id"]).get().to_dict()
    assert (stored["action"], stored["params"]) == ("trials.expire", {"trial_id": "t-42"})
    output = logs.stdout + logs.stderr
    assert "Traceback" not in output and not [e for e in PERMISSION_ERRORS if e in output], output


def _post(url: str, body: dict[str, Any], token: str) -> tuple[int, dict[str, Any]]:
    request = urllib.request.Request(
        url,
        data=json.dumps(body).encode(),
        headers={"Authorization": f"Bearer {token}", "Content-Type": "application/json"},
        method="POST",
    )
    try:
        with urllib.request.urlopen(request, timeout=60) as response:
            return response.status, json.loads(response.read())
    except urllib.error.HTTPError as exc:
        return exc.code, json.loads(exc.read())


# --- a broken plug-in stops every start --------------------------------------------------------


@pytest.mark.parametrize("target", sorted(VALID))
def test_an_entry_point_to_a_missing_module_stops_the_start_naming_distribution_and_entry_point(
    broken_image: str, target: str
) -> None:
    # The image's own CMD, with settings that pass: the catalogue check alone refuses.
    name = f"deferred-jobs-broken-{target}-{os.getpid()}"
    try:
        done = podman.run(
            broken_image, env={**_target_env(target), **NOWHERE}, extra=[f"--name={name}"]
        )
    except subprocess.TimeoutExpired:
        logs = podman.podman("logs", name, check=False)
        pytest.fail(f"{target} started with the broken plug-in:\n{logs.stdout}{logs.stderr}")
    finally:
        podman.podman("rm", "--force", name, check=False)
    output = done.stdout + done.stderr
    assert done.returncode == EXIT_BAD_SETTINGS, output
    lines = [json.loads(line) for line in output.splitlines() if line.startswith("{")]
    (line,) = [line for line in lines if line.get("event") == EVENT_CATALOGUE_INVALID]
    assert line["severity"] == "CRITICAL"
    assert "distribution my-trials 1.0" in line["message"], line
    assert f"entry point trials.expire = {MISSING}" in line["message"], line
    assert "ModuleNotFoundError" in line["message"], line
    assert "Traceback" not in output


def test_jobsctl_in_the_broken_image_exits_2_naming_the_plugin(broken_image: str) -> None:
    done = podman.run(broken_image, "jobsctl", "actions")
    assert done.returncode == 2, done.stdout + done.stderr
    assert "jobsctl: action catalogue: distribution my-trials 1.0" in done.stderr, done.stderr
    assert f"entry point trials.expire = {MISSING}" in done.stderr, done.stderr
