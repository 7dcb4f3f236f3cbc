"""Every Cloud Run service bills per request unless its stack decides otherwise, and a CPU
below 1 vCPU deploys (Cloud Run requires request-based billing and concurrency 1 there)."""

from __future__ import annotations

from typing import Any

import pytest

from infra.config import BILLED_SERVICES
from infra.errors import InfraConfigError
from tests.infra.conftest import StackRun, run_stack

RUN_SERVICE = "cloudrunv2/service:Service"


def _resources(run: StackRun) -> dict[str, dict[str, Any]]:
    """Each service's container `resources`, by service name."""
    return {
        service.state["name"]: dict(service.state["template"]["containers"][0]["resources"])
        for service in run.of_type(RUN_SERVICE)
    }


@pytest.mark.parametrize("stack_name", ["dev", "prod"])
def test_every_service_bills_per_request_and_boosts_its_start(stack_name: str) -> None:
    run = run_stack(stack_name)
    resources = _resources(run)
    assert len(resources) >= 3  # scan, worker, api
    for name, spec in resources.items():
        # With `limits` set, an absent cpuIdle means instance-based billing on Cloud Run.
        assert "limits" in spec, name
        assert spec["cpuIdle"] is True, name
        assert spec["startupCpuBoost"] is True, name


@pytest.mark.parametrize("service", BILLED_SERVICES)
def test_instance_billing_is_a_per_service_decision(service: str) -> None:
    console = {"consoleOperators": ["user:oncall@acme-media.com"]}
    run = run_stack("prod", {f"{service}InstanceBilling": True, **console})
    assert len(run.of_type(RUN_SERVICE)) == len(BILLED_SERVICES)
    instance_billed = {name for name, spec in _resources(run).items() if spec["cpuIdle"] is False}
    assert instance_billed == {f"deferred-jobs-{service}"}


def test_a_cpu_below_one_deploys_with_concurrency_one_and_request_billing() -> None:
    run = run_stack(
        "dev",
        {"cpu": "0.5", "scanConcurrency": 1, "workerConcurrency": 1, "apiConcurrency": 1},
    )
    services = run.of_type(RUN_SERVICE)
    assert len(services) == 3
    for service in services:
        template = service.state["template"]
        assert template["containers"][0]["resources"]["limits"]["cpu"] == "0.5"
        assert template["containers"][0]["resources"]["cpuIdle"] is True
        assert template["maxInstanceRequestConcurrency"] == 1


def test_a_cpu_below_one_with_instance_billing_fails_the_preview_naming_both_keys() -> None:
    with pytest.raises(InfraConfigError, match=r"cpu='500m'.*workerInstanceBilling=true"):
        run_stack(
            "dev",
            {
                "cpu": "500m",
                "scanConcurrency": 1,
                "workerConcurrency": 1,
                "apiConcurrency": 1,
                "workerInstanceBilling": True,
            },
        )
