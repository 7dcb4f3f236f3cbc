"""The stack's `httpTargets`: validated at preview by the services' own parser (each problem
named `httpTargets.<name>.<field>`), handed to the worker, the api and the scan (each rated
target's claim lane) as JOBS_HTTP_TARGETS (which they read back as the same targets), and the
worker's account gets roles/run.invoker on each target that is a Cloud Run service of the
project, on that service only."""

from __future__ import annotations

import json
from typing import Any

import pytest

from infra.config import RunTarget, parse_config
from infra.errors import InfraConfigError
from services.jobs.http_request import target_rates
from services.jobs.http_targets import parse_targets
from tests.infra.conftest import PROJECT_NUMBER, StackRun, run_stack
from tests.infra.test_config import MINIMAL

TARGETS: dict[str, Any] = {
    "trials": {
        "url": f"https://trials-{PROJECT_NUMBER}.europe-west1.run.app",
        "rate": 5,
        "concurrency": 4,
        "timeout_s": 20,
        "cloudRunService": "trials",
    },
    "billing": {"url": "https://billing.example.com/hooks", "audience": "billing-jobs"},
    "search": {"url": "https://search-x.a.run.app", "cloudRunService": "us-central1/search"},
}


def test_targets_parse_with_the_services_parser_and_cloud_run_ones_are_marked() -> None:
    config = parse_config({**MINIMAL, "httpTargets": json.dumps(TARGETS)})
    targets = config.http_targets.targets
    assert set(targets) == {"trials", "billing", "search"}
    assert targets["trials"].rate == 5 and targets["trials"].timeout_s == 20
    assert targets["billing"].audience == "billing-jobs"
    assert config.http_targets.run_services == (
        RunTarget("trials", None, "trials"),
        RunTarget("search", "us-central1", "search"),
    )


def test_no_targets_by_default() -> None:
    assert parse_config(MINIMAL).http_targets.targets == {}


@pytest.mark.parametrize(
    ("targets", "named"),
    [
        ({"t": {"url": "http://t.example"}}, "httpTargets.t.url: plain http"),
        ({"T": {"url": "https://t.example"}}, "httpTargets.T: a target name"),
        ({"t": {"url": "https://t.example", "rate": 0}}, "httpTargets.t.rate"),
        ({"t": {"url": "https://t.example", "colour": "red"}}, "httpTargets.t: unknown field"),
        (
            {"t": {"url": "https://t.example", "cloudRunService": "Bad_Name"}},
            "httpTargets.t.cloudRunService",
        ),
        (["not", "a", "mapping"], "httpTargets"),
    ],
)
def test_bad_targets_fail_the_preview_naming_the_key(targets: Any, named: str) -> None:
    with pytest.raises(InfraConfigError) as caught:
        parse_config({**MINIMAL, "httpTargets": json.dumps(targets)})
    assert named in str(caught.value)


@pytest.fixture(scope="module")
def with_targets() -> StackRun:
    return run_stack("dev", {"httpTargets": TARGETS})


def _envs(run: StackRun, key: str) -> dict[str, str]:
    service = run.one("cloudrunv2/service:Service", f"{key}-service").state
    return {item["name"]: item["value"] for item in service["template"]["containers"][0]["envs"]}


@pytest.mark.parametrize("service", ["worker", "api", "scan"])
def test_the_worker_the_api_and_the_scan_read_back_the_stacks_targets(
    with_targets: StackRun, service: str
) -> None:
    env = _envs(with_targets, service)
    read = parse_targets(env["JOBS_HTTP_TARGETS"])
    assert (
        read == parse_config({**MINIMAL, "httpTargets": json.dumps(TARGETS)}).http_targets.targets
    )
    assert "cloudRunService" not in env["JOBS_HTTP_TARGETS"]


def test_the_scan_claims_each_rated_target_in_a_lane_of_its_own(with_targets: StackRun) -> None:
    # The scan reads the targets for their rates (issue 32 item 4: a budget per target).
    targets = parse_targets(_envs(with_targets, "scan")["JOBS_HTTP_TARGETS"])
    assert target_rates(targets) == {"http.request/trials": 5}


def test_the_worker_may_invoke_exactly_the_cloud_run_targets_of_the_project(
    with_targets: StackRun,
) -> None:
    grants = {
        r.name: r.state
        for r in with_targets.of_type("cloudrunv2/serviceIamMember:ServiceIamMember")
        if r.name.startswith("worker-invokes-target-")
    }
    assert set(grants) == {"worker-invokes-target-trials", "worker-invokes-target-search"}
    worker_account = with_targets.one("serviceaccount/account:Account", "sa-worker").state
    for state in grants.values():
        assert state["role"] == "roles/run.invoker"
        assert state["member"] == f"serviceAccount:{worker_account['email']}"
        assert state["project"] == "acme-jobs-dev"
        assert state["member"] not in {"allUsers", "allAuthenticatedUsers"}
    assert grants["worker-invokes-target-trials"]["name"] == "trials"
    assert grants["worker-invokes-target-trials"]["location"] == "europe-west1"
    assert grants["worker-invokes-target-search"]["location"] == "us-central1"
    # The first scan run waits for them, as for the worker's other grants.
    assert set(grants) <= with_targets.waits_for("scan-trigger")


def test_a_stack_without_targets_grants_the_worker_no_invoker_role(dev: StackRun) -> None:
    names = [r.name for r in dev.of_type("cloudrunv2/serviceIamMember:ServiceIamMember")]
    assert not any(n.startswith("worker-invokes-target-") for n in names)
