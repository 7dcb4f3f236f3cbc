"""Deferred Jobs as a Pulumi component: `DeferredJobs(name, args)` in any Pulumi program.

    from infra.component import DeferredJobs, deferred_jobs_args

    jobs = DeferredJobs("media-jobs", deferred_jobs_args(
        project="acme-media-prod", region="europe-west1", image=IMAGE,
        mediaBucket="acme-media-prod-media", alertEmails=[], apiCallers=[],
    ))
    pulumi.export("jobs_api", jobs.api_url)

The args are a `StackConfig`, validated exactly as a stack's configuration is (the same keys,
`parse_config`): one failed construction names every bad key. Every resource the component
registers is its child, named `<name>-<role>` (infra/scope.py), so two components in one
program, or one next to the program's own resources, never collide on a URN. Google-side
names come from `namePrefix`; project-wide names (metric descriptors, log-based metrics, the
`(default)` Firestore database) allow one deployment per project, so two components need two
projects.
"""

from __future__ import annotations

from typing import Any

import pulumi

from infra.config import StackConfig, parse_config
from infra.program import Deployment, build
from infra.scope import Scope

COMPONENT_TYPE = "deferred-jobs:index:DeferredJobs"


def deferred_jobs_args(
    *, project: str, region: str, slack_auth_token: pulumi.Output[str] | None = None, **keys: Any
) -> StackConfig:
    """The component's args from the stack configuration's own keys (`image`, `mediaBucket`,
    `alertEmails`, …; docs/deploy.md, "Configuration keys"), validated as a stack's are."""
    raw = {"gcp:project": project, "gcp:region": region, **keys}
    return parse_config(raw, slack_auth_token=slack_auth_token)


class DeferredJobs(pulumi.ComponentResource):
    """One complete Deferred Jobs deployment."""

    deployment: Deployment
    scan_url: pulumi.Output[str]
    worker_url: pulumi.Output[str]
    topic: pulumi.Output[str]
    subscription: pulumi.Output[str]
    dead_letter_topic: pulumi.Output[str]
    dead_letter_subscription: pulumi.Output[str]
    scheduler_job: pulumi.Output[str]
    api_url: pulumi.Output[str] | None
    console_url: pulumi.Output[str] | None

    def __init__(
        self,
        name: str,
        args: StackConfig,
        opts: pulumi.ResourceOptions | None = None,
        *,
        moved_from_top_level: bool = False,
    ) -> None:
        """`moved_from_top_level`: the stack was deployed before the program became this
        component, when each resource was top-level and named by its role alone; an alias per
        child tells Pulumi it is the same resource, so the `up` moves it instead of replacing
        it (https://www.pulumi.com/docs/iac/concepts/options/aliases/)."""
        if moved_from_top_level:
            prefix = f"{name}-"
            opts = pulumi.ResourceOptions.merge(
                opts, pulumi.ResourceOptions(transformations=[_alias_top_level(prefix)])
            )
        super().__init__(COMPONENT_TYPE, name, None, opts)
        self.deployment = build(args, Scope(name, self))
        outputs = self.deployment.outputs()
        for key, value in outputs.items():
            setattr(self, key, pulumi.Output.from_input(value))
        self.api_url = self.__dict__.get("api_url")
        self.console_url = self.__dict__.get("console_url")
        self.register_outputs(outputs)

    def outputs(self) -> dict[str, pulumi.Input[str]]:
        """What a stack exports: the deployment's URLs and names."""
        return self.deployment.outputs()


def _alias_top_level(prefix: str) -> pulumi.ResourceTransformation:
    """A transformation giving each child the alias of its former top-level self: the same
    type, its role as the name, and the stack as the parent."""

    def alias(args: pulumi.ResourceTransformationArgs) -> pulumi.ResourceTransformationResult:
        former = pulumi.Alias(
            name=args.name.removeprefix(prefix), parent=pulumi.ROOT_STACK_RESOURCE
        )
        moved = pulumi.ResourceOptions(aliases=[former])
        return pulumi.ResourceTransformationResult(
            args.props, pulumi.ResourceOptions.merge(args.opts, moved)
        )

    return alias
