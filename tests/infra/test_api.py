"""The schedule API in both example stacks, under mocks: its service, its own runtime account
with Firestore access only, `roles/run.invoker` on it for each `apiCallers` entry and nobody
else, an environment ApiSettings accepts, and the exported URL as the expected audience."""

from __future__ import annotations

import ast
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from infra import api as infra_api
from infra.config import parse_config
from infra.errors import InfraConfigError
from services.api import settings as api_keys
from services.api.settings import ApiSettings
from services.edge.settings import BEHIND_CLOUD_RUN_IAM, PREFIX
from tests.infra.conftest import (
    DEPLOYER_CONFIG,
    ROOT,
    StackRun,
    run_stack,
    stack_config,
)

SERVICE = "cloudrunv2/service:Service"
RUN_INVOKER = "cloudrunv2/serviceIamMember:ServiceIamMember"
ACCOUNT = "serviceaccount/account:Account"
PROJECT_GRANT = "projects/iAMMember:IAMMember"


@pytest.fixture(scope="module", params=["dev", "prod"])
def stack(request: pytest.FixtureRequest) -> Iterator[tuple[str, StackRun]]:
    yield request.param, run_stack(request.param)


# Cloud Run sets K_SERVICE in every container; the behind-IAM flag requires it.
ON_CLOUD_RUN = {"K_SERVICE": "deferred-jobs-api"}


def callers_of(name: str) -> list[str]:
    callers: list[str] = DEPLOYER_CONFIG[name]["deferred-jobs:apiCallers"]
    return callers


def api_service(run: StackRun) -> dict[str, Any]:
    return dict(run.one(SERVICE, "api-service").state)


def envs(run: StackRun) -> dict[str, str]:
    container = api_service(run)["template"]["containers"][0]
    return {e["name"]: e["value"] for e in container["envs"]}


def runtime_email(run: StackRun) -> str:
    return str(run.one(ACCOUNT, "sa-api").state["email"])


def test_the_api_runs_the_api_target_of_the_one_image(stack: tuple[str, StackRun]) -> None:
    _, run = stack
    service = api_service(run)
    core = run.one(SERVICE, "scan-service").state
    assert (
        service["template"]["containers"][0]["image"] == core["template"]["containers"][0]["image"]
    )
    variables = envs(run)
    assert variables["FUNCTION_TARGET"] == "api"
    source = ROOT / variables["FUNCTION_SOURCE"]
    body = ast.parse(source.read_text()).body
    functions = {n.name for n in body if isinstance(n, ast.FunctionDef)}
    assert "api" in functions
    # Every admitted caller reaches it, wherever it runs; IAM admits only them (below).
    assert service["ingress"] == "INGRESS_TRAFFIC_ALL"
    assert not service.get("invokerIamDisabled")
    assert service["template"]["serviceAccount"] == runtime_email(run)


def test_each_configured_caller_and_nobody_else_may_invoke_the_api(
    stack: tuple[str, StackRun],
) -> None:
    name, run = stack
    api_name = api_service(run)["name"]
    bindings = [r.state for r in run.of_type(RUN_INVOKER) if r.state["name"] == api_name]
    assert sorted((b["role"], b["member"]) for b in bindings) == sorted(
        ("roles/run.invoker", f"serviceAccount:{email}") for email in callers_of(name)
    )
    # The callers get nothing else: no invoker on the scan or the worker, no project role.
    members = {f"serviceAccount:{email}" for email in callers_of(name)}
    elsewhere = [
        r.name
        for r in run.resources
        if r.state.get("member") in members and r.state.get("name") != api_name
    ]
    assert elsewhere == []


def test_the_api_runtime_may_use_firestore_and_nothing_more(stack: tuple[str, StackRun]) -> None:
    _, run = stack
    member = f"serviceAccount:{runtime_email(run)}"
    granted = [r.state["role"] for r in run.resources if r.state.get("member") == member]
    assert granted == ["roles/datastore.user"]


def test_the_environment_is_one_api_settings_accepts_with_the_url_as_audience(
    stack: tuple[str, StackRun],
) -> None:
    name, run = stack
    variables = envs(run)
    jobs = {k: v for k, v in variables.items() if k.startswith(PREFIX)}
    assert set(jobs) == set(infra_api.API_VARIABLES)
    assert set(jobs) <= set(api_keys.ALL_KEYS)
    settings = ApiSettings.from_env({**jobs, **ON_CLOUD_RUN})
    assert settings.audience == run.outputs["api_url"]
    assert run.outputs["api_url"] == run.outputs["scan_url"].replace("-scan-", "-api-")
    assert settings.allowed_callers == frozenset(callers_of(name))
    template = api_service(run)["template"]
    assert int(variables["THREADS"]) == template["maxInstanceRequestConcurrency"]
    # gunicorn's worker timeout is Cloud Run's request timeout (infra/env.py).
    assert f"{variables['CLOUD_RUN_TIMEOUT_SECONDS']}s" == template["timeout"]
    assert variables["THREADED_TIMEOUT_ENABLED"] == "false"  # infra/env.py says why


def test_the_api_runs_behind_cloud_run_iam_and_is_told_so(stack: tuple[str, StackRun]) -> None:
    _, run = stack
    variables = envs(run)
    assert variables[BEHIND_CLOUD_RUN_IAM] == "true"
    jobs = {k: v for k, v in variables.items() if k.startswith(PREFIX)}
    settings = ApiSettings.from_env({**jobs, **ON_CLOUD_RUN})
    assert settings.behind_cloud_run_iam is True
    # The claim holds only while the invoker check stays on: never invoker_iam_disabled, and
    # every IAM binding on the service is run.invoker (none grants allUsers a way round it).
    service = api_service(run)
    assert not service.get("invokerIamDisabled")
    bindings = [r.state for r in run.of_type(RUN_INVOKER) if r.state["name"] == service["name"]]
    assert bindings and {b["role"] for b in bindings} == {"roles/run.invoker"}
    assert not [b for b in bindings if not b["member"].startswith("serviceAccount:")]


def test_the_api_is_deployed_as_the_scan_and_the_worker_are(stack: tuple[str, StackRun]) -> None:
    """One builder (infra/cloudrun.py): the same port and startup probe, so a bad JOBS_* value
    fails the api's revision at start too (services/api/main.py runs the settings check)."""
    _, run = stack
    api = api_service(run)["template"]["containers"][0]
    scan = run.one(SERVICE, "scan-service").state["template"]["containers"][0]
    assert api["ports"] == scan["ports"]
    assert api["startupProbe"] == scan["startupProbe"]
    assert api_service(run)["template"]["timeout"] == f"{infra_api.REQUEST_TIMEOUT_S}s"


def test_each_of_several_callers_gets_its_own_binding() -> None:
    callers = [f"caller-{n}@p.iam.gserviceaccount.com" for n in range(3)]
    run = run_stack("dev", {"apiCallers": callers})
    api_name = api_service(run)["name"]
    bindings = [r for r in run.of_type(RUN_INVOKER) if r.state["name"] == api_name]
    assert sorted(b.state["member"] for b in bindings) == [f"serviceAccount:{c}" for c in callers]
    assert sorted(b.name for b in bindings) == [f"api-invoker-{n}" for n in range(3)]


def test_no_callers_means_no_api_service_and_no_url() -> None:
    run = run_stack("dev", {"apiCallers": []})
    assert [r for r in run.resources if r.name.startswith(("api-service", "sa-api"))] == []
    assert "api_url" not in run.outputs


def test_a_caller_that_is_not_a_service_account_fails_the_preview_naming_the_key() -> None:
    deployed = {**stack_config("dev"), **DEPLOYER_CONFIG["dev"]}
    raw = {f"{k.split(':', 1)[1]}": v for k, v in deployed.items() if ":" in k}
    raw.update({"gcp:project": "p", "gcp:region": "europe-west1"})
    raw["apiCallers"] = ["someone@example.com"]
    with pytest.raises(InfraConfigError, match="apiCallers"):
        parse_config(raw)


def test_the_installed_package_carries_the_openapi_document(tmp_path: Path) -> None:
    """The image runs `pip install .`, so the api imports services.api from site-packages: the
    document must be package data, or /v1/openapi.json would fail only in production."""
    script = (
        "import sys; from setuptools import setup; "
        f"sys.argv = ['setup.py', '-q', 'egg_info', '--egg-base', {str(tmp_path)!r}, "
        f"'build_py', '--build-lib', {str(tmp_path / 'lib')!r}]; setup()"
    )
    done = subprocess.run(
        [sys.executable, "-c", script], cwd=ROOT, capture_output=True, text=True, check=False
    )
    assert done.returncode == 0, done.stderr
    built = tmp_path / "lib" / "services" / "api" / "openapi.json"
    assert built.read_bytes() == (ROOT / "services" / "api" / "openapi.json").read_bytes()


def test_a_stack_may_ask_for_internal_ingress_and_nothing_else() -> None:
    internal = run_stack("prod", {"apiIngress": "internal"})
    assert api_service(internal)["ingress"] == "INGRESS_TRAFFIC_INTERNAL_ONLY"
    # The other services keep theirs; IAM still admits only the callers.
    assert internal.one(SERVICE, "scan-service").state["ingress"] == "INGRESS_TRAFFIC_INTERNAL_ONLY"
    with pytest.raises(InfraConfigError, match=r"apiIngress='public' must be one of all, internal"):
        run_stack("prod", {"apiIngress": "public"})
