"""The Cloud Scheduler jobs that POST to the scan with an OIDC token, on the stack's schedule.

One job per scan partition (`scanPartitions`, services/scan/partitions.py): with one, the job
`scan-trigger` sends an empty body, as before partitions existed; with k > 1, each job
`scan-trigger-p<p>` sends `{"partition": p}` and its run claims only that partition's
shards, with its own lease and 1/k of the catch-up rate. The jobs carry Cloud Scheduler's
`X-CloudScheduler-*` headers by themselves
(https://cloud.google.com/scheduler/docs/configuring/deduplicate-job-requests), which the scan
uses to answer a repeated execution with 200 and no work.
"""

from __future__ import annotations

import base64
import json

import pulumi
from pulumi_gcp import cloudscheduler, serviceaccount

from infra.config import StackConfig
from infra.scope import Scope
from services.edge.resource_names import Names
from services.scan.partitions import partition_shards


def partition_body(partition: int) -> str:
    """The base64 JSON body of partition `partition`'s job (HttpTarget.body is bytes, sent as
    base64 in the API: https://cloud.google.com/scheduler/docs/reference/rest/v1/projects.locations.jobs#HttpTarget)."""
    return base64.b64encode(json.dumps({"partition": partition}).encode()).decode()


def create_scan_triggers(
    config: StackConfig,
    names: Names,
    invoker: serviceaccount.Account,
    scan_url: pulumi.Input[str],
    scope: Scope,
    opts: pulumi.ResourceOptions,
) -> tuple[cloudscheduler.Job, ...]:
    # Raises for a partition count the shards cannot hold (config.py refused it already).
    groups = partition_shards(config.scan_partitions, config.shards)
    if len(groups) == 1:
        return (
            _job(
                config,
                names.scheduler_job,
                scope.name("scan-trigger"),
                invoker,
                scan_url,
                None,
                opts,
            ),
        )
    return tuple(
        _job(
            config,
            f"{names.scheduler_job}-p{partition}",
            scope.name(f"scan-trigger-p{partition}"),
            invoker,
            scan_url,
            partition,
            opts,
        )
        for partition in groups
    )


def _job(
    config: StackConfig,
    name: str,
    resource: str,
    invoker: serviceaccount.Account,
    scan_url: pulumi.Input[str],
    partition: int | None,
    opts: pulumi.ResourceOptions,
) -> cloudscheduler.Job:
    body = None if partition is None else partition_body(partition)
    headers = None if partition is None else {"Content-Type": "application/json"}
    what = "" if partition is None else f" Partition {partition}."
    return cloudscheduler.Job(
        resource,
        project=config.project,
        region=config.region,
        name=name,
        description=f"Turns due deferred jobs into ready work (scan service).{what}",
        schedule=config.schedule,
        time_zone=config.time_zone,
        # The scan bounds its own run by scanTimeBudgetS, well inside this deadline.
        attempt_deadline=f"{config.scan_attempt_deadline_s}s",
        retry_config=cloudscheduler.JobRetryConfigArgs(retry_count=config.scan_retry_count),
        http_target=cloudscheduler.JobHttpTargetArgs(
            uri=scan_url,
            http_method="POST",
            oidc_token=cloudscheduler.JobHttpTargetOidcTokenArgs(
                service_account_email=invoker.email,
                audience=scan_url,
            ),
            body=body,
            headers=headers,
        ),
        opts=opts,
    )
