"""What a first `pulumi up` on a fresh project needs, asserted on the resources under mocks:
no placeholder image, alerts that wait for their log-based metrics, an explicit Pub/Sub service
agent, a scheduler job created last, backups and point-in-time recovery in production, dead
letters kept 31 days, a startup probe, and the services told they sit behind Cloud Run IAM."""

from __future__ import annotations

from typing import Any

import pytest

from infra import cloudrun
from infra.config import InfraConfigError, image_problems
from services.jobs import metrics, schema
from services.jobs.settings import BEHIND_CLOUD_RUN_IAM
from services.scan.settings import ScanSettings
from services.worker.settings import WorkerSettings
from tests.infra.conftest import PUBSUB_AGENT_EMAIL, StackRun, run_stack

ALERT = "monitoring/alertPolicy:AlertPolicy"
SLEEP = "time:index/sleep:Sleep"
PUBSUB_AGENT = f"serviceAccount:{PUBSUB_AGENT_EMAIL}"
REGISTRY = "europe-west1-docker.pkg.dev/p/deferred-jobs/app"


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
    (sleep,) = stack.of_type(SLEEP)
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
    (sleep,) = stack.of_type(SLEEP)
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
        *(r.name for r in stack.of_type("projects/iAMMember:IAMMember")),
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
    from services.jobs.settings import CommonSettings, EnvReader

    assert CommonSettings.read(EnvReader({"JOBS_PROJECT": "p"})).behind_cloud_run_iam is False
    on = CommonSettings.read(
        EnvReader({"JOBS_PROJECT": "p", BEHIND_CLOUD_RUN_IAM: "true", "K_SERVICE": "s"})
    )
    assert on.behind_cloud_run_iam is True


def test_ttl_fields_are_still_exempt_after_deriving_exemptions() -> None:
    exempt = {(e.collection, e.field) for e in schema.INDEX_EXEMPTIONS}
    assert (schema.JOBS, schema.EXPIRE_AT) in exempt
