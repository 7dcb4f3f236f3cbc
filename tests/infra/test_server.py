"""functions-framework serves as many requests at once as Cloud Run sends, over kept-alive
connections, with the service's request timeout: the stack derives THREADS and
CLOUD_RUN_TIMEOUT_SECONDS from the same values as the service's concurrency and timeout, and
functions-framework (the pinned version, driven here with the stack's environment) reads them.
THREADED_TIMEOUT_ENABLED stays false: the pinned version's timeout worker closes every
connection after one request (infra/env.py says why, docs/deploy.md what bounds a request)."""

from __future__ import annotations

import contextlib
import http.client
import os
import socket
import subprocess
import sys
import time
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any

import flask
import pytest
from functions_framework._http import gunicorn as ff_gunicorn

from infra import env
from tests.infra.conftest import StackRun, run_stack


def _template(run: StackRun, key: str) -> dict[str, Any]:
    return dict(run.one("cloudrunv2/service:Service", f"{key}-service").state["template"])


def _envs(run: StackRun, key: str) -> dict[str, str]:
    return {item["name"]: item["value"] for item in _template(run, key)["containers"][0]["envs"]}


def _server_options(monkeypatch: pytest.MonkeyPatch, environment: dict[str, str]) -> Any:
    """The gunicorn options functions-framework builds from `environment` (nothing listens)."""
    for name in (*env.SERVER_VARIABLES, "WORKERS"):
        monkeypatch.delenv(name, raising=False)
    for name in env.SERVER_VARIABLES:
        monkeypatch.setenv(name, environment[name])
    monkeypatch.setattr(ff_gunicorn, "TIMEOUT_SECONDS", None)
    return ff_gunicorn.GunicornApplication(flask.Flask("probe"), "127.0.0.1", 0, False)


@pytest.mark.parametrize("key", ["scan", "worker"])
def test_threads_and_timeout_equal_the_services_concurrency_and_request_timeout(
    stack: StackRun, key: str
) -> None:
    template, environment = _template(stack, key), _envs(stack, key)
    assert int(environment[env.THREADS]) == template["maxInstanceRequestConcurrency"]
    assert f"{environment[env.CLOUD_RUN_TIMEOUT_SECONDS]}s" == template["timeout"]
    assert environment[env.THREADED_TIMEOUT_ENABLED] == env.THREADED_TIMEOUT == "false"


def test_they_follow_the_configuration_not_a_copy_of_it() -> None:
    run = run_stack("dev", overrides={"workerConcurrency": 37, "workerRequestTimeoutS": 97})
    environment = _envs(run, "worker")
    assert (environment[env.THREADS], environment[env.CLOUD_RUN_TIMEOUT_SECONDS]) == ("37", "97")
    assert _template(run, "worker")["maxInstanceRequestConcurrency"] == 37


def test_functions_framework_runs_one_thread_per_concurrent_request_in_gunicorns_gthread(
    stack: StackRun, monkeypatch: pytest.MonkeyPatch
) -> None:
    template, environment = _template(stack, "worker"), _envs(stack, "worker")
    assert template["maxInstanceRequestConcurrency"] > 1
    server = _server_options(monkeypatch, environment)
    assert server.options["threads"] == template["maxInstanceRequestConcurrency"]
    assert server.options["workers"] == 1  # one process: the threads are the concurrency
    # gunicorn's own gthread worker (threads > 1 selects it), not functions-framework's
    # timeout subclass; its `timeout` restarts a worker whose event loop stops answering.
    assert "worker_class" not in server.options
    assert f"{server.options['timeout']}s" == template["timeout"]


def test_a_single_threaded_service_is_bounded_by_gunicorns_worker_timeout(
    stack: StackRun, monkeypatch: pytest.MonkeyPatch
) -> None:
    # The scan takes one request at a time; with one thread functions-framework uses
    # gunicorn's sync worker, which the arbiter restarts when a request outlives `timeout`.
    template, environment = _template(stack, "scan"), _envs(stack, "scan")
    assert template["maxInstanceRequestConcurrency"] == 1
    server = _server_options(monkeypatch, environment)
    assert server.options["threads"] == 1
    assert "worker_class" not in server.options
    assert f"{server.options['timeout']}s" == template["timeout"]


def test_without_these_variables_functions_framework_would_disagree(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # What the stack fixes: the default is 4 x CPUs threads and no request timeout at all.
    for name in (*env.SERVER_VARIABLES, "WORKERS"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setattr(ff_gunicorn, "TIMEOUT_SECONDS", None)
    server = ff_gunicorn.GunicornApplication(flask.Flask("probe"), "127.0.0.1", 0, False)
    assert server.options["threads"] % 4 == 0
    assert server.options["timeout"] == 0


@contextlib.contextmanager
def _serve(environment: Mapping[str, str], tmp_path: Path) -> Iterator[int]:
    """functions-framework serving a trivial function with `environment`'s server variables."""
    (tmp_path / "probe.py").write_text("def probe(request):\n    return 'ok'\n")
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = int(sock.getsockname()[1])
    process = subprocess.Popen(
        [
            str(Path(sys.executable).with_name("functions-framework")),
            "--target=probe",
            f"--source={tmp_path / 'probe.py'}",
            "--host=127.0.0.1",
            f"--port={port}",
        ],
        env={**os.environ, **{name: environment[name] for name in env.SERVER_VARIABLES}},
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    try:
        deadline = time.monotonic() + 60
        while True:
            with socket.socket() as sock:
                if sock.connect_ex(("127.0.0.1", port)) == 0:
                    break
            assert process.poll() is None, "functions-framework exited"
            assert time.monotonic() < deadline, "functions-framework never listened"
            time.sleep(0.1)
        yield port
    finally:
        process.terminate()
        process.wait(timeout=30)


def _answers_on_one_connection(port: int, requests: int) -> list[str]:
    """POST `requests` times over one connection: each status, or the error that ended it."""
    connection = http.client.HTTPConnection("127.0.0.1", port, timeout=10)
    answers: list[str] = []
    try:
        for _ in range(requests):
            try:
                connection.request("POST", "/", body=b"{}")
                response = connection.getresponse()
                response.read()
            except (OSError, http.client.HTTPException) as exc:
                answers.append(type(exc).__name__)
                break
            answers.append(f"{response.status} {response.getheader('Connection')}")
    finally:
        connection.close()
    return answers


def test_the_deployed_server_keeps_connections_alive(dev: StackRun, tmp_path: Path) -> None:
    # What Cloud Run's front end and the benchmark's pusher rely on: one connection, many
    # requests (https://docs.gunicorn.org/en/stable/settings.html#keepalive).
    with _serve(_envs(dev, "worker"), tmp_path) as port:
        assert _answers_on_one_connection(port, 3) == ["200 keep-alive"] * 3


def test_the_timeout_worker_of_the_pinned_version_would_drop_the_connection(
    dev: StackRun, tmp_path: Path
) -> None:
    # Why THREADED_TIMEOUT_ENABLED stays false: with it, the first answer still announces
    # keep-alive, then the server closes the connection under the next request. When a
    # functions-framework upgrade makes this fail, the choice in infra/env.py can be revisited.
    environment = {**_envs(dev, "worker"), env.THREADED_TIMEOUT_ENABLED: "true"}
    with _serve(environment, tmp_path) as port:
        assert _answers_on_one_connection(port, 3) == ["200 keep-alive", "RemoteDisconnected"]
