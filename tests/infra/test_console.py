"""The console behind IAP, deployed from the contract agreed with services/console: the same
image with target `console`, IAP on the service itself, IAP's agent as its one invoker, IAP
access for the viewers and operators only, a runtime that may touch Firestore only."""

from __future__ import annotations

from typing import Any

import pytest

from infra import apis
from infra import console as infra_console
from infra.errors import InfraConfigError
from tests.infra.conftest import IAP_AGENT_EMAIL, PROJECT_NUMBER, StackRun, run_stack

SERVICE = "cloudrunv2/service:Service"
VIEWERS = ["user:ana@acme-media.com", "serviceAccount:probe@acme-jobs-prod.iam.gserviceaccount.com"]
OPERATORS = ["user:oncall@acme-media.com", "user:ana@acme-media.com"]


@pytest.fixture(scope="module")
def with_console() -> StackRun:
    return run_stack("prod", {"consoleViewers": VIEWERS, "consoleOperators": OPERATORS})


def _envs(run: StackRun) -> dict[str, Any]:
    container = run.one(SERVICE, "console-service").state["template"]["containers"][0]
    return {e["name"]: e["value"] for e in container["envs"]}


def test_no_viewer_and_no_operator_means_no_console(prod: StackRun) -> None:
    assert [s.name for s in prod.of_type(SERVICE) if "console" in s.name] == []
    assert "console_url" not in prod.outputs
    assert "api-iap" not in {r.name for r in prod.resources}


def test_the_console_is_the_one_image_behind_iap_on_the_service(with_console: StackRun) -> None:
    service = with_console.one(SERVICE, "console-service").state
    scan = with_console.one(SERVICE, "scan-service").state
    image = service["template"]["containers"][0]["image"]
    assert image == scan["template"]["containers"][0]["image"]
    assert service["iapEnabled"] is True
    assert service["ingress"] == "INGRESS_TRAFFIC_ALL"
    assert not service.get("invokerIamDisabled")
    variables = _envs(with_console)
    assert variables["FUNCTION_TARGET"] == "console"
    assert variables["FUNCTION_SOURCE"] == "services/console/main.py"
    assert with_console.outputs["console_url"].startswith("https://deferred-jobs-console-")
    assert "api-iap" in with_console.waits_for("console-service")


def test_only_iaps_agent_may_invoke_it_and_only_the_people_listed_pass_iap(
    with_console: StackRun,
) -> None:
    name = with_console.one(SERVICE, "console-service").state["name"]
    invokers = [
        r.state
        for r in with_console.of_type("cloudrunv2/serviceIamMember:ServiceIamMember")
        if r.state["name"] == name
    ]
    assert [(i["role"], i["member"]) for i in invokers] == [
        ("roles/run.invoker", f"serviceAccount:{IAP_AGENT_EMAIL}")
    ]
    accessors = with_console.of_type("iap/webCloudRunServiceIamMember:WebCloudRunServiceIamMember")
    assert sorted(a.state["member"] for a in accessors) == sorted(set(VIEWERS + OPERATORS))
    assert {a.state["role"] for a in accessors} == {infra_console.IAP_ACCESSOR}
    assert {a.state["cloudRunServiceName"] for a in accessors} == {name}


def test_the_console_is_told_its_people_by_email_and_its_iap_audience(
    with_console: StackRun,
) -> None:
    variables = _envs(with_console)
    assert set(variables) >= set(infra_console.CONSOLE_VARIABLES)
    assert variables[infra_console.CONSOLE_VIEWERS] == (
        "ana@acme-media.com,probe@acme-jobs-prod.iam.gserviceaccount.com"
    )
    assert variables[infra_console.CONSOLE_OPERATORS] == "oncall@acme-media.com,ana@acme-media.com"
    # https://cloud.google.com/iap/docs/signed-headers-howto: IAP on a Cloud Run service.
    assert variables[infra_console.CONSOLE_IAP_AUDIENCE] == (
        f"/projects/{PROJECT_NUMBER}/locations/europe-west1/services/deferred-jobs-console"
    )
    assert "JOBS_CONSOLE_STAND_IN_IDENTITY" not in variables


def test_the_consoles_runtime_may_touch_firestore_only(with_console: StackRun) -> None:
    email = with_console.one("serviceaccount/account:Account", "sa-console").state["email"]
    grants = [
        r.state
        for r in with_console.resources
        if r.state.get("member") == f"serviceAccount:{email}"
    ]
    assert [(g["role"]) for g in grants] == ["roles/datastore.user"]


def test_a_stack_with_a_console_enables_iap() -> None:
    run = run_stack("dev", {"consoleOperators": OPERATORS})
    assert apis.IAP_API in run.one("time:index/sleep:Sleep", "apis-propagated").state["triggers"]


@pytest.mark.parametrize(
    ("entry", "message"),
    [
        ("group:oncall@acme-media.com", "groups are refused"),
        ("ana@acme-media.com", "is not user:EMAIL or serviceAccount:EMAIL"),
        ("user:ana@example.com", "is a placeholder"),
    ],
)
def test_console_members_that_the_console_could_not_recognise_fail_the_preview(
    entry: str, message: str
) -> None:
    with pytest.raises(InfraConfigError, match=rf"consoleViewers: '{entry}'.*{message}"):
        run_stack("dev", {"consoleViewers": [entry]})


def test_a_console_needs_a_whole_cpu() -> None:
    with pytest.raises(InfraConfigError, match=r"the console's concurrency 80"):
        run_stack(
            "dev",
            {
                "cpu": "0.5",
                "scanConcurrency": 1,
                "workerConcurrency": 1,
                "apiConcurrency": 1,
                "consoleViewers": VIEWERS,
            },
        )
