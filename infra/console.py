"""The operator console's Cloud Run service behind Identity-Aware Proxy, its runtime account and
who may use it.

Same image as the other services, target `console` (`services/console/main.py`). IAP is enabled
directly on the Cloud Run service, Google's recommended way for a web UI (no load balancer:
https://cloud.google.com/iap/docs/enabling-cloud-run). The request path: IAP signs the
person's identity into `X-Goog-IAP-JWT-Assertion` (audience
`/projects/PROJECT_NUMBER/locations/REGION/services/SERVICE`,
https://cloud.google.com/iap/docs/signed-headers-howto), then calls Cloud Run as its own service
agent, which therefore holds `roles/run.invoker` on this service and nobody else does
(https://cloud.google.com/run/docs/securing/identity-aware-proxy-cloud-run). Who passes IAP is
`roles/iap.httpsResourceAccessor` on this service, granted to every `consoleViewers` and
`consoleOperators` member; the console checks the signed header itself and tells viewers from
operators by the email in it (`JOBS_CONSOLE_VIEWERS`, `JOBS_CONSOLE_OPERATORS`). It reads and
writes Firestore only: its account gets `roles/datastore.user` and nothing else. No viewer and
no operator: no console.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

import pulumi
from pulumi_gcp import cloudrunv2, iap, organizations, projects, serviceaccount

from infra import cloudrun
from infra.config import StackConfig
from infra.identity import create_runtime
from infra.names import service_url
from infra.scope import Scope
from services.console.settings import CONSOLE_IAP_AUDIENCE, CONSOLE_OPERATORS, CONSOLE_VIEWERS
from services.edge import settings as common

FUNCTION = "console"
RUNTIME_ROLES: tuple[str, ...] = ("roles/datastore.user",)
# Page views and bounded batches of a bulk action: a minute is ample for one request.
REQUEST_TIMEOUT_S = 60
IAP_ACCESSOR = "roles/iap.httpsResourceAccessor"
IAP_SERVICE = "iap.googleapis.com"

# What the stack sets of the console's variables (their names are owned by its settings module).
CONSOLE_VARIABLES: tuple[str, ...] = (
    common.PROJECT,
    common.TERMINAL_RETENTION_S,
    common.SHARDS,
    CONSOLE_VIEWERS,
    CONSOLE_OPERATORS,
    CONSOLE_IAP_AUDIENCE,
)


@dataclass(frozen=True)
class ConsoleNames:
    service: str
    account: str

    @classmethod
    def for_stack(cls, config: StackConfig) -> ConsoleNames:
        return cls(
            service=f"{config.name_prefix}-console", account=f"{config.name_prefix}-console-rt"
        )


@dataclass(frozen=True)
class ConsoleService:
    url: pulumi.Output[str]
    account: serviceaccount.Account
    service: cloudrunv2.Service
    iap_agent: projects.ServiceIdentity
    invokers: tuple[cloudrunv2.ServiceIamMember, ...]
    accessors: tuple[iap.WebCloudRunServiceIamMember, ...]
    grants: tuple[projects.IAMMember, ...]


def emails(members: tuple[str, ...]) -> str:
    """The comma-separated emails of `user:EMAIL` / `serviceAccount:EMAIL` members: what IAP
    signs into its header, so what the console compares."""
    return ",".join(member.partition(":")[2] for member in members)


def iap_audience(project_number: str, region: str, service: str) -> str:
    """IAP's signed-header audience for IAP enabled directly on a Cloud Run service
    (https://cloud.google.com/iap/docs/signed-headers-howto, "Cloud Run")."""
    return f"/projects/{project_number}/locations/{region}/services/{service}"


def console_environment(
    config: StackConfig, audience: pulumi.Input[str]
) -> Mapping[str, pulumi.Input[str]]:
    """The console's JOBS_* variables (exactly CONSOLE_VARIABLES). Never the local stand-in
    identity: the console refuses it on Cloud Run."""
    return {
        common.PROJECT: config.project,
        # A cancel makes a job terminal: expire_at as every other writer sets it.
        common.TERMINAL_RETENTION_S: str(config.terminal_retention_s),
        common.SHARDS: str(config.shards),
        # Operators can view too; the console reads both lists.
        CONSOLE_VIEWERS: emails(config.console_viewers),
        CONSOLE_OPERATORS: emails(config.console_operators),
        CONSOLE_IAP_AUDIENCE: audience,
    }


def create_console(
    config: StackConfig, scope: Scope, opts: pulumi.ResourceOptions
) -> ConsoleService | None:
    """The console behind IAP, or None when the stack names nobody to use it."""
    if not config.console_enabled:
        return None
    names = ConsoleNames.for_stack(config)
    number = organizations.get_project_output(project_id=config.project).number
    url = number.apply(lambda n: service_url(names.service, n, config.region))
    audience = number.apply(lambda n: iap_audience(n, config.region, names.service))
    account, grants = create_runtime(
        config, FUNCTION, names.account, "console runtime", RUNTIME_ROLES, scope, opts
    )
    # IAP's service agent, created explicitly as the Pub/Sub one is (Google creates agents
    # lazily; a binding naming it before it exists fails).
    agent = projects.ServiceIdentity(
        scope.name("iap-service-agent"), project=config.project, service=IAP_SERVICE, opts=opts
    )
    spec = cloudrun.ServiceSpec(
        key=FUNCTION,
        name=names.service,
        runtime=account,
        invokers={"console-invoker": agent.member},
        timeout_s=REQUEST_TIMEOUT_S,
        scaling=config.console_scaling,
        # People's browsers come from anywhere; IAP is the gate, then Cloud Run's IAM check
        # admits only IAP's agent.
        ingress="INGRESS_TRAFFIC_ALL",
        iap=True,
    )
    service_opts = pulumi.ResourceOptions.merge(opts, pulumi.ResourceOptions(depends_on=grants))
    run = cloudrun.create_service(
        config, spec, console_environment(config, audience), scope, service_opts
    )
    people = dict.fromkeys((*config.console_viewers, *config.console_operators))
    accessors = tuple(
        iap.WebCloudRunServiceIamMember(
            scope.name(f"console-iap-access-{index}"),
            project=config.project,
            location=config.region,
            cloud_run_service_name=run.service.name,
            role=IAP_ACCESSOR,
            member=person,
            opts=opts,
        )
        for index, person in enumerate(people)
    )
    return ConsoleService(url, account, run.service, agent, run.invokers, accessors, grants)
