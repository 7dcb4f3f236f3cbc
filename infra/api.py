"""The schedule API's Cloud Run service, its runtime account and its callers' IAM.

Built from the same image as the scan and the worker, with its own function target
(`services/api/main.py`, target `api`) and its own service account, which gets only
`roles/datastore.user` (Firestore has no IAM finer than the project). Each service account in
the `apiCallers` config list is granted `roles/run.invoker` on this service only, and the
service verifies the same callers' ID tokens itself (JOBS_API_ALLOWED_CALLERS), so the IAM
binding is not the only wall. No callers configured: no API service. The service itself comes
from the one builder of infra/cloudrun.py (port, startup probe, server threads and timeout as
for the scan and the worker), and is told it runs behind Cloud Run's invoker check.

Ingress is `apiIngress`: `all` by default, so every caller it admits reaches it (a caller in
another project, or a Cloud Run service without VPC egress, is not "internal":
https://cloud.google.com/run/docs/securing/ingress), with Cloud Run's IAM check admitting only
the `apiCallers`; `internal` where a stack's callers all reach it through a VPC network.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

import pulumi
from pulumi_gcp import cloudrunv2, organizations, projects, serviceaccount

from infra import cloudrun
from infra import env as service_env
from infra.config import API_INGRESS, StackConfig
from infra.errors import InfraConfigError
from infra.identity import create_runtime
from infra.names import service_url
from infra.scope import Scope
from services.api import settings as api_keys
from services.edge import settings as common
from services.jobs.http_targets import targets_json

FUNCTION = "api"
RUNTIME_ROLES: tuple[str, ...] = ("roles/datastore.user",)
# A schedule call is one Firestore write (two on a repeat); 30 s is generous and keeps a
# stuck call from holding a caller's connection for Cloud Run's default 300 s.
REQUEST_TIMEOUT_S = 30

API_VARIABLES: tuple[str, ...] = (
    common.PROJECT,
    api_keys.API_AUDIENCE,
    api_keys.API_ALLOWED_CALLERS,
    api_keys.API_TRUSTED_CALLERS,
    common.TERMINAL_RETENTION_S,
    common.BEHIND_CLOUD_RUN_IAM,
    common.SHARDS,
    common.HTTP_TARGETS,
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


def api_environment(config: StackConfig, url: pulumi.Input[str]) -> Mapping[str, pulumi.Input[str]]:
    """The API's JOBS_* variables (exactly API_VARIABLES)."""
    return {
        common.PROJECT: config.project,
        api_keys.API_AUDIENCE: url,
        api_keys.API_ALLOWED_CALLERS: ",".join(config.api_callers),
        # Callers that may act on every job; the others only on the jobs they scheduled.
        api_keys.API_TRUSTED_CALLERS: ",".join(config.api_trusted_callers),
        # A cancel makes a job terminal, so the API sets expire_at like the other services.
        common.TERMINAL_RETENTION_S: str(config.terminal_retention_s),
        # Behind Cloud Run's invoker check (one run.invoker binding per caller, never
        # invoker_iam_disabled), tokens arrive with their signature removed by Google.
        common.BEHIND_CLOUD_RUN_IAM: service_env.BEHIND_CLOUD_RUN_IAM,
        # The API schedules jobs: it writes the shard the scan claims them from.
        common.SHARDS: str(config.shards),
        # An http.request job must name one of the stack's targets (checked when scheduled).
        common.HTTP_TARGETS: targets_json(config.http_targets.targets),
    }


def api_invokers(config: StackConfig) -> Mapping[str, pulumi.Input[str]]:
    """One roles/run.invoker binding per configured caller, named by its place in the list."""
    return {
        f"api-invoker-{index}": f"serviceAccount:{email}"
        for index, email in enumerate(config.api_callers)
    }


def check_callers_exist(config: StackConfig) -> None:
    """Every `apiCallers` account must exist: IAM refuses a binding to a service account that
    does not ("Error 400: Service account … does not exist", e.g.
    https://github.com/GoogleCloudPlatform/generative-ai/issues/944), so `up` would stop half
    way. The lookup is a provider read, which runs
    in `pulumi preview` too, so the preview fails first, naming the key and each account."""
    missing = []
    for email in config.api_callers:
        try:
            serviceaccount.get_account(account_id=email)
        # The provider reports a failed read as a plain Exception from the invoke (no narrower
        # type exists); the message (404, or 403 without iam.serviceAccounts.get) is kept.
        except Exception as exc:
            missing.append(f"{email} ({str(exc).strip().splitlines()[-1]})")
    if missing:
        raise InfraConfigError(
            "apiCallers: no such service account, or the deployer may not read it: "
            + "; ".join(missing)
            + ". Create each caller's account first, or remove it (docs/deploy.md step 5)"
        )


def create_api(
    config: StackConfig, scope: Scope, opts: pulumi.ResourceOptions
) -> ApiService | None:
    """The API, its account and grants; `opts` orders them after the APIs' enablement."""
    if not config.api_callers:
        return None
    check_callers_exist(config)
    names = ApiNames.for_stack(config)
    number = organizations.get_project_output(project_id=config.project).number
    url = number.apply(lambda n: service_url(names.service, n, config.region))
    account, grants = create_runtime(
        config, FUNCTION, names.account, "schedule API runtime", RUNTIME_ROLES, scope, opts
    )
    spec = cloudrun.ServiceSpec(
        key=FUNCTION,
        name=names.service,
        runtime=account,
        invokers=api_invokers(config),
        timeout_s=REQUEST_TIMEOUT_S,
        scaling=config.api_scaling,
        ingress=API_INGRESS[config.api_ingress],
    )
    # The first revision can read and write Firestore the moment it serves.
    service_opts = pulumi.ResourceOptions.merge(opts, pulumi.ResourceOptions(depends_on=grants))
    run = cloudrun.create_service(config, spec, api_environment(config, url), scope, service_opts)
    return ApiService(url, account, run.service, run.invokers, grants)
