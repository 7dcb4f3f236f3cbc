"""functions-framework serves as many requests at once as Cloud Run sends, and ends a request at
Cloud Run's request timeout: the stack derives THREADS and CLOUD_RUN_TIMEOUT_SECONDS from the
same values as the service's concurrency and timeout, and functions-framework (the pinned
version, driven here with the stack's environment) reads them."""

from __future__ import annotations

from typing import Any

import flask
import pytest
from functions_framework._http import gunicorn as ff_gunicorn

from infra import env
from tests.infra.conftest import StackRun, run_stack

THREADED_TIMEOUT_WORKER = "functions_framework._http.gunicorn.GThreadWorkerWithTimeoutSupport"


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
    assert environment[env.THREADED_TIMEOUT_ENABLED] == "true"


def test_they_follow_the_configuration_not_a_copy_of_it() -> None:
    run = run_stack("dev", overrides={"workerConcurrency": 37, "workerRequestTimeoutS": 97})
    environment = _envs(run, "worker")
    assert (environment[env.THREADS], environment[env.CLOUD_RUN_TIMEOUT_SECONDS]) == ("37", "97")
    assert _template(run, "worker")["maxInstanceRequestConcurrency"] == 37


def test_functions_framework_runs_one_thread_per_concurrent_request_and_times_them_out(
    stack: StackRun, monkeypatch: pytest.MonkeyPatch
) -> None:
    template, environment = _template(stack, "worker"), _envs(stack, "worker")
    assert template["maxInstanceRequestConcurrency"] > 1
    server = _server_options(monkeypatch, environment)
    assert server.options["threads"] == template["maxInstanceRequestConcurrency"]
    assert server.options["workers"] == 1  # one process: the threads are the concurrency
    # The worker class that interrupts a request thread after CLOUD_RUN_TIMEOUT_SECONDS.
    assert server.options["worker_class"] == THREADED_TIMEOUT_WORKER
    assert f"{ff_gunicorn.TIMEOUT_SECONDS}s" == template["timeout"]


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
