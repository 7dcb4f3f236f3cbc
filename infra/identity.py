"""Service accounts and their least-privilege project and bucket roles.

Four identities, each with one job: the scan runtime, the worker runtime, the scheduler
invoker (allowed to call the scan, nothing else) and the push invoker (allowed to call the
worker, nothing else). Grants on one resource (topic, subscription, Cloud Run service) live
next to that resource; this module holds the project-level and bucket-level ones.
"""

from __future__ import annotations

from dataclasses import dataclass

import pulumi
from pulumi_gcp import projects, serviceaccount, storage

from infra.config import StackConfig
from infra.names import Names

# Firestore has no IAM finer than the project: roles/datastore.user on the project is the
# narrowest grant that lets a runtime read and write documents.
RUNTIME_PROJECT_ROLES: tuple[str, ...] = (
    "roles/datastore.user",
    "roles/monitoring.metricWriter",
    "roles/logging.logWriter",
)

# The worker deletes a media object's source files: read, list, delete; never create.
MEDIA_PERMISSIONS: tuple[str, ...] = (
    "storage.objects.get",
    "storage.objects.list",
    "storage.objects.delete",
)

TOKEN_CREATOR = "roles/iam.serviceAccountTokenCreator"


@dataclass(frozen=True)
class Accounts:
    scan: serviceaccount.Account
    worker: serviceaccount.Account
    scheduler: serviceaccount.Account
    pusher: serviceaccount.Account


def member(account: serviceaccount.Account) -> pulumi.Output[str]:
    """The IAM member string of a service account."""
    return account.email.apply(lambda email: f"serviceAccount:{email}")


def pubsub_service_agent(project_number: pulumi.Input[str]) -> pulumi.Output[str]:
    """The Pub/Sub service agent's IAM member (it signs push tokens and dead-letters)."""
    return pulumi.Output.from_input(project_number).apply(
        lambda number: f"serviceAccount:service-{number}@gcp-sa-pubsub.iam.gserviceaccount.com"
    )


def create_accounts(config: StackConfig, names: Names, opts: pulumi.ResourceOptions) -> Accounts:
    def account(key: str, account_id: str, what: str) -> serviceaccount.Account:
        return serviceaccount.Account(
            f"sa-{key}",
            project=config.project,
            account_id=account_id,
            display_name=f"Deferred Jobs {what}",
            opts=opts,
        )

    return Accounts(
        scan=account("scan", names.scan_account, "scan runtime"),
        worker=account("worker", names.worker_account, "worker runtime"),
        scheduler=account("scheduler", names.scheduler_account, "scheduler invoker of the scan"),
        pusher=account("pusher", names.pusher_account, "Pub/Sub push invoker of the worker"),
    )


def grant_runtime_roles(
    config: StackConfig, accounts: Accounts, opts: pulumi.ResourceOptions
) -> list[projects.IAMMember]:
    """Project-level roles of the two runtimes (the invokers get none)."""
    grants = []
    for key, account in (("scan", accounts.scan), ("worker", accounts.worker)):
        for role in RUNTIME_PROJECT_ROLES:
            grants.append(
                projects.IAMMember(
                    f"{key}-{role.split('/')[1].replace('.', '-')}",
                    project=config.project,
                    role=role,
                    member=member(account),
                    opts=opts,
                )
            )
    return grants


def grant_media_access(
    config: StackConfig, accounts: Accounts, opts: pulumi.ResourceOptions
) -> storage.BucketIAMMember:
    """A custom role with only get/list/delete, bound on the media bucket only, to the worker."""
    role = projects.IAMCustomRole(
        "media-cleaner-role",
        project=config.project,
        role_id=f"{config.name_prefix.replace('-', '_')}_media_cleaner",
        title="Deferred Jobs media cleaner",
        description="Read, list and delete objects; granted on the media bucket only.",
        permissions=list(MEDIA_PERMISSIONS),
        opts=opts,
    )
    return storage.BucketIAMMember(
        "worker-media-bucket",
        bucket=config.media_bucket,
        role=role.name,
        member=member(accounts.worker),
        opts=opts,
    )


def allow_pubsub_to_sign_as_pusher(
    accounts: Accounts, project_number: pulumi.Input[str], opts: pulumi.ResourceOptions
) -> serviceaccount.IAMMember:
    """The Pub/Sub service agent mints the push OIDC token as the push invoker, on it only."""
    return serviceaccount.IAMMember(
        "pubsub-agent-signs-as-pusher",
        service_account_id=accounts.pusher.name,
        role=TOKEN_CREATOR,
        member=pubsub_service_agent(project_number),
        opts=opts,
    )
