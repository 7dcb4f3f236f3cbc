"""The Google APIs the stack uses, enabled before anything that needs them."""

from __future__ import annotations

import pulumi
from pulumi_gcp import projects

from infra.config import StackConfig

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


def enable_apis(config: StackConfig) -> list[projects.Service]:
    """One `projects.Service` per API; destroying the stack leaves them enabled (shared)."""
    return [
        projects.Service(
            f"api-{api.split('.')[0]}",
            project=config.project,
            service=api,
            # Other workloads in the project may use the same API.
            disable_on_destroy=False,
            disable_dependent_services=False,
        )
        for api in REQUIRED_APIS
    ]


def after(resources: list[pulumi.Resource]) -> pulumi.ResourceOptions:
    """Options that order a resource after `resources` (the APIs, usually)."""
    return pulumi.ResourceOptions(depends_on=resources)
