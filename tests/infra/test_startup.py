"""A bad JOBS_* value stops the process before it listens, naming every bad key; every error
answer of the services, as functions-framework serves them, is JSON.

The image's CMD runs `python -P -m services.<target>.main` (the FUNCTION_SOURCE module) and only
then functions-framework; the startup probe (tests/infra/test_first_deploy.py) then fails a
revision whose check exited.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Iterator

import flask
import functions_framework
import pytest

from infra import env
from tests.infra.conftest import ROOT, StackRun

SERVICES = sorted(env.FUNCTION_SOURCES)
# Behind Cloud Run's IAM check; the console is behind IAP, whose signed header it verifies itself
# (its settings' tests: tests/unit/console/test_settings.py).
BEHIND_IAM = [target for target in SERVICES if target != "console"]


def _jobs_envs(run: StackRun, key: str) -> dict[str, str]:
    container = run.one("cloudrunv2/service:Service", f"{key}-service").state["template"][
        "containers"
    ][0]
    return {i["name"]: i["value"] for i in container["envs"] if i["name"].startswith("JOBS_")}


def _check(
    target: str, jobs: dict[str, str], *, on_cloud_run: bool = True
) -> subprocess.CompletedProcess[str]:
    environ = {k: v for k, v in os.environ.items() if not k.startswith(("JOBS_", "K_"))}
    if on_cloud_run:
        # Cloud Run gives every container K_SERVICE (the behind-IAM flag requires it).
        environ["K_SERVICE"] = f"deferred-jobs-{target}"
    return subprocess.run(
        [sys.executable, "-m", f"services.{target}.main"],
        cwd=ROOT,
        env={**environ, **jobs},
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )


def test_the_check_module_is_the_function_source() -> None:
    for target, source in env.FUNCTION_SOURCES.items():
        assert source == f"services/{target}/main.py"


@pytest.mark.parametrize("target", SERVICES)
def test_the_check_passes_with_the_environment_the_stack_sets(
    dev_with_console: StackRun, target: str
) -> None:
    done = _check(target, _jobs_envs(dev_with_console, target))
    assert done.returncode == 0, done.stderr[-2000:]
    assert done.stdout == ""


@pytest.mark.parametrize("target", SERVICES)
def test_a_bad_setting_exits_2_naming_every_bad_key(
    dev_with_console: StackRun, target: str
) -> None:
    jobs = _jobs_envs(dev_with_console, target)
    jobs.pop("JOBS_PROJECT")
    jobs["JOBS_TERMINAL_RETENTION_S"] = "forever"
    jobs["JOBS_AUTH_CLOCK_SKEW_S"] = "9999"
    done = _check(target, jobs)
    assert done.returncode == 2
    (line,) = [json.loads(x) for x in done.stderr.splitlines() if x.startswith("{")]
    assert line["severity"] == "CRITICAL"
    assert line["event"] == "settings_invalid"
    assert line["keys"] == [
        "JOBS_AUTH_CLOCK_SKEW_S",
        "JOBS_PROJECT",
        "JOBS_TERMINAL_RETENTION_S",
    ]
    for key in line["keys"]:
        assert key in line["message"]
    assert "Traceback" not in done.stderr


@pytest.mark.parametrize("target", BEHIND_IAM)
def test_the_behind_iam_flag_off_cloud_run_exits_2_naming_it_and_k_service(
    dev_with_console: StackRun, target: str
) -> None:
    jobs = _jobs_envs(dev_with_console, target)
    assert jobs["JOBS_AUTH_BEHIND_CLOUD_RUN_IAM"] == "true"
    done = _check(target, jobs, on_cloud_run=False)
    assert done.returncode == 2
    (line,) = [json.loads(x) for x in done.stderr.splitlines() if x.startswith("{")]
    assert line["keys"] == ["JOBS_AUTH_BEHIND_CLOUD_RUN_IAM"]
    assert "K_SERVICE is not set" in line["message"]


def test_the_image_runs_the_check_before_functions_framework() -> None:
    text = (ROOT / "Dockerfile").read_text().replace("\\\n", " ")
    (cmd,) = [line for line in text.splitlines() if line.startswith("CMD ")]
    check, _, serve = cmd.removeprefix("CMD ").partition("&&")
    assert check.split() == ["python", "-P", "-m", "services.${FUNCTION_TARGET}.main"]
    assert serve.split()[:5] == ["exec", "python", "-P", "-m", "services.edge.server"]


@pytest.fixture
def no_jobs_environment(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    for key in [k for k in os.environ if k.startswith("JOBS_")]:
        monkeypatch.delenv(key)
    # create_app points functions_framework.errorhandler at the app it builds; put the no-op
    # back afterwards, as in a process that never built one.
    monkeypatch.setattr(functions_framework, "errorhandler", functions_framework.errorhandler)
    yield


@pytest.mark.parametrize("target", SERVICES)
def test_functions_framework_answers_json_to_errors(target: str, no_jobs_environment: None) -> None:
    # The app functions-framework builds for the target (as `functions-framework --target`).
    app = functions_framework.create_app(target, str(ROOT / env.FUNCTION_SOURCES[target]))
    client = app.test_client()
    # No settings (a process started without the check): Google's error body, a 500 naming
    # the keys, on every path: those functions-framework kept for itself (/robots.txt,
    # /favicon.ico) and could not route (a newline) reach the target too.
    for path in ("/", "/favicon.ico", "/robots.txt", "/a%0Ab"):
        missing = client.post(path, data=b"{}")
        assert (missing.status_code, missing.mimetype) == (500, "application/json"), path
        error = missing.get_json()["error"]
        assert (error["code"], error["status"]) == (500, "INTERNAL")
        assert error["message"].startswith("invalid settings: ")
        assert "JOBS_PROJECT" in error["message"]
        [info] = error["details"]
        assert "JOBS_PROJECT" in json.loads(info["metadata"]["keys"])


def test_an_exception_escaping_the_function_is_a_json_500() -> None:
    from services.edge import startup

    app = flask.Flask("probe")
    startup.install_json_errors(app.errorhandler)

    @app.route("/")
    def boom() -> str:
        raise RuntimeError("a bug")

    answer = app.test_client().get("/")
    assert (answer.status_code, answer.mimetype) == (500, "application/json")
    assert answer.get_json() == {
        "error": {"code": 500, "message": "internal error", "status": "INTERNAL"}
    }
    assert b"Traceback" not in answer.data and b"a bug" not in answer.data


def _image_cmd() -> str:
    text = (ROOT / "Dockerfile").read_text().replace("\\\n", " ")
    (cmd,) = [line for line in text.splitlines() if line.startswith("CMD ")]
    return cmd.removeprefix("CMD ")


def _run_cmd(target: str, jobs: dict[str, str], port: int) -> subprocess.Popen[str]:
    """The image's CMD as its shell runs it, with the venv's python and functions-framework."""
    environ = {k: v for k, v in os.environ.items() if not k.startswith("JOBS_")}
    bin_dir = os.path.dirname(sys.executable)
    environ.update(
        PATH=f"{bin_dir}{os.pathsep}{environ.get('PATH', '')}",
        FUNCTION_TARGET=target,
        FUNCTION_SOURCE=env.FUNCTION_SOURCES[target],
        PORT=str(port),
        K_SERVICE=f"deferred-jobs-{target}",  # as Cloud Run sets it
        HOST="127.0.0.1",  # functions-framework's --host default comes from HOST
        **jobs,
    )
    return subprocess.Popen(
        ["/bin/sh", "-c", _image_cmd()],
        cwd=ROOT,
        env=environ,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )


def _free_port() -> int:
    import socket

    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def _accepts(port: int) -> bool:
    import socket

    with socket.socket() as sock:
        sock.settimeout(0.5)
        return sock.connect_ex(("127.0.0.1", port)) == 0


def test_with_a_bad_setting_the_image_never_opens_its_port(dev: StackRun) -> None:
    jobs = _jobs_envs(dev, "worker")
    jobs["JOBS_WORKER_LEASE_S"] = "0"
    port = _free_port()
    process = _run_cmd("worker", jobs, port)
    _, stderr = process.communicate(timeout=120)
    assert process.returncode == 2
    assert "JOBS_WORKER_LEASE_S" in stderr
    assert not _accepts(port)  # what the TCP startup probe would find


def test_with_the_stacks_settings_the_image_listens(dev: StackRun) -> None:
    import time

    port = _free_port()
    process = _run_cmd("scan", _jobs_envs(dev, "scan"), port)
    try:
        deadline = time.monotonic() + 60
        while not _accepts(port):
            assert process.poll() is None, process.communicate()[1][-2000:]
            assert time.monotonic() < deadline, "the server never listened"
            time.sleep(0.2)
    finally:
        process.terminate()  # exec'd: the shell's PID is functions-framework's now
        try:
            process.communicate(timeout=20)
        except subprocess.TimeoutExpired:
            process.kill()
            process.communicate()
