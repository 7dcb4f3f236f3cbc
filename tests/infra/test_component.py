"""`DeferredJobs` as a component: two in one program register no URN twice and no Google name
twice, a third sits beside a program's own resources, and bad args fail naming the key."""

from __future__ import annotations

from collections import Counter
from typing import Any

import pulumi
import pytest
from pulumi_gcp import pubsub

from infra.errors import InfraConfigError
from tests.infra.conftest import PROJECT, TEST_IMAGE, RecordingMocks, RecordingMonitor, StackRun

COMPONENT = "deferred-jobs:index:DeferredJobs"
NAMED = ("name", "accountId", "roleId")  # the inputs that are Google-side names


def _args(project: str, prefix: str, **keys: Any) -> Any:
    from infra.component import deferred_jobs_args

    return deferred_jobs_args(
        project=project,
        region="europe-west1",
        image=TEST_IMAGE,
        namePrefix=prefix,
        mediaBucket=f"{project}-media",
        alertEmails=["jobs-oncall@acme-media.com"],
        apiCallers=[f"media-service@{project}.iam.gserviceaccount.com"],
        consoleViewers=["user:viewer@acme-media.com"],
        **keys,
    )


def _program(build: Any) -> StackRun:
    """Run `build()` as a whole Pulumi program under the recording mocks."""
    run = StackRun()  # no prefix dropped: full names
    mocks = RecordingMocks(run)
    pulumi.runtime.set_mocks(
        mocks,
        project=PROJECT,
        stack="platform",
        preview=False,
        monitor=RecordingMonitor(mocks, run),
    )
    pulumi.runtime.set_all_config({})

    @pulumi.runtime.test
    def program() -> pulumi.Output[Any]:
        outputs = build()
        return pulumi.Output.all(**outputs).apply(run.outputs.update)

    program()
    return run


def _type_chain(urn: str) -> str:
    """The URN's parent-type$type part (the stack's own resources: `pulumi:pulumi:Stack$T`)."""
    return urn.split("::")[2]


def _google_names(run: StackRun) -> Counter[tuple[str, str, str]]:
    """(type, project, name) of every resource that carries a Google-side name."""
    return Counter(
        (r.type, str(r.state.get("project", "")), str(r.state[key]))
        for r in run.resources
        for key in NAMED
        if key in r.state and r.type != "gcp:projects/service:Service"
    )


def test_two_components_in_one_program_collide_on_no_urn_and_no_google_name() -> None:
    from infra.component import DeferredJobs

    def build() -> dict[str, Any]:
        media = DeferredJobs("media-jobs", _args("acme-media", "media-jobs"))
        billing = DeferredJobs("billing-jobs", _args("acme-billing", "billing-jobs"))
        return {
            "media_api": media.api_url,
            "billing_api": billing.api_url,
            "media_console": media.console_url,
            "billing_topic": billing.topic,
        }

    run = _program(build)
    assert [u for u, n in Counter(run.urns).items() if n > 1] == []
    components = [u for u in run.urns if u.endswith(("::media-jobs", "::billing-jobs"))]
    assert len(components) == 2 and all(COMPONENT in u for u in components)
    # Everything else is a component's child, named after its component.
    children = [u for u in run.urns if _type_chain(u).startswith(f"{COMPONENT}$")]
    assert len(run.urns) == 2 + len(children)
    for name in ("media-jobs", "billing-jobs"):
        mine = [u for u in children if u.rsplit("::", 1)[1].startswith(f"{name}-")]
        assert len(mine) > 100, name
    assert len(children) == 2 * len(mine)
    duplicated = [key for key, n in _google_names(run).items() if n > 1]
    assert duplicated == []
    assert run.outputs["media_api"].startswith("https://media-jobs-api-")
    assert run.outputs["billing_api"].startswith("https://billing-jobs-api-")
    assert run.outputs["media_console"].startswith("https://media-jobs-console-")
    assert run.outputs["billing_topic"] == "billing-jobs-jobs"


def test_a_component_joins_a_program_that_has_its_own_resources() -> None:
    from infra.component import DeferredJobs

    def build() -> dict[str, Any]:
        # The platform team's own resources, some with the names a stack of ours would use.
        own = pubsub.Topic("jobs-topic", project="acme-platform", name="platform-events")
        pubsub.Topic("scan-service", project="acme-platform", name="platform-audit")
        jobs = DeferredJobs("jobs", _args("acme-platform", "jobs"))
        return {"own": own.name, "scan": jobs.scan_url}

    run = _program(build)
    assert [u for u, n in Counter(run.urns).items() if n > 1] == []
    top_level = [u for u in run.urns if _type_chain(u).startswith("pulumi:pulumi:Stack$")]
    assert sorted(u.rsplit("::", 1)[1] for u in top_level) == ["jobs", "jobs-topic", "scan-service"]
    assert run.outputs["own"] == "platform-events"
    assert run.outputs["scan"].startswith("https://jobs-scan-")


def test_component_args_are_validated_like_a_stacks_configuration() -> None:
    with pytest.raises(InfraConfigError) as refused:
        _args("acme-media", "media-jobs", pushAckDeadlineS=5, consoleOperators=["group:x@y.com"])
    message = str(refused.value)
    assert "pushAckDeadlineS=5 is outside the allowed range 10-600" in message
    assert "consoleOperators: 'group:x@y.com': groups are refused" in message


def test_the_components_outputs_are_properties() -> None:
    from infra.component import DeferredJobs

    seen: dict[str, Any] = {}

    def build() -> dict[str, Any]:
        jobs = DeferredJobs("jobs", _args("acme-platform", "jobs"))
        seen.update(vars(jobs))
        return {"worker": jobs.worker_url, "dlq": jobs.dead_letter_subscription}

    run = _program(build)
    for key in ("scan_url", "worker_url", "topic", "subscription", "api_url", "console_url"):
        assert isinstance(seen[key], pulumi.Output), key
    assert run.outputs["dlq"] == "jobs-dead-letter-pull"


def test_the_repositorys_stack_keeps_the_resources_it_deployed_before_the_component(
    dev: StackRun,
) -> None:
    # Each child says it was the stack's top-level resource of its role: `up` moves it into
    # the component instead of replacing it (a protected database could not be replaced).
    # (pulumi-gcp adds type aliases of its own, without a name, to some types.)
    assert len(dev.resources) > 100
    for resource in dev.resources:
        named = [alias for alias in dev.aliases[resource.name] if alias[0]]
        assert named == [(resource.name, True)], resource.name


def test_a_new_component_carries_no_aliases() -> None:
    from infra.component import DeferredJobs

    run = _program(lambda: {"scan": DeferredJobs("jobs", _args("acme-x", "jobs")).scan_url})
    assert run.resources
    assert [r.name for r in run.resources if any(name for name, _ in run.aliases[r.name])] == []
