"""Builds one stack: wires identity, database, services, messaging, scheduler and monitoring.

`build(config)` is a plain function (no work at import time), so tests run it once per example
stack inside `pulumi.runtime.test` under mocks, and `__main__.py` runs it once under Pulumi.
"""

from __future__ import annotations

from dataclasses import dataclass

import pulumi
from pulumi_gcp import cloudscheduler, organizations

from infra import apis, cloudrun, database, env, identity, messaging, scheduler
from infra import monitoring as stack_monitoring
from infra.config import StackConfig
from infra.names import service_url
from services.edge.resource_names import Names


@dataclass(frozen=True)
class Deployment:
    """Everything `build` created, for `__main__` to export and for tests to inspect."""

    names: Names
    scan_url: pulumi.Output[str]
    worker_url: pulumi.Output[str]
    accounts: identity.Accounts
    database: database.Database
    scan: cloudrun.RunService
    worker: cloudrun.RunService
    messaging: messaging.Messaging
    scheduler_job: cloudscheduler.Job  # partition 0's (the only one with one partition)
    monitoring: stack_monitoring.Monitoring
    scheduler_jobs: tuple[cloudscheduler.Job, ...] = ()

    def outputs(self) -> dict[str, pulumi.Input[str]]:
        """The stack outputs."""
        return {
            "scan_url": self.scan_url,
            "worker_url": self.worker_url,
            "topic": self.messaging.topic.name,
            "subscription": self.messaging.subscription.name,
            "dead_letter_topic": self.messaging.dead_letter_topic.name,
            "dead_letter_subscription": self.messaging.dead_letter_subscription.name,
            "scheduler_job": self.scheduler_job.name,
        }


def build(config: StackConfig) -> Deployment:
    names = Names.for_prefix(config.name_prefix)
    enabled = apis.enable_apis(config)
    after_apis = apis.after(list(enabled))
    project_number = organizations.get_project_output(project_id=config.project).number

    def url_of(service: str) -> pulumi.Output[str]:
        return project_number.apply(lambda number: service_url(service, number, config.region))

    scan_url, worker_url = url_of(names.scan_service), url_of(names.worker_service)
    accounts = identity.create_accounts(config, names, after_apis)
    runtime_grants = identity.grant_runtime_roles(config, accounts, after_apis)
    media_grant = identity.grant_media_access(config, accounts, after_apis)
    target_grants = identity.grant_target_invokers(config, accounts, after_apis)
    pubsub_agent = identity.create_pubsub_service_agent(config, after_apis)
    signer = identity.allow_pubsub_to_sign_as_pusher(accounts, pubsub_agent, after_apis)
    db = database.create_database(config, after_apis)

    wiring = env.Wiring(
        topic_name=names.topic,
        subscription_name=names.push_subscription,
        scan_url=scan_url,
        worker_url=worker_url,
        scheduler_invoker_email=accounts.scheduler.email,
        push_invoker_email=accounts.pusher.email,
    )
    scan = cloudrun.create_service(
        config,
        cloudrun.ServiceSpec(
            key="scan",
            name=names.scan_service,
            runtime=accounts.scan,
            invokers=cloudrun.sole_invoker("scan", accounts.scheduler),
            # Cloud Scheduler stops waiting at the attempt deadline; so does Cloud Run.
            timeout_s=config.scan_attempt_deadline_s,
            scaling=config.scan_scaling,
        ),
        env.scan_environment(config, wiring),
        after_apis,
    )
    worker = cloudrun.create_service(
        config,
        cloudrun.ServiceSpec(
            key="worker",
            name=names.worker_service,
            runtime=accounts.worker,
            invokers=cloudrun.sole_invoker("worker", accounts.pusher),
            timeout_s=config.worker_request_timeout_s,
            scaling=config.worker_scaling,
        ),
        env.worker_environment(config, wiring),
        after_apis,
    )
    queues = messaging.create_messaging(
        config,
        names,
        accounts,
        worker_url,
        pubsub_agent,
        # Push only once the worker exists, accepts the pusher, and Pub/Sub may sign as it.
        pulumi.ResourceOptions.merge(
            after_apis,
            pulumi.ResourceOptions(depends_on=[worker.service, *worker.invokers, signer]),
        ),
    )
    # The first scheduled run must find everything it and the worker touch: the indexes its
    # queries need (a missing one is FAILED_PRECONDITION), the runtimes' roles, the topic, the
    # scan's publisher grant, and the push subscription (a message published to a topic with
    # no subscription yet is lost).
    scan_prerequisites: list[pulumi.Resource] = [
        scan.service,
        *scan.invokers,
        worker.service,
        *worker.invokers,
        *db.ready,
        *runtime_grants,
        media_grant,
        *target_grants,
        queues.topic,
        queues.subscription,
        *queues.grants,
    ]
    jobs = scheduler.create_scan_triggers(
        config,
        names,
        accounts.scheduler,
        scan_url,
        pulumi.ResourceOptions.merge(
            after_apis, pulumi.ResourceOptions(depends_on=scan_prerequisites)
        ),
    )
    observed = stack_monitoring.create_monitoring(config, names, after_apis)
    return Deployment(
        names=names,
        scan_url=scan_url,
        worker_url=worker_url,
        accounts=accounts,
        database=db,
        scan=scan,
        worker=worker,
        messaging=queues,
        scheduler_job=jobs[0],
        scheduler_jobs=jobs,
        monitoring=observed,
    )
