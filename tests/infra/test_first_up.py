"""What stops a first `pulumi up` partway, asserted under mocks: APIs used before their
enablement propagated, a media bucket that does not exist, a region without Cloud Scheduler,
Firestore operations without timeouts, services whose first revision lacks its roles."""

from __future__ import annotations

import pytest

from infra import apis
from infra.database import DATABASE_TIMEOUTS, INDEX_TIMEOUTS
from infra.errors import InfraConfigError
from infra.locations import SCHEDULER_REGIONS
from tests.infra.conftest import StackRun, run_stack

SLEEP = "time:index/sleep:Sleep"
ENABLE = "gcp:projects/service:Service"
PROPAGATED = "apis-propagated"


def test_every_google_resource_waits_for_the_apis_to_propagate(stack: StackRun) -> None:
    wait = stack.one(SLEEP, PROPAGATED)
    enabled = {r.name for r in stack.of_type("projects/service:Service")}
    assert enabled == {f"api-{api.split('.')[0]}" for api in apis.REQUIRED_APIS}
    assert enabled <= stack.waits_for(wait.name)
    assert set(wait.state["triggers"]) == set(apis.REQUIRED_APIS)
    google = [r for r in stack.resources if r.type.startswith("gcp:") and r.type != ENABLE]
    assert len(google) > 80
    for resource in google:
        assert PROPAGATED in stack.waits_for(resource.name), resource.name


def test_the_guide_enables_every_api_before_the_first_up() -> None:
    from tests.infra.test_deploy_guide import GUIDE

    step = GUIDE.split("### 2.")[1].split("### 3.")[0]
    for api in apis.REQUIRED_APIS:
        assert api in step, api


def test_a_missing_media_bucket_fails_the_preview_naming_the_key_and_the_fix() -> None:
    with pytest.raises(InfraConfigError) as refused:
        run_stack("prod", missing_buckets={"acme-jobs-prod-media"})
    message = str(refused.value)
    assert "mediaBucket='acme-jobs-prod-media'" in message
    assert "gcloud storage buckets create gs://acme-jobs-prod-media" in message


@pytest.mark.parametrize("region", ["europe-west4", "us-south1", "mars-north1"])
def test_a_region_without_cloud_scheduler_fails_the_preview_naming_it(region: str) -> None:
    assert region not in SCHEDULER_REGIONS
    with pytest.raises(InfraConfigError, match=rf"gcp:region='{region}' has no Cloud Scheduler"):
        run_stack("dev", deployer={"gcp:project": "p-dev", "gcp:region": region, **_bring()})


def test_a_database_location_firestore_does_not_have_fails_naming_it() -> None:
    with pytest.raises(InfraConfigError, match=r"databaseLocation='eur5' is not a Firestore"):
        run_stack("dev", overrides={"databaseLocation": "eur5"})
    run = run_stack("dev", overrides={"databaseLocation": "eur3"})
    assert run.one("firestore/database:Database", "firestore").state["locationId"] == "eur3"


def _bring() -> dict[str, object]:
    return {
        "deferred-jobs:mediaBucket": "b-media",
        "deferred-jobs:alertEmails": [],
        "deferred-jobs:apiCallers": [],
    }


def test_firestore_operations_carry_custom_timeouts(stack: StackRun) -> None:
    database = stack.one("firestore/database:Database", "firestore")
    assert stack.timeouts[database.name] == (
        DATABASE_TIMEOUTS.create,
        DATABASE_TIMEOUTS.update,
        DATABASE_TIMEOUTS.delete,
    )
    operations = [*stack.of_type("firestore/index:Index"), *stack.of_type("firestore/field:Field")]
    assert len(operations) > 40
    for operation in operations:
        assert stack.timeouts[operation.name] == (
            INDEX_TIMEOUTS.create,
            INDEX_TIMEOUTS.update,
            INDEX_TIMEOUTS.delete,
        ), operation.name


@pytest.mark.parametrize(
    ("service", "grants"),
    [
        ("scan-service", {"scan-datastore-user", "scan-monitoring-metricWriter"}),
        ("worker-service", {"worker-datastore-user", "worker-media-bucket"}),
        ("api-service", {"api-datastore-user"}),
    ],
)
def test_each_service_waits_for_its_runtime_grants(
    stack: StackRun, service: str, grants: set[str]
) -> None:
    assert grants <= stack.waits_for(service), grants - stack.waits_for(service)


def test_a_budget_alerts_on_the_projects_spend_to_the_stacks_channels() -> None:
    run = run_stack(
        "prod", overrides={"budgetAmount": 150, "billingAccount": "01ABCD-23EF45-6789AB"}
    )
    budget = run.one("billing/budget:Budget", "budget").state
    assert budget["billingAccount"] == "01ABCD-23EF45-6789AB"
    assert budget["amount"]["specifiedAmount"]["units"] == "150"
    assert budget["budgetFilter"]["projects"] == ["projects/123456789012"]
    assert [r["thresholdPercent"] for r in budget["thresholdRules"]] == [0.5, 0.9, 1.0]
    channels = budget["allUpdatesRule"]["monitoringNotificationChannels"]
    assert len(channels) == 2  # prod's two alert emails
    assert "api-billingbudgets" in run.waits_for("budget")


def test_a_budget_without_its_billing_account_fails_naming_it() -> None:
    with pytest.raises(InfraConfigError, match=r"billingAccount='' must be a billing account ID"):
        run_stack("prod", overrides={"budgetAmount": 150})
    assert run_stack("dev").of_type("billing/budget:Budget") == []
