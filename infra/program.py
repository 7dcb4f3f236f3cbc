"""Builds one deployment: wires identity, database, services, messaging, scheduler, monitoring,
the API, the console and the budget.

`build(config, scope)` is a plain function (no work at import time), called by the
`DeferredJobs` component (infra/component.py) with the component as the parent of everything it
creates, and, through it, once per example stack by the tests under mocks.
"""

from __future__ import annotations

from dataclasses import dataclass

import pulumi
from pulumi_gcp import cloudscheduler, organizations

from infra import apis, cloudrun, database, env, identity, messaging, scheduler
from infra import budget as stack_budget
from infra import monitoring as stack_monitoring
from infra.api import ApiService, create_api
from infra.config import StackConfig
from infra.console import ConsoleService, create_console
from infra.names import service_url
from infra.scope import Scope
from services.edge.resource_names import Names


@dataclass(frozen=True)
class Deployment:
    """Everything `build` created, for the component's outputs and for tests to inspect."""

    names: Names
    scan_url: pulumi.Output[str]
    worker_url: pulumi.Output[str]
    apis: apis.Apis
    accounts: identity.Accounts
    database: database.Database
    scan: cloudrun.RunService
    worker: cloudrun.RunService
    messaging: messaging.Messaging
    scheduler_job: cloudscheduler.Job  # partition 0's (the only one with one partition)
    monitoring: stack_monitoring.Monitoring
    scheduler_jobs: tuple[cloudscheduler.Job, ...] = ()
    api: ApiService | None = None
    console: ConsoleService | None = None
    budget: stack_budget.BudgetAlert | None = None

    def outputs(self) -> dict[str, pulumi.Input[str]]:
        """The stack outputs."""
        outputs: dict[str, pulumi.Input[str]] = {
            "scan_url": self.scan_url,
            "worker_url": self.worker_url,
            "topic": self.messaging.topic.name,
            "subscription": self.messaging.subscription.name,
            "dead_letter_topic": self.messaging.dead_letter_topic.name,
            "dead_letter_subscription": self.messaging.dead_letter_subscription.name,
            "scheduler_job": self.scheduler_job.name,
        }
        if self.api is not None:
            outputs["api_url"] = self.api.url
        if self.console is not None:
            outputs["console_url"] = self.console.url
        return outputs


def build(config: StackConfig, scope: Scope) -> Deployment:
    # Provider reads, which run in `pulumi preview` too: a missing bucket fails here, naming
    # the key, before anything is created.
    identity.check_media_bucket(config)
    names = Names.for_prefix(config.name_prefix)
    enabled = apis.enable_apis(config, scope)
    after_apis = pulumi.ResourceOptions.merge(scope.opts(), enabled.ready)
    project_number = organizations.get_project_output(project_id=config.project).number

    def url_of(service: str) -> pulumi.Output[str]:
        return project_number.apply(lambda number: service_url(service, number, config.region))

    def after(*resources: pulumi.Resource) -> pulumi.ResourceOptions:
        return pulumi.ResourceOptions.merge(
            after_apis, pulumi.ResourceOptions(depends_on=list(resources))
        )

    scan_url, worker_url = url_of(names.scan_service), url_of(names.worker_service)
    accounts = identity.create_accounts(config, names, scope, after_apis)
    runtime_grants = identity.grant_runtime_roles(config, accounts, scope, after_apis)
    media_grant = identity.grant_media_access(config, accounts, scope, after_apis)
    target_grants = identity.grant_target_invokers(config, accounts, scope, after_apis)
    pubsub_agent = identity.create_pubsub_service_agent(config, scope, after_apis)
    signer = identity.allow_pubsub_to_sign_as_pusher(accounts, pubsub_agent, scope, after_apis)
    db = database.create_database(config, scope, after_apis)

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
        scope,
        # Its first revision can read Firestore and write its gauges.
        after(*runtime_grants["scan"]),
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
        scope,
        # Its first revision can read Firestore, delete media and call its targets.
        after(*runtime_grants["worker"], media_grant, *target_grants),
    )
    queues = messaging.create_messaging(
        config,
        names,
        accounts,
        worker_url,
        pubsub_agent,
        scope,
        # Push only once the worker exists, accepts the pusher, and Pub/Sub may sign as it.
        after(worker.service, *worker.invokers, signer),
    )
    # The first scheduled run must find everything it and the worker touch: the indexes its
    # queries need (a missing one is FAILED_PRECONDITION), the runtimes' roles, the topic, the
    # scan's publisher grant, and the push subscription (a message published to a topic with
    # no subscription yet is lost).
    jobs = scheduler.create_scan_triggers(
        config,
        names,
        accounts.scheduler,
        scan_url,
        scope,
        after(
            scan.service,
            *scan.invokers,
            worker.service,
            *worker.invokers,
            *db.ready,
            *runtime_grants["scan"],
            *runtime_grants["worker"],
            media_grant,
            *target_grants,
            queues.topic,
            queues.subscription,
            *queues.grants,
        ),
    )
    observed = stack_monitoring.create_monitoring(config, names, scope, after_apis)
    return Deployment(
        names=names,
        scan_url=scan_url,
        worker_url=worker_url,
        apis=enabled,
        accounts=accounts,
        database=db,
        scan=scan,
        worker=worker,
        messaging=queues,
        scheduler_job=jobs[0],
        scheduler_jobs=jobs,
        monitoring=observed,
        api=create_api(config, scope, after_apis),
        console=create_console(config, scope, after_apis),
        budget=stack_budget.create_budget(config, scope, observed.channels, after_apis),
    )
