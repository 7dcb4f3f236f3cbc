"""The schedule API's Cloud Run service, its runtime account and its callers' IAM.

Built from the same image as the scan and the worker, with its own function target
(`services/api/main.py`, target `api`) and its own service account, which gets only
`roles/datastore.user` (Firestore has no IAM finer than the project). Each service account in
the `apiCallers` config list is granted `roles/run.invoker` on this service only, and the
service verifies the same callers' ID tokens itself (JOBS_API_ALLOWED_CALLERS), so the IAM
binding is not the only wall. No callers configured: no API service.

`build_with_api(config)` is what `__main__.py` runs: the core stack (`program.build`), then
this service ordered after it (its APIs, accounts and Firestore database exist by then).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

import pulumi
from pulumi_gcp import cloudrunv2, organizations, projects, serviceaccount

from infra.config import StackConfig
from infra.env import FUNCTION_SOURCE, FUNCTION_TARGET
from infra.names import service_url
from infra.program import Deployment
from infra.program import build as build_core
from services.api import settings as api_keys
from services.jobs import settings as common

FUNCTION = "api"
SOURCE = "services/api/main.py"
INGRESS = "INGRESS_TRAFFIC_INTERNAL_ONLY"
INVOKER = "roles/run.invoker"
RUNTIME_ROLES: tuple[str, ...] = ("roles/datastore.user",)
# A schedule call is one Firestore write (two on a repeat); 30 s is generous and keeps a
# stuck call from holding a caller's connection for Cloud Run's default 300 s.
REQUEST_TIMEOUT_S = 30
# functions-framework runs THREADS threads per instance; give it one per concurrent request
# Cloud Run may send, or requests queue behind busy threads. Cloud Run's timeout answers 504
# but leaves the thread running; CLOUD_RUN_TIMEOUT_SECONDS with THREADED_TIMEOUT_ENABLED makes
# functions-framework end the request in the thread too (functions_framework/_http/gunicorn.py).
THREADS = "THREADS"
TIMEOUT_SECONDS = "CLOUD_RUN_TIMEOUT_SECONDS"
THREADED_TIMEOUT = "THREADED_TIMEOUT_ENABLED"

API_VARIABLES: tuple[str, ...] = (
    api_keys.PROJECT,
    api_keys.API_AUDIENCE,
    api_keys.API_ALLOWED_CALLERS,
    common.TERMINAL_RETENTION_S,
)


@dataclass(frozen=True)
class ApiNames:
    service: str
    account: str

    @classmethod
    def for_stack(cls, config: StackConfig) -> ApiNames:
        return cls(service=f"{config.name_prefix}-api", account=f"{config.name_prefix}-api-rt")


@dataclass(frozen=True)
class ApiService:
    url: pulumi.Output[str]
    account: serviceaccount.Account
    service: cloudrunv2.Service
    invokers: tuple[cloudrunv2.ServiceIamMember, ...]
    grants: tuple[projects.IAMMember, ...]

    def outputs(self) -> dict[str, pulumi.Input[str]]:
        return {"api_url": self.url}


@dataclass(frozen=True)
class Stack:
    """The core deployment plus the API (None without callers)."""

    deployment: Deployment
    api: ApiService | None

    def outputs(self) -> dict[str, pulumi.Input[str]]:
        return {**self.deployment.outputs(), **(self.api.outputs() if self.api else {})}


def build_with_api(config: StackConfig) -> Stack:
    deployment = build_core(config)
    return Stack(deployment, create_api(config, deployment))


def api_environment(config: StackConfig, url: pulumi.Input[str]) -> Mapping[str, pulumi.Input[str]]:
    """The API's JOBS_* variables (exactly API_VARIABLES)."""
    return {
        api_keys.PROJECT: config.project,
        api_keys.API_AUDIENCE: url,
        api_keys.API_ALLOWED_CALLERS: ",".join(config.api_callers),
        # A cancel makes a job terminal, so the API sets expire_at like the other services.
        common.TERMINAL_RETENTION_S: str(config.terminal_retention_s),
    }


def create_api(config: StackConfig, deployment: Deployment) -> ApiService | None:
    if not config.api_callers:
        return None
    names = ApiNames.for_stack(config)
    # After the core stack's accounts and services: the IAM, Run and Firestore APIs are
    # enabled by then (they depend on every enabled API).
    opts = pulumi.ResourceOptions(depends_on=[deployment.accounts.scan, deployment.scan.service])
    number = organizations.get_project_output(project_id=config.project).number
    url = number.apply(lambda n: service_url(names.service, n, config.region))
    account = serviceaccount.Account(
        "sa-api",
        project=config.project,
        account_id=names.account,
        display_name="Deferred Jobs schedule API runtime",
        opts=opts,
    )
    member = account.email.apply(lambda email: f"serviceAccount:{email}")
    grants = tuple(
        projects.IAMMember(
            f"api-{role.split('/')[1].replace('.', '-')}",
            project=config.project,
            role=role,
            member=member,
            opts=opts,
        )
        for role in RUNTIME_ROLES
    )
    service = _service(config, names, account, api_environment(config, url), opts)
    invokers = tuple(
        cloudrunv2.ServiceIamMember(
            f"api-invoker-{index}",
            project=config.project,
            location=config.region,
            name=service.name,
            role=INVOKER,
            member=f"serviceAccount:{email}",
            opts=opts,
        )
        for index, email in enumerate(config.api_callers)
    )
    return ApiService(url, account, service, invokers, grants)


def _service(
    config: StackConfig,
    names: ApiNames,
    account: serviceaccount.Account,
    environment: Mapping[str, pulumi.Input[str]],
    opts: pulumi.ResourceOptions,
) -> cloudrunv2.Service:
    scaling = config.api_scaling
    fixed = {
        FUNCTION_TARGET: FUNCTION,
        FUNCTION_SOURCE: SOURCE,
        THREADS: str(scaling.concurrency),
        TIMEOUT_SECONDS: str(REQUEST_TIMEOUT_S),
        THREADED_TIMEOUT: "true",
    }
    envs = [
        cloudrunv2.ServiceTemplateContainerEnvArgs(name=name, value=value)
        for name, value in {**fixed, **environment}.items()
    ]
    return cloudrunv2.Service(
        "api-service",
        project=config.project,
        location=config.region,
        name=names.service,
        ingress=INGRESS,
        deletion_protection=config.deletion_protection,
        template=cloudrunv2.ServiceTemplateArgs(
            service_account=account.email,
            timeout=f"{REQUEST_TIMEOUT_S}s",
            max_instance_request_concurrency=scaling.concurrency,
            scaling=cloudrunv2.ServiceTemplateScalingArgs(
                min_instance_count=scaling.min_instances,
                max_instance_count=scaling.max_instances,
            ),
            containers=[
                cloudrunv2.ServiceTemplateContainerArgs(
                    image=config.image,
                    envs=envs,
                    resources=cloudrunv2.ServiceTemplateContainerResourcesArgs(
                        limits={"cpu": config.cpu, "memory": config.memory},
                    ),
                )
            ],
        ),
        opts=opts,
    )
