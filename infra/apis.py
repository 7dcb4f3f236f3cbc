"""The Google APIs the stack uses, enabled before anything that needs them, and a wait for the
enablement to propagate.

Resources created right after `projects.Service` returns may still be refused with 403
SERVICE_DISABLED ("If you enabled this API recently, wait a few minutes for the action to
propagate to our systems and retry"), and the Terraform provider under pulumi-gcp does not retry
that error (hashicorp/terraform-provider-google#8214, #11023). So everything that uses an API
depends on `apis-propagated`, a Sleep of the Pulumi Registry's time package
(https://www.pulumi.com/registry/packages/time/api-docs/sleep/) created after every
enablement. docs/deploy.md step 2 also enables every API by hand before the first `up`, so on a
fresh project the wait is a second guard; a Sleep delays only its creation, and re-runs only
when the set of APIs changes (its triggers).
"""

from __future__ import annotations

from dataclasses import dataclass

import pulumi
import pulumiverse_time
from pulumi_gcp import projects

from infra.config import StackConfig
from infra.scope import Scope

REQUIRED_APIS: tuple[str, ...] = (
    "run.googleapis.com",
    "firestore.googleapis.com",
    "pubsub.googleapis.com",
    "cloudscheduler.googleapis.com",
    "monitoring.googleapis.com",
    "logging.googleapis.com",
    "iam.googleapis.com",
    "artifactregistry.googleapis.com",
    "cloudresourcemanager.googleapis.com",
    "storage.googleapis.com",
)
# Enabled only when the stack deploys the console behind IAP
# (https://cloud.google.com/iap/docs/enabling-cloud-run).
IAP_API = "iap.googleapis.com"
# Enabled only when the stack has a budget (the Billing Budget API,
# https://cloud.google.com/billing/docs/how-to/budget-api-overview).
BUDGET_API = "billingbudgets.googleapis.com"

# "A few minutes" in Google's error; two is what the guide's by-hand enablement usually needs
# (inferred, not measured on a fresh project).
API_PROPAGATION = "2m"


@dataclass(frozen=True)
class Apis:
    enabled: list[projects.Service]
    propagated: pulumiverse_time.Sleep

    @property
    def ready(self) -> pulumi.ResourceOptions:
        """Options that order a resource after every API is enabled and has propagated."""
        return pulumi.ResourceOptions(depends_on=[*self.enabled, self.propagated])


def apis_for(config: StackConfig) -> tuple[str, ...]:
    """Every API this stack uses."""
    extra = []
    if config.console_enabled:
        extra.append(IAP_API)
    if config.budget is not None:
        extra.append(BUDGET_API)
    return (*REQUIRED_APIS, *extra)


def enable_apis(config: StackConfig, scope: Scope) -> Apis:
    """One `projects.Service` per API (left enabled on destroy: shared), then the wait."""
    enabled = [
        projects.Service(
            scope.name(f"api-{api.split('.')[0]}"),
            project=config.project,
            service=api,
            # Other workloads in the project may use the same API.
            disable_on_destroy=False,
            disable_dependent_services=False,
            opts=scope.opts(),
        )
        for api in apis_for(config)
    ]
    propagated = pulumiverse_time.Sleep(
        scope.name("apis-propagated"),
        create_duration=API_PROPAGATION,
        # A newly added API replaces the Sleep, so what uses it waits again.
        triggers={api: service.id for api, service in zip(apis_for(config), enabled, strict=True)},
        opts=scope.opts(depends_on=enabled),
    )
    return Apis(enabled, propagated)
