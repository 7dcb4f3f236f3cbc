"""Service accounts and their least-privilege project and bucket roles.

Four identities, each with one job: the scan runtime, the worker runtime, the scheduler
invoker (allowed to call the scan, nothing else) and the push invoker (allowed to call the
worker, nothing else). Grants on one resource (topic, subscription, Cloud Run service) live
next to that resource; this module holds the project-level and bucket-level ones.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

import pulumi
from pulumi_gcp import cloudrunv2, projects, serviceaccount, storage

from infra.config import StackConfig
from infra.errors import InfraConfigError
from infra.scope import Scope
from services.edge.resource_names import Names
from services.jobs.http_request import RUN_INVOKER

# Project-level roles per runtime, only those its code uses. Firestore has no IAM finer than
# the project: roles/datastore.user is the narrowest grant that reads and writes documents.
# Only the scan writes time series (its gauges, services/edge/monitoring.py CloudMonitoringSink)
# and reads one (the push subscription's oldest unacked age, services/scan/queue_age.py:
# monitoring.timeSeries.list, in roles/monitoring.viewer); the worker's metrics are log-based.
# Neither needs roles/logging.logWriter: Cloud Run sends
# stdout/stderr to Cloud Logging itself
# (https://cloud.google.com/run/docs/logging).
RUNTIME_PROJECT_ROLES: Mapping[str, tuple[str, ...]] = {
    "scan": ("roles/datastore.user", "roles/monitoring.metricWriter", "roles/monitoring.viewer"),
    "worker": ("roles/datastore.user",),
}

# Every Cloud Storage JSON API method the worker calls (services/worker/media.py and
# services/worker/prefix.py, through google-cloud-storage; each action's `needs` declares the
# same permissions), with the IAM permissions each needs on the media bucket
# (https://cloud.google.com/storage/docs/access-control/iam-json). This is the one list:
# the custom role below is derived from it, and tests/infra/test_storage_calls.py runs the
# worker's action against a recording client to prove it calls nothing else.
MEDIA_STORAGE_CALLS: Mapping[str, tuple[str, ...]] = {
    # Bucket.delete_blob. objects.get and objects.list are kept from the first role: without
    # them a missing object might be reported 403 rather than 404 (as S3 does without
    # ListBucket); that is unverified for Cloud Storage, and "already absent" must stay a 404.
    "objects.delete": ("storage.objects.delete", "storage.objects.get", "storage.objects.list"),
    # Bucket.get_blob: the generation every delete is conditioned on (ifGenerationMatch), read
    # when the delivery starts, so a late delete never removes a re-uploaded object.
    "objects.get": ("storage.objects.get",),
    # Bucket.exists(), asked when every object was already absent (fields=name, no ACLs).
    "buckets.get": ("storage.buckets.get",),
    # Client.list_blobs: media.delete_prefix pages through its prefix (names and generations).
    "objects.list": ("storage.objects.list",),
}

# The worker deletes media objects (source files, a prefix's renditions); it never creates or
# changes one.
MEDIA_PERMISSIONS: tuple[str, ...] = tuple(
    sorted({permission for needs in MEDIA_STORAGE_CALLS.values() for permission in needs})
)

PUBSUB_API = "pubsub.googleapis.com"

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


def create_pubsub_service_agent(
    config: StackConfig, scope: Scope, opts: pulumi.ResourceOptions
) -> projects.ServiceIdentity:
    """The Pub/Sub service agent (it signs push tokens and dead-letters), created explicitly.

    Google creates a service agent lazily, so in a new project it may not exist yet when the
    first IAM binding names it, and the binding fails. generateServiceIdentity creates it now
    (https://cloud.google.com/service-usage/docs/reference/rest/v1beta1/services/generateServiceIdentity,
    `gcloud beta services identity create`); every binding that names the agent uses this
    resource's `member`, so it depends on it.
    """
    return projects.ServiceIdentity(
        scope.name("pubsub-service-agent"), project=config.project, service=PUBSUB_API, opts=opts
    )


def create_accounts(
    config: StackConfig, names: Names, scope: Scope, opts: pulumi.ResourceOptions
) -> Accounts:
    def account(key: str, account_id: str, what: str) -> serviceaccount.Account:
        return serviceaccount.Account(
            scope.name(f"sa-{key}"),
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
    config: StackConfig, accounts: Accounts, scope: Scope, opts: pulumi.ResourceOptions
) -> dict[str, list[projects.IAMMember]]:
    """Project-level roles of the two runtimes (the invokers get none), by runtime: each
    service waits for its own (infra/program.py), so its first revision can do its work."""
    return {
        key: grant_project_roles(config, key, account, RUNTIME_PROJECT_ROLES[key], scope, opts)
        for key, account in (("scan", accounts.scan), ("worker", accounts.worker))
    }


def create_runtime(
    config: StackConfig,
    key: str,
    account_id: str,
    what: str,
    roles: tuple[str, ...],
    scope: Scope,
    opts: pulumi.ResourceOptions,
) -> tuple[serviceaccount.Account, tuple[projects.IAMMember, ...]]:
    """A service's own runtime account (`sa-<key>`) and its project roles (the api's, the
    console's)."""
    account = serviceaccount.Account(
        scope.name(f"sa-{key}"),
        project=config.project,
        account_id=account_id,
        display_name=f"Deferred Jobs {what}",
        opts=opts,
    )
    return account, tuple(grant_project_roles(config, key, account, roles, scope, opts))


def grant_project_roles(
    config: StackConfig,
    key: str,
    account: serviceaccount.Account,
    roles: tuple[str, ...],
    scope: Scope,
    opts: pulumi.ResourceOptions,
) -> list[projects.IAMMember]:
    """One project-level binding per role for `account`, named `<key>-<role>`."""
    return [
        projects.IAMMember(
            scope.name(f"{key}-{role.split('/')[1].replace('.', '-')}"),
            project=config.project,
            role=role,
            member=member(account),
            opts=opts,
        )
        for role in roles
    ]


def check_media_bucket(config: StackConfig) -> None:
    """The media bucket must exist: the stack grants on it and never creates it, so on a new
    project the grant would fail near the end of `up`, with the scheduler job (which waits on
    it) never created. The lookup is a provider read (storage.getBucket, which needs
    storage.buckets.get: the deployer's roles/storage.admin), run in `pulumi preview` too, so
    the preview fails first, naming the key and the fix."""
    try:
        found = storage.get_bucket(name=config.media_bucket)
        missing = not found.name
        reason = "not found"
    # The provider reports a failed read as a plain Exception from the invoke (no narrower
    # type exists); the message (404, or 403 without storage.buckets.get) is kept.
    except Exception as exc:
        missing = True
        reason = str(exc).strip().splitlines()[-1]
    if missing:
        raise InfraConfigError(
            f"mediaBucket={config.media_bucket!r}: no such bucket, or the deployer may not read "
            f"it ({reason}). Create it first: gcloud storage buckets create "
            f"gs://{config.media_bucket} --project={config.project} --location={config.region} "
            "--uniform-bucket-level-access (docs/deploy.md, step 3), or name the bucket your "
            "media lives in"
        )


def grant_media_access(
    config: StackConfig, accounts: Accounts, scope: Scope, opts: pulumi.ResourceOptions
) -> storage.BucketIAMMember:
    """A custom role with MEDIA_PERMISSIONS only, bound on the media bucket only, to the worker."""
    role = projects.IAMCustomRole(
        scope.name("media-cleaner-role"),
        project=config.project,
        role_id=f"{config.name_prefix.replace('-', '_')}_media_cleaner",
        title="Deferred Jobs media cleaner",
        description="What the worker's storage calls need; granted on the media bucket only.",
        permissions=list(MEDIA_PERMISSIONS),
        opts=opts,
    )
    return storage.BucketIAMMember(
        scope.name("worker-media-bucket"),
        bucket=config.media_bucket,
        role=role.name,
        member=member(accounts.worker),
        opts=opts,
    )


def allow_pubsub_to_sign_as_pusher(
    accounts: Accounts,
    agent: projects.ServiceIdentity,
    scope: Scope,
    opts: pulumi.ResourceOptions,
) -> serviceaccount.IAMMember:
    """The Pub/Sub service agent mints the push OIDC token as the push invoker, on it only."""
    return serviceaccount.IAMMember(
        scope.name("pubsub-agent-signs-as-pusher"),
        service_account_id=accounts.pusher.name,
        role=TOKEN_CREATOR,
        member=agent.member,
        opts=opts,
    )


def grant_target_invokers(
    config: StackConfig, accounts: Accounts, scope: Scope, opts: pulumi.ResourceOptions
) -> list[cloudrunv2.ServiceIamMember]:
    """roles/run.invoker for the worker's account on each HTTP target that is a Cloud Run
    service of this project (`httpTargets.<name>.cloudRunService`), on that service only: its
    IAM check then admits the worker's ID token. Other targets verify the token themselves."""
    return [
        cloudrunv2.ServiceIamMember(
            scope.name(f"worker-invokes-target-{run.target}"),
            project=config.project,
            location=run.region or config.region,
            name=run.service,
            role=RUN_INVOKER,
            member=member(accounts.worker),
            opts=opts,
        )
        for run in config.http_targets.run_services
    ]
