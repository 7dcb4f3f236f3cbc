"""What a first `pulumi up` on a fresh project needs, asserted on the resources under mocks,
and the walk through docs/deploy.md's own commands from empty stack configs (at the end):
no placeholder image, alerts that wait for their log-based metrics, an explicit Pub/Sub service
agent, a scheduler job created last, backups and point-in-time recovery in production, dead
letters kept 31 days, a startup probe, and the services told they sit behind Cloud Run IAM."""

from __future__ import annotations

import itertools
import json
import re
import shlex
import string
from collections.abc import Collection, Iterator
from dataclasses import dataclass, field
from typing import Any

import pytest

from infra import cloudrun
from infra.config import SETTINGS, image_problems
from infra.errors import InfraConfigError
from services.edge.settings import BEHIND_CLOUD_RUN_IAM
from services.jobs import schema
from services.scan.settings import ScanSettings
from services.telemetry import metrics
from services.worker.settings import WorkerSettings
from tests.infra.conftest import (
    PROJECT,
    PUBSUB_AGENT_EMAIL,
    ROOT,
    StackRun,
    run_stack,
    stack_config,
)

ALERT = "monitoring/alertPolicy:AlertPolicy"
SLEEP = "time:index/sleep:Sleep"
PUBSUB_AGENT = f"serviceAccount:{PUBSUB_AGENT_EMAIL}"
REGISTRY = "europe-west1-docker.pkg.dev/p/deferred-jobs/app"
GUIDE_TEXT = (ROOT / "docs" / "deploy.md").read_text()


def _container(run: StackRun, key: str) -> dict[str, Any]:
    return dict(
        run.one("cloudrunv2/service:Service", f"{key}-service").state["template"]["containers"][0]
    )


def _envs(run: StackRun, key: str) -> dict[str, str]:
    return {item["name"]: item["value"] for item in _container(run, key)["envs"]}


# --- 1. the image ---------------------------------------------------------------------------


@pytest.mark.parametrize("stack", ["dev", "prod"])
def test_example_stacks_commit_no_image_and_fail_the_preview_naming_it(stack: str) -> None:
    with pytest.raises(InfraConfigError, match="image is required"):
        run_stack(stack, image=None)


@pytest.mark.parametrize(
    "image",
    [
        f"{REGISTRY}@sha256:{'0' * 64}",
        f"{REGISTRY}@sha256:{'f' * 64}",
        f"{REGISTRY}@sha256:<digest>",
        f"{REGISTRY}@sha256:{'0' * 63}",
        f"{REGISTRY}@sha256:{'A1' * 32}",
        f"{REGISTRY}@md5:{'ab' * 16}",
        f"{REGISTRY}:${{TAG}}",
        f"{REGISTRY}:TODO",
        "<image>",
    ],
)
def test_a_placeholder_or_malformed_image_fails_the_preview_naming_the_key(image: str) -> None:
    with pytest.raises(InfraConfigError, match=r"image="):
        run_stack("prod", image=image)


@pytest.mark.parametrize(
    "image", [f"{REGISTRY}@sha256:{'0123456789abcdef' * 4}", f"{REGISTRY}:3f2a9c1", f"{REGISTRY}"]
)
def test_a_real_digest_or_a_tag_is_accepted(image: str) -> None:
    assert image_problems(image) == []
    assert _container(run_stack("dev", image=image), "worker")["image"] == image


# --- 2. alerts on the stack's own metrics wait for them ----------------------------------------


def _metric_type(condition: dict[str, Any]) -> str:
    body = condition.get("conditionThreshold") or condition["conditionAbsent"]
    return str(body["filter"]).split(" AND ")[0].removeprefix('metric.type="').removesuffix('"')


def _alerts_on(run: StackRun, types: set[str]) -> set[str]:
    return {
        policy.name
        for policy in run.of_type(ALERT)
        if any(_metric_type(c) in types for c in policy.state["conditions"])
    }


CREATED = {g.type for g in metrics.SCAN_GAUGES} | {m.type for m in metrics.LOG_METRICS}


def test_alerts_on_log_based_metrics_are_created_after_a_wait_after_every_log_metric(
    stack: StackRun,
) -> None:
    sleep = stack.one(SLEEP, "metrics-usable")
    duration = sleep.state["createDuration"]
    assert duration.endswith("m") and int(duration[:-1]) >= 10  # "up to 10 minutes"
    log_metrics = {f"log-{m.name}" for m in metrics.LOG_METRICS}
    assert log_metrics <= stack.waits_for(sleep.name)
    assert set(sleep.state["triggers"]) == CREATED
    on_log_metrics = _alerts_on(stack, {m.type for m in metrics.LOG_METRICS})
    assert "alert-failed-jobs" in on_log_metrics
    for name in on_log_metrics:
        assert sleep.name in stack.waits_for(name), name


def test_alerts_on_the_scans_gauges_wait_too_and_pubsubs_do_not(stack: StackRun) -> None:
    sleep = stack.one(SLEEP, "metrics-usable")
    descriptors = {f"gauge-{g.short_name}" for g in metrics.SCAN_GAUGES}
    assert descriptors <= stack.waits_for(sleep.name)
    for name in _alerts_on(stack, CREATED):
        assert sleep.name in stack.waits_for(name), name
    builtin = {p.name for p in stack.of_type(ALERT)} - _alerts_on(stack, CREATED)
    assert builtin == {"alert-dead-letters"}  # Pub/Sub's own metric exists already
    assert sleep.name not in stack.waits_for("alert-dead-letters")


# --- 7. the Pub/Sub service agent -----------------------------------------------------------


def test_the_pubsub_service_agent_is_created_and_every_grant_to_it_waits_for_it(
    stack: StackRun,
) -> None:
    (agent,) = stack.of_type("projects/serviceIdentity:ServiceIdentity")
    assert agent.state["service"] == "pubsub.googleapis.com"
    grants = [
        r for r in stack.resources if r.state.get("member") == PUBSUB_AGENT and "role" in r.state
    ]
    assert {g.name for g in grants} == {
        "pubsub-agent-signs-as-pusher",
        "pubsub-agent-publishes-dead-letters",
        "pubsub-agent-subscribes-jobs",
    }
    for grant in grants:
        assert agent.name in stack.waits_for(grant.name), grant.name
    assert "api-pubsub" in stack.waits_for(agent.name)


# --- 8. the scheduler job comes last ---------------------------------------------------------


def test_the_scheduler_job_waits_for_indexes_grants_topic_and_subscription(
    stack: StackRun,
) -> None:
    before = stack.waits_for("scan-trigger")
    required = {
        *(r.name for r in stack.of_type("firestore/index:Index")),
        *(r.name for r in stack.of_type("firestore/field:Field")),
        # The runtimes' project roles (the api's and the console's are theirs alone).
        *(
            r.name
            for r in stack.of_type("projects/iAMMember:IAMMember")
            if r.name.startswith(("scan-", "worker-"))
        ),
        "scan-publishes-jobs",
        "worker-media-bucket",
        "jobs-topic",
        "jobs-push-subscription",
        "scan-service",
        "scan-invoker",
        "worker-service",
        "worker-invoker",
    }
    assert len(required) > 10
    assert required <= before, sorted(required - before)


def test_with_a_created_database_the_scheduler_job_also_waits_for_it() -> None:
    run = run_stack("dev")
    assert "firestore" in run.waits_for("scan-trigger")


# --- 12. point-in-time recovery and backups ---------------------------------------------------


def test_prod_keeps_point_in_time_recovery_and_daily_backups(prod: StackRun) -> None:
    database = prod.one("firestore/database:Database", "firestore").state
    assert database["pointInTimeRecoveryEnablement"] == "POINT_IN_TIME_RECOVERY_ENABLED"
    (schedule,) = prod.of_type("firestore/backupSchedule:BackupSchedule")
    assert schedule.state["retention"] == f"{14 * 86400}s"
    assert "dailyRecurrence" in schedule.state
    assert schedule.state["database"] == "(default)"
    assert "firestore" in prod.waits_for(schedule.name)


def test_dev_has_neither_and_the_defaults_have_both(dev: StackRun) -> None:
    database = dev.one("firestore/database:Database", "firestore").state
    assert database["pointInTimeRecoveryEnablement"] == "POINT_IN_TIME_RECOVERY_DISABLED"
    assert dev.of_type("firestore/backupSchedule:BackupSchedule") == []
    defaults = run_stack("dev", overrides={"pointInTimeRecovery": "", "backupRetentionDays": ""})
    assert (
        defaults.one("firestore/database:Database", "firestore").state[
            "pointInTimeRecoveryEnablement"
        ]
        == "POINT_IN_TIME_RECOVERY_ENABLED"
    )
    (schedule,) = defaults.of_type("firestore/backupSchedule:BackupSchedule")
    assert schedule.state["retention"] == f"{14 * 86400}s"


def test_backup_retention_beyond_fourteen_weeks_fails_naming_the_key() -> None:
    with pytest.raises(InfraConfigError, match="backupRetentionDays=99 is outside"):
        run_stack("prod", overrides={"backupRetentionDays": 99})


# --- 13. dead letters are kept the longest Pub/Sub allows -----------------------------------


def test_dead_letters_are_kept_31_days(stack: StackRun) -> None:
    inspect = stack.one("pubsub/subscription:Subscription", "dead-letter-subscription").state
    assert inspect["messageRetentionDuration"] == f"{31 * 86400}s"


# --- 10. the startup probe ------------------------------------------------------------------


@pytest.mark.parametrize("key", ["scan", "worker"])
def test_each_service_has_a_startup_probe_on_the_port_it_listens_on(
    stack: StackRun, key: str
) -> None:
    container = _container(stack, key)
    probe = container["startupProbe"]
    assert probe["tcpSocket"]["port"] == container["ports"]["containerPort"]
    assert probe["tcpSocket"]["port"] == cloudrun.CONTAINER_PORT
    assert probe["timeoutSeconds"] <= probe["periodSeconds"]
    # Cloud Run allows at most 240 s of startup probing.
    assert probe["periodSeconds"] * probe["failureThreshold"] <= 240


# --- the services are told they run behind Cloud Run's invoker check ------------------------


@pytest.mark.parametrize(
    ("key", "read"), [("scan", ScanSettings.from_env), ("worker", WorkerSettings.from_env)]
)
def test_both_services_run_behind_cloud_run_iam_and_are_told_so(
    stack: StackRun, key: str, read: Any
) -> None:
    environment = _envs(stack, key)
    assert environment[BEHIND_CLOUD_RUN_IAM] == "true"
    # As on Cloud Run, which sets K_SERVICE in every container (the flag requires it).
    on_cloud_run = {k: v for k, v in environment.items() if k.startswith("JOBS_")}
    read({**on_cloud_run, "K_SERVICE": f"deferred-jobs-{key}"})
    # The claim holds only while the invoker check stays on: exactly one run.invoker binding
    # on the service, and no service disables the check.
    service = stack.one("cloudrunv2/service:Service", f"{key}-service").state
    assert not service.get("invokerIamDisabled")
    bindings = [
        r
        for r in stack.of_type("cloudrunv2/serviceIamMember:ServiceIamMember")
        if r.state["name"] == service["name"]
    ]
    assert [b.state["role"] for b in bindings] == ["roles/run.invoker"]


def test_common_settings_read_the_behind_iam_key() -> None:
    from services.edge.settings import CommonSettings, EnvReader

    assert CommonSettings.read(EnvReader({"JOBS_PROJECT": "p"})).behind_cloud_run_iam is False
    on = CommonSettings.read(
        EnvReader({"JOBS_PROJECT": "p", BEHIND_CLOUD_RUN_IAM: "true", "K_SERVICE": "s"})
    )
    assert on.behind_cloud_run_iam is True


def test_ttl_fields_are_still_exempt_after_deriving_exemptions() -> None:
    exempt = {(e.collection, e.field) for e in schema.INDEX_EXEMPTIONS}
    assert (schema.JOBS, schema.EXPIRE_AT) in exempt


# --- the walk: docs/deploy.md's own commands, in order, from empty stack configs --------------
#
# The commands are parsed from the guide itself (its ```sh blocks, in order), so the guide and
# this test cannot drift: a new `pulumi` command the walk does not know fails it, and so does a
# required key the guide never sets. The shell variables come from the guide's first block;
# only what a deployer must bring (their addresses and accounts) and what the registry reports
# (the digest) are supplied here.

PROCEDURE = GUIDE_TEXT.split("## The procedure on a fresh project", 1)[1].split(
    "## Configuration keys", 1
)[0]
REQUIRED = {"gcp:project", "gcp:region", *(f"{s.name}" for s in SETTINGS if s.default is None)}
DIGEST = "sha256:" + "4e5f" * 16  # what `gcloud artifacts docker images describe` reports
# What the person following the guide brings instead of the first block's examples.
THEIR_ALERTS = '["jobs-oncall@acme-media.com"]'
THEIR_CALLER = "media-service@acme-jobs-prod.iam.gserviceaccount.com"
PLACEHOLDER_MARKS = ("example.com", "example.org", "example.net", "TODO", "FIXME", "changeme")


def _logical_lines(block: str) -> list[list[str]]:
    """Each command of a shell block as shell words (continuations joined, comments dropped),
    split at && and ||, keeping the operator as a word."""
    joined = block.replace("\\\n", " ")
    commands: list[list[str]] = []
    for line in joined.splitlines():
        words = shlex.split(line, comments=True)
        current: list[str] = []
        for word in words:
            if word in ("&&", "||"):
                commands.append(current)
                commands.append([word])
                current = []
            else:
                current.append(word)
        if current:
            commands.append(current)
    return commands


def _guide_commands() -> list[list[str]]:
    blocks = re.findall(r"```sh\n(.*?)```", PROCEDURE, re.DOTALL)
    return [command for block in blocks for command in _logical_lines(block)]


def _is_assignment(command: list[str]) -> bool:
    return bool(command) and all(re.match(r"^[A-Z_][A-Z0-9_]*=", w) for w in command)


def _expand(word: str, variables: dict[str, str]) -> str:
    return string.Template(word).substitute(variables)


@dataclass
class PulumiWalk:
    """The Pulumi CLI as the guide drives it, against mocks: a fresh backend (no stack exists)
    and this checkout's stack files."""

    variables: dict[str, str]
    missing_accounts: set[str] = field(default_factory=set)
    stacks: dict[str, dict[str, Any]] = field(default_factory=dict)
    refusals: list[tuple[str, str]] = field(default_factory=list)  # (command, error)
    previews: list[StackRun] = field(default_factory=list)

    def run(self, command: list[str]) -> bool:
        words = [_expand(w, self.variables) for w in command]
        verb, args = words[1], words[2:]
        stack = self._flag(args, "--stack")
        if verb == "stack" and args[0] == "select":
            return args[1] in self.stacks  # a fresh backend has no stack to select
        if verb == "stack" and args[0] == "init":
            name = args[1]
            # `stack init` keeps an existing Pulumi.<stack>.yaml (the committed example).
            path = ROOT / f"Pulumi.{name}.yaml"
            self.stacks[name] = stack_config(name) if path.exists() else {}
            return True
        if verb == "config" and args[0] == "set":
            rest = [a for a in args[1:] if a not in ("--secret", "--path")]
            key, value = rest[0], rest[1]
            self.stacks[stack][key if ":" in key else f"{PROJECT}:{key}"] = value
            return True
        if verb in ("preview", "up"):
            return self.preview(stack, " ".join(words)) is not None
        raise AssertionError(
            f"the walk does not know `{' '.join(words)}`: teach it or fix the guide"
        )

    def preview(self, stack: str, what: str = "pulumi preview") -> StackRun | None:
        try:
            run = run_stack(
                stack, config=self.stacks[stack], missing_accounts=self.missing_accounts
            )
        except InfraConfigError as exc:
            self.refusals.append((what, str(exc)))
            return None
        self.previews.append(run)
        return run

    @staticmethod
    def _flag(args: list[str], name: str) -> str:
        return args[args.index(name) + 1] if name in args else ""


def walk(variables: dict[str, str], missing: Collection[str] = ()) -> PulumiWalk:
    """Run the guide's commands in order; before each `pulumi config set`, also ask for a
    preview, which must refuse naming every required key not yet set."""
    pulumi_walk = PulumiWalk(dict(variables), set(missing))
    commands = _guide_commands()
    skip_next = False
    for index, command in enumerate(commands):
        if skip_next:
            skip_next = False
            continue
        if command in (["&&"], ["||"]):
            continue
        if _is_assignment(command):
            for word in command:
                name, _, value = word.partition("=")
                if "$(" not in value:
                    pulumi_walk.variables.setdefault(name, _expand(value, pulumi_walk.variables))
            continue
        if command[0] != "pulumi":
            continue  # gcloud, cat, …: the cloud side, outside the mocks
        if command[1:3] == ["config", "set"]:
            stack = PulumiWalk._flag(
                [_expand(w, pulumi_walk.variables) for w in command], "--stack"
            )
            pulumi_walk.preview(stack)
        ok = pulumi_walk.run(command)
        following = commands[index + 1 : index + 2]
        if following == [["||"]]:
            skip_next = ok  # `a || b`: b runs only when a failed
        elif not ok and following == [["&&"]]:
            skip_next = True
    return pulumi_walk


def _their_variables(**changes: str) -> dict[str, str]:
    # Supplied first, so the guide's own assignments of these names do not override them.
    return {"DIGEST": DIGEST, **changes}


@pytest.mark.parametrize("stack_name", ["prod", "dev", "staging"])
def test_the_guide_run_literally_from_empty_configs_refuses_each_missing_key_then_previews(
    stack_name: str,
) -> None:
    caller = THEIR_CALLER.replace("prod", stack_name)
    done = walk(
        _their_variables(
            STACK=stack_name,
            ALERT_EMAILS=THEIR_ALERTS,
            API_CALLERS=json.dumps([caller]),
        )
    )
    # Each preview before the guide's `pulumi config set` lines had run named what was missing.
    early = [error for what, error in done.refusals if what == "pulumi preview"]
    config_sets = [c for c in _guide_commands() if c[:3] == ["pulumi", "config", "set"]]
    assert len(early) == len(config_sets), "a preview went through before the guide's last set"
    missing = [set(re.findall(r"(\S+) is required", error)) for error in early]
    assert all(later <= earlier for earlier, later in itertools.pairwise(missing))
    assert len(missing[-1]) == 1  # the last set supplies the last missing key
    first = early[0]
    expected_missing = REQUIRED - {
        key.split(":", 1)[1] if key.startswith(f"{PROJECT}:") else key
        for key in (stack_config(stack_name) if stack_name != "staging" else {})
    }
    for key in expected_missing:
        assert f"{key} is required" in first, (key, first)
    # The guide's own `pulumi preview` and `pulumi up` both went through.
    assert [what for what, _ in done.refusals if what.startswith("pulumi preview --stack")] == []
    assert len(done.previews) == 2, done.refusals
    final = done.previews[-1]
    assert "api_url" in final.outputs
    _assert_no_placeholder(final, done.variables["PROJECT"])
    # What the `up` deploys: request-based billing on every service, the API reachable by
    # its callers wherever they run (IAM admits them), after the APIs have propagated.
    services = final.of_type("cloudrunv2/service:Service")
    assert len(services) == 3
    for service in services:
        assert service.state["template"]["containers"][0]["resources"]["cpuIdle"] is True
        assert "apis-propagated" in final.waits_for(service.name)
    api = final.one("cloudrunv2/service:Service", "api-service").state
    assert api["ingress"] == "INGRESS_TRAFFIC_ALL"
    invokers = {
        r.state["member"]
        for r in final.of_type("cloudrunv2/serviceIamMember:ServiceIamMember")
        if r.state["name"] == api["name"]
    }
    assert invokers == {f"serviceAccount:{caller}"}


def _strings(value: Any) -> Iterator[str]:
    if isinstance(value, str):
        yield value
    elif isinstance(value, dict):
        for item in value.values():
            yield from _strings(item)
    elif isinstance(value, list | tuple):
        for item in value:
            yield from _strings(item)


def _assert_no_placeholder(run: StackRun, project: str) -> None:
    for resource in run.resources:
        for text in _strings(dict(resource.state)):
            assert not any(mark in text for mark in PLACEHOLDER_MARKS), (resource.name, text)
            assert "deferred-jobs-prod" not in text and "deferred-jobs-dev" not in text
        if "project" in resource.state:
            assert resource.state["project"] == project, resource.name


def test_the_guides_example_addresses_are_refused_naming_the_key() -> None:
    # Run with the first block exactly as written: its example alert address is a placeholder.
    done = walk(_their_variables())
    refused = [error for what, error in done.refusals if what.startswith("pulumi preview --stack")]
    assert refused, done.refusals
    assert "alertEmails: 'jobs-oncall@example.com' is a placeholder" in refused[0]
    assert done.previews == []


def test_an_api_caller_that_does_not_exist_yet_fails_the_preview_naming_it() -> None:
    # On a fresh project the producers' accounts may not exist yet: IAM would refuse the
    # binding halfway through `up`; the preview's lookup refuses first.
    done = walk(
        _their_variables(ALERT_EMAILS=THEIR_ALERTS, API_CALLERS=json.dumps([THEIR_CALLER])),
        missing={THEIR_CALLER},
    )
    refused = [error for what, error in done.refusals if what.startswith("pulumi preview --stack")]
    assert refused and "apiCallers" in refused[0] and THEIR_CALLER in refused[0]
    assert done.previews == []


def test_an_empty_caller_list_deploys_no_api_and_nothing_needs_to_exist() -> None:
    done = walk(_their_variables(ALERT_EMAILS="[]", API_CALLERS="[]"))
    assert len(done.previews) == 2, done.refusals
    assert "api_url" not in done.previews[-1].outputs
    assert done.previews[-1].of_type("monitoring/notificationChannel:NotificationChannel") == []


def test_the_walk_sets_every_required_key_through_the_guides_own_commands() -> None:
    set_keys = {
        command[3] for command in _guide_commands() if command[:3] == ["pulumi", "config", "set"]
    }
    assert set_keys >= REQUIRED, sorted(REQUIRED - set_keys)
