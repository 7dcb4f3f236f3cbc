"""Runs the Pulumi program under mocks: no cloud, no CLI, no provider plugins.

`run_stack(name)` loads `Pulumi.<name>.yaml`'s `config:` map into the Pulumi runtime, runs
what `infra/__main__.py` runs (`infra.stack.deploy_stack()`: one `DeferredJobs` component)
inside `pulumi.runtime.test`, and returns every custom resource the program registered (type,
name, inputs as sent on the wire, camelCase, and the names of the resources it depends on) and
the stack outputs. Names are relative to the component: its `<namePrefix>-` is dropped, so a
test names `scan-service`, not `deferred-jobs-scan-service`; `urns` keeps every full URN.
The session fixtures `dev` and `prod` run each example stack once. The example stacks carry
no image (it is set per stack after the build), and none of what a deployer sets per stack
(project, bucket, alert emails, API callers: `DEPLOYER_CONFIG`), so runs get those unless a
test says otherwise.
"""

from __future__ import annotations

import json
from collections.abc import Collection, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import grpc
import pulumi
import pytest
import yaml
from pulumi.runtime.mocks import MockMonitor

from services.edge.resource_names import NAME_PREFIX

ROOT = Path(__file__).resolve().parents[2]
PROJECT = "deferred-jobs"
PROJECT_NUMBER = "123456789012"
GET_PROJECT = "gcp:organizations/getProject:getProject"
TEST_IMAGE = (
    "europe-west1-docker.pkg.dev/deferred-jobs-test/deferred-jobs/app@sha256:"
    + "0123456789abcdef" * 4
)
PUBSUB_AGENT_EMAIL = f"service-{PROJECT_NUMBER}@gcp-sa-pubsub.iam.gserviceaccount.com"
IAP_AGENT_EMAIL = f"service-{PROJECT_NUMBER}@gcp-sa-iap.iam.gserviceaccount.com"
# The service agents the program asks generateServiceIdentity for, by API.
SERVICE_AGENTS = {
    "pubsub.googleapis.com": PUBSUB_AGENT_EMAIL,
    "iap.googleapis.com": IAP_AGENT_EMAIL,
}
GET_ACCOUNT = "gcp:serviceaccount/getAccount:getAccount"
GET_BUCKET = "gcp:storage/getBucket:getBucket"
# What docs/deploy.md step 5 has the deployer set per stack (no stack file commits them):
# a project and bucket of their own, alert emails and API callers of their organisation.
DEPLOYER_CONFIG: dict[str, dict[str, Any]] = {
    "dev": {
        "gcp:project": "acme-jobs-dev",
        f"{PROJECT}:mediaBucket": "acme-jobs-dev-media",
        f"{PROJECT}:alertEmails": [],
        f"{PROJECT}:apiCallers": ["media-service@acme-jobs-dev.iam.gserviceaccount.com"],
    },
    "prod": {
        "gcp:project": "acme-jobs-prod",
        f"{PROJECT}:mediaBucket": "acme-jobs-prod-media",
        f"{PROJECT}:alertEmails": ["jobs-oncall@acme-media.com", "jobs-owners@acme-media.com"],
        f"{PROJECT}:apiCallers": [
            "media-service@acme-jobs-prod.iam.gserviceaccount.com",
            "retention-service@acme-jobs-prod.iam.gserviceaccount.com",
        ],
    },
}


@dataclass(frozen=True)
class Registered:
    type: str
    name: str
    state: Mapping[str, Any]


@dataclass
class StackRun:
    resources: list[Registered] = field(default_factory=list)
    outputs: dict[str, Any] = field(default_factory=dict)
    # resource name -> names of the resources it depends on (depends_on and its inputs)
    dependencies: dict[str, frozenset[str]] = field(default_factory=dict)
    # Every URN registered (components included), in order: a repeat is a collision.
    urns: list[str] = field(default_factory=list)
    # resource name -> its custom timeouts (create, update, delete; "" where unset)
    timeouts: dict[str, tuple[str, str, str]] = field(default_factory=dict)
    # resource name -> its aliases' (name, no parent) as sent to the engine
    aliases: dict[str, list[tuple[str, bool]]] = field(default_factory=dict)
    # The prefix dropped from names (the component's name and "-"); "" keeps full names.
    component: str = ""

    def short(self, name: str) -> str:
        return name.removeprefix(self.component)

    def waits_for(self, name: str) -> set[str]:
        """Every resource `name` is created after, directly or through others."""
        seen: set[str] = set()
        pending = list(self.dependencies.get(name, ()))
        while pending:
            current = pending.pop()
            if current not in seen:
                seen.add(current)
                pending.extend(self.dependencies.get(current, ()))
        return seen

    def of_type(self, suffix: str) -> list[Registered]:
        """Resources whose type token ends with `suffix` (e.g. "cloudrunv2/service:Service")."""
        return [r for r in self.resources if r.type.endswith(suffix)]

    def one(self, suffix: str, name: str) -> Registered:
        matches = [r for r in self.of_type(suffix) if r.name == name]
        assert len(matches) == 1, f"expected one {suffix} named {name}, got {len(matches)}"
        return matches[0]


def _computed(typ: str, resource: str, inputs: dict[str, Any]) -> tuple[str, dict[str, Any]]:
    """The id and output properties Google would return for a resource, by type."""
    project = inputs.get("project", "unset-project")
    state = dict(inputs)
    name = inputs.get("name", "")
    if typ == "gcp:serviceaccount/account:Account":
        email = f"{inputs['accountId']}@{project}.iam.gserviceaccount.com"
        state.update(email=email, name=f"projects/{project}/serviceAccounts/{email}")
        return state["name"], state
    if typ == "gcp:pubsub/topic:Topic":
        return f"projects/{project}/topics/{name}", state
    if typ == "gcp:pubsub/subscription:Subscription":
        return f"projects/{project}/subscriptions/{name}", state
    if typ == "gcp:cloudrunv2/service:Service":
        # Cloud Run reports a hash-based URL and, when the name fits, the deterministic one.
        location = inputs["location"]
        deterministic = f"https://{name}-{PROJECT_NUMBER}.{location}.run.app"
        hashed = f"https://{name}-q7zx3kpvla-ew.a.run.app"
        state.update(uri=hashed, urls=[deterministic, hashed])
        return f"projects/{project}/locations/{location}/services/{name}", state
    if typ == "gcp:projects/iAMCustomRole:IAMCustomRole":
        state["name"] = f"projects/{project}/roles/{inputs['roleId']}"
        return state["name"], state
    if typ == "gcp:projects/serviceIdentity:ServiceIdentity":
        agent = SERVICE_AGENTS[inputs["service"]]
        state.update(email=agent, member=f"serviceAccount:{agent}")
        return f"projects/{project}/services/{inputs['service']}", state
    if typ == "gcp:monitoring/notificationChannel:NotificationChannel":
        state["name"] = f"projects/{project}/notificationChannels/{resource}"
        return state["name"], state
    return f"{typ.rsplit(':', 1)[-1].lower()}-{name or 'id'}", state


class RecordingMonitor(MockMonitor):
    """The mock resource monitor, also recording what each resource was registered after."""

    def __init__(self, mocks: pulumi.runtime.Mocks, run: StackRun) -> None:
        super().__init__(mocks)
        self._run = run

    def RegisterResource(self, request: Any) -> Any:  # the gRPC method's name
        names = frozenset(self._run.short(urn.rsplit("::", 1)[-1]) for urn in request.dependencies)
        self._run.dependencies[self._run.short(request.name)] = names
        self._run.aliases[self._run.short(request.name)] = [
            (alias.spec.name, alias.spec.noParent) for alias in request.aliases
        ]
        if request.HasField("customTimeouts"):
            limits = request.customTimeouts
            self._run.timeouts[self._run.short(request.name)] = (
                limits.create,
                limits.update,
                limits.delete,
            )
        response = super().RegisterResource(request)
        if request.type != "pulumi:pulumi:Stack":
            self._run.urns.append(response.urn)
        return response


class ProviderError(grpc.RpcError):
    """A provider's failed read, as the engine returns it to an invoke (a gRPC error whose
    details are the provider's message)."""

    def __init__(self, details: str) -> None:
        super().__init__(details)
        self._details = details

    def code(self) -> grpc.StatusCode:
        return grpc.StatusCode.UNKNOWN

    def details(self) -> str:
        return self._details


class RecordingMocks(pulumi.runtime.Mocks):
    """`missing_accounts`: service accounts the provider's getAccount read does not find;
    `missing_buckets`: buckets its getBucket read does not find."""

    def __init__(
        self,
        run: StackRun,
        missing_accounts: Collection[str] = (),
        missing_buckets: Collection[str] = (),
    ) -> None:
        self._run = run
        self._missing = frozenset(missing_accounts)
        self._missing_buckets = frozenset(missing_buckets)

    def new_resource(self, args: pulumi.runtime.MockResourceArgs) -> tuple[str, dict[str, Any]]:
        if not args.custom:  # a component: no provider state
            return f"{args.name}-component", {}
        resource_id, state = _computed(args.typ, args.name, dict(args.inputs))
        self._run.resources.append(Registered(args.typ, self._run.short(args.name), state))
        return resource_id, state

    def call(
        self, args: pulumi.runtime.MockCallArgs
    ) -> tuple[dict[str, Any], list[tuple[str, str]] | None]:
        if args.token == GET_PROJECT:
            return {"number": PROJECT_NUMBER, "projectId": args.args.get("projectId")}, []
        if args.token == GET_ACCOUNT:
            email = str(args.args["accountId"])
            if email in self._missing:
                # What the provider reports for an account that does not exist, as the engine
                # hands a failed read back: a gRPC error of the invoke.
                raise ProviderError(
                    f"googleapi: Error 404: Not found; Gaia id not found for {email}"
                )
            name = f"projects/-/serviceAccounts/{email}"
            return {"email": email, "name": name, "member": f"serviceAccount:{email}"}, []
        if args.token == GET_BUCKET:
            bucket = str(args.args["name"])
            if bucket in self._missing_buckets:
                # What the provider's bucket read reports for a bucket that does not exist.
                raise ProviderError(
                    "googleapi: Error 404: The specified bucket does not exist., notFound"
                )
            return {
                "name": bucket,
                "selfLink": f"https://www.googleapis.com/storage/v1/b/{bucket}",
            }, []
        raise AssertionError(f"unexpected provider call {args.token}")


def stack_config(stack: str) -> dict[str, Any]:
    """The `config:` map of Pulumi.<stack>.yaml, keys as written (e.g. deferred-jobs:image)."""
    document = yaml.safe_load((ROOT / f"Pulumi.{stack}.yaml").read_text())
    return dict(document["config"])


def _as_pulumi_string(value: Any) -> str:
    # Pulumi hands the program every config value as a string; objects as JSON.
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, list | dict):
        return json.dumps(value)
    return str(value)


def run_stack(
    stack: str,
    overrides: Mapping[str, Any] | None = None,
    secrets: Mapping[str, str] | None = None,
    *,
    image: str | None = TEST_IMAGE,
    deployer: Mapping[str, Any] | None = None,
    missing_accounts: Collection[str] = (),
    missing_buckets: Collection[str] = (),
    config: Mapping[str, Any] | None = None,
) -> StackRun:
    """Build the program for `stack` (plus `overrides`, keys without namespace) under mocks,
    with `image` as the image set after the build (None: no image set) and `deployer` as the
    deployer's own settings (default DEPLOYER_CONFIG[stack]; {} for a fresh stack). `config`
    replaces both the stack file and `deployer`: the whole stack configuration, as Pulumi holds
    it (namespaced keys), e.g. what a walk through docs/deploy.md has set."""
    run = StackRun()
    mocks = RecordingMocks(run, missing_accounts, missing_buckets)
    pulumi.runtime.set_mocks(
        mocks, project=PROJECT, stack=stack, preview=False, monitor=RecordingMonitor(mocks, run)
    )
    if config is not None:
        values = dict(config)
    else:
        deployed = DEPLOYER_CONFIG[stack] if deployer is None else deployer
        values = {**stack_config(stack), **deployed}
        if image is not None:
            values[f"{PROJECT}:image"] = image
    values.update({f"{PROJECT}:{key}": value for key, value in (overrides or {}).items()})
    values.update({f"{PROJECT}:{key}": value for key, value in (secrets or {}).items()})
    # The repository's stack names its component after namePrefix (infra/stack.py).
    run.component = f"{values.get(f'{PROJECT}:namePrefix') or NAME_PREFIX}-"
    pulumi.runtime.set_all_config(
        {key: _as_pulumi_string(value) for key, value in values.items()},
        [f"{PROJECT}:{key}" for key in (secrets or {})],
    )
    # Imported after set_mocks, as Pulumi's testing guide asks; the modules do no work at import.
    from infra.stack import deploy_stack

    @pulumi.runtime.test
    def program() -> pulumi.Output[Any]:
        stack_component = deploy_stack()
        return pulumi.Output.all(**stack_component.outputs()).apply(run.outputs.update)

    program()
    return run


@pytest.fixture(scope="session")
def dev() -> StackRun:
    return run_stack("dev")


@pytest.fixture(scope="session")
def dev_with_api() -> StackRun:
    """The dev stack as `pulumi up` deploys it: the core services and the API (its deployer
    names callers)."""
    return run_stack("dev")


@pytest.fixture(scope="session")
def dev_with_console() -> StackRun:
    """The dev stack with the console deployed too (it is deployed when the stack names people
    to use it)."""
    return run_stack("dev", {"consoleOperators": ["user:oncall@acme-media.com"]})


@pytest.fixture(scope="session")
def prod() -> StackRun:
    return run_stack("prod")


@pytest.fixture(params=["dev", "prod"])
def stack(request: pytest.FixtureRequest) -> StackRun:
    """Each example stack in turn (built once per session)."""
    return request.getfixturevalue(request.param)
