"""The Cloud Run services (scan, worker, api) from one image, and their invokers.

All run the same container; `FUNCTION_TARGET` and `FUNCTION_SOURCE` pick the
functions-framework target (the Dockerfile's CMD passes them on). The scan and the worker each
have one invoker; the api one per configured caller (infra/api.py); the console IAP's service
agent (infra/console.py). The scan's and the worker's ingress is internal-only: Cloud Scheduler
and Pub/Sub push from the same project still reach the default run.app URL, and IAM (run.invoker
for one service account) is checked separately.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass

import pulumi
from pulumi_gcp import cloudrunv2, serviceaccount

from infra import env
from infra.config import Scaling, StackConfig
from infra.identity import member
from infra.scope import Scope

INGRESS = "INGRESS_TRAFFIC_INTERNAL_ONLY"
INVOKER = "roles/run.invoker"

# The container's port (the Dockerfile's PORT; Cloud Run sets PORT to it).
CONTAINER_PORT = 8080
# The startup probe: a TCP connect to the port. The image validates its JOBS_* settings before
# functions-framework listens (services/<target>/main.py) and exits naming every bad key, so a
# misconfigured revision never opens the port, fails this probe, and never takes traffic:
# `pulumi up` fails instead of deploying green
# (https://cloud.google.com/run/docs/configuring/healthchecks).
STARTUP_PERIOD_S = 5
STARTUP_FAILURES = 24  # 2 minutes to start, then the revision fails


# A revision tag: lowercase letters, digits and '-', starting with a letter; Cloud Run joins it
# to the service name in the tag's URL (`https://TAG---SERVICE-...run.app`), so keep it short.
_TAG_LENGTH = 14


def revision_tag(image: str) -> str | None:
    """The tag each deploy's revision carries: `d-` and 12 hex digits of the image's digest, or
    `t-` and its tag; None for an image with neither. It names the revision that serves a given
    build (its own URL, and `gcloud run services update-traffic --to-tags` while it is tagged)."""
    name, at, digest = image.partition("@")
    if at:
        return "d-" + digest.removeprefix("sha256:")[:12]
    last = name.rsplit("/", 1)[-1]
    if ":" not in last:
        return None
    tag = re.sub(r"[^a-z0-9-]", "-", last.rsplit(":", 1)[1].lower()).strip("-")
    return ("t-" + tag)[:_TAG_LENGTH].rstrip("-") if tag else None


@dataclass(frozen=True)
class ServiceSpec:
    """What differs between the services."""

    key: str  # "scan", "worker" or "api": resource names and the function target
    name: str
    runtime: serviceaccount.Account
    # Pulumi resource name -> IAM member granted roles/run.invoker on this service only. The
    # names are the resources' identity in the stack: keep them stable.
    invokers: Mapping[str, pulumi.Input[str]]
    timeout_s: int
    scaling: Scaling
    # The scan and the worker: internal-only (their callers are Cloud Scheduler and Pub/Sub
    # push of the same project, which internal ingress admits); the api per `apiIngress`; the
    # console all (people's browsers, through IAP).
    ingress: str = INGRESS
    # The console: IAP enabled on the service itself (no load balancer).
    iap: bool = False


@dataclass(frozen=True)
class RunService:
    service: cloudrunv2.Service
    invokers: tuple[cloudrunv2.ServiceIamMember, ...]


def sole_invoker(key: str, account: serviceaccount.Account) -> Mapping[str, pulumi.Input[str]]:
    """The invokers of a service one account calls (the scan's scheduler, the worker's pusher)."""
    return {f"{key}-invoker": member(account)}


def create_service(
    config: StackConfig,
    spec: ServiceSpec,
    environment: Mapping[str, pulumi.Input[str]],
    scope: Scope,
    opts: pulumi.ResourceOptions,
) -> RunService:
    envs = [
        cloudrunv2.ServiceTemplateContainerEnvArgs(name=env.FUNCTION_TARGET, value=spec.key),
        cloudrunv2.ServiceTemplateContainerEnvArgs(
            name=env.FUNCTION_SOURCE, value=env.FUNCTION_SOURCES[spec.key]
        ),
    ]
    # One value drives both: Cloud Run's per-instance concurrency and the server's threads;
    # the request timeout both Cloud Run's and the server's.
    server = env.server_environment(spec.scaling.concurrency, spec.timeout_s)
    envs += [
        cloudrunv2.ServiceTemplateContainerEnvArgs(name=name, value=value)
        for name, value in {**server, **environment}.items()
    ]
    service = cloudrunv2.Service(
        scope.name(f"{spec.key}-service"),
        project=config.project,
        location=config.region,
        name=spec.name,
        ingress=spec.ingress,
        # IAP directly on the service (https://cloud.google.com/iap/docs/enabling-cloud-run;
        # pulumi-gcp 10.2's "Cloudrunv2 Service Iap" example sets only this, no launch stage);
        # None (unset) for the others, as before.
        iap_enabled=True if spec.iap else None,
        deletion_protection=config.deletion_protection,
        # Every new revision takes all traffic (its startup probe gates it) and carries the
        # build's tag; rollback: docs/deploy.md, "Rollout and rollback".
        traffics=[
            cloudrunv2.ServiceTrafficArgs(
                type="TRAFFIC_TARGET_ALLOCATION_TYPE_LATEST",
                percent=100,
                tag=revision_tag(config.image),
            )
        ],
        template=cloudrunv2.ServiceTemplateArgs(
            service_account=spec.runtime.email,
            timeout=f"{spec.timeout_s}s",
            max_instance_request_concurrency=spec.scaling.concurrency,
            scaling=cloudrunv2.ServiceTemplateScalingArgs(
                min_instance_count=spec.scaling.min_instances,
                max_instance_count=spec.scaling.max_instances,
            ),
            containers=[
                cloudrunv2.ServiceTemplateContainerArgs(
                    image=config.image,
                    ports=cloudrunv2.ServiceTemplateContainerPortsArgs(
                        container_port=CONTAINER_PORT
                    ),
                    envs=envs,
                    startup_probe=cloudrunv2.ServiceTemplateContainerStartupProbeArgs(
                        tcp_socket=cloudrunv2.ServiceTemplateContainerStartupProbeTcpSocketArgs(
                            port=CONTAINER_PORT
                        ),
                        period_seconds=STARTUP_PERIOD_S,
                        timeout_seconds=STARTUP_PERIOD_S,
                        failure_threshold=STARTUP_FAILURES,
                    ),
                    resources=cloudrunv2.ServiceTemplateContainerResourcesArgs(
                        limits={"cpu": config.cpu, "memory": config.memory},
                        # With `resources` set, cpu_idle must be true explicitly or the revision
                        # bills instance-based ("CPU always allocated"): pulumi-gcp 10.2's
                        # ServiceTemplateContainerResourcesArgs, Cloud Run v2
                        # ResourceRequirements.cpuIdle. Request-based billing is the default
                        # (https://cloud.google.com/run/docs/configuring/billing-settings); a
                        # stack chooses instance-based per service (`<service>InstanceBilling`).
                        cpu_idle=not spec.scaling.instance_billing,
                        # More CPU while an instance starts (the settings check, imports), at
                        # no cost outside that start
                        # (https://cloud.google.com/run/docs/configuring/services/cpu).
                        startup_cpu_boost=True,
                    ),
                )
            ],
        ),
        opts=opts,
    )
    invokers = tuple(
        cloudrunv2.ServiceIamMember(
            scope.name(resource),
            project=config.project,
            location=config.region,
            name=service.name,
            role=INVOKER,
            member=invoker,
            opts=opts,
        )
        for resource, invoker in spec.invokers.items()
    )
    return RunService(service, invokers)
