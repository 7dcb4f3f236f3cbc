"""The Cloud Scheduler job that POSTs to the scan with an OIDC token, on the stack's schedule."""

from __future__ import annotations

import pulumi
from pulumi_gcp import cloudscheduler, serviceaccount

from infra.config import StackConfig
from infra.names import Names


def create_scan_trigger(
    config: StackConfig,
    names: Names,
    invoker: serviceaccount.Account,
    scan_url: pulumi.Input[str],
    opts: pulumi.ResourceOptions,
) -> cloudscheduler.Job:
    return cloudscheduler.Job(
        "scan-trigger",
        project=config.project,
        region=config.region,
        name=names.scheduler_job,
        description="Turns due deferred jobs into ready work (scan service).",
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
        ),
        opts=opts,
    )
