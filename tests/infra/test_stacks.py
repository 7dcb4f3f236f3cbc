"""Security and consistency properties of both example stacks, built under Pulumi mocks."""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

import pytest

from infra import env
from infra.config import SECRET_KEYS, SETTINGS_BY_NAME
from services.edge import scan_deployment
from services.scan import settings as scan_keys
from services.telemetry import metrics
from services.worker import settings as worker_keys
from tests.infra.conftest import PROJECT, PROJECT_NUMBER, StackRun, run_stack, stack_config

RUN_SERVICE = "cloudrunv2/service:Service"
RUN_INVOKER = "cloudrunv2/serviceIamMember:ServiceIamMember"
SUBSCRIPTION = "pubsub/subscription:Subscription"
TOPIC = "pubsub/topic:Topic"
ACCOUNT = "serviceaccount/account:Account"
PUBSUB_AGENT = f"serviceAccount:service-{PROJECT_NUMBER}@gcp-sa-pubsub.iam.gserviceaccount.com"


def _strings(value: Any) -> Iterator[str]:
    if isinstance(value, str):
        yield value
    elif isinstance(value, dict):
        for item in value.values():
            yield from _strings(item)
    elif isinstance(value, list | tuple):
        for item in value:
            yield from _strings(item)


def _email(run: StackRun, account: str) -> str:
    return str(run.one(ACCOUNT, f"sa-{account}").state["email"])


def _service(run: StackRun, key: str) -> dict[str, Any]:
    return dict(run.one(RUN_SERVICE, f"{key}-service").state)


def _envs(run: StackRun, key: str) -> dict[str, str]:
    container = _service(run, key)["template"]["containers"][0]
    return {item["name"]: item["value"] for item in container["envs"]}


def _push_subscription(run: StackRun) -> dict[str, Any]:
    return dict(run.one(SUBSCRIPTION, "jobs-push-subscription").state)


def _scheduler_job(run: StackRun) -> dict[str, Any]:
    return dict(run.one("cloudscheduler/job:Job", "scan-trigger").state)


def _seconds(duration: str) -> int:
    assert duration.endswith("s"), duration
    return int(duration[:-1])


def test_both_example_stacks_build_and_export_every_output(stack: StackRun) -> None:
    assert set(stack.outputs) == {
        "scan_url",
        "worker_url",
        "topic",
        "subscription",
        "dead_letter_topic",
        "dead_letter_subscription",
        "scheduler_job",
        "api_url",  # both example stacks' deployers name API callers
    }
    assert all(stack.outputs.values())


def test_no_resource_grants_anything_to_all_users(stack: StackRun) -> None:
    for resource in stack.resources:
        for text in _strings(resource.state):
            assert "allUsers" not in text, resource.name
            assert "allAuthenticatedUsers" not in text, resource.name


@pytest.mark.parametrize(("service", "invoker"), [("scan", "scheduler"), ("worker", "pusher")])
def test_each_cloud_run_service_has_exactly_its_one_invoker(
    stack: StackRun, service: str, invoker: str
) -> None:
    name = _service(stack, service)["name"]
    bindings = [r.state for r in stack.of_type(RUN_INVOKER) if r.state["name"] == name]
    assert [(b["role"], b["member"]) for b in bindings] == [
        ("roles/run.invoker", f"serviceAccount:{_email(stack, invoker)}")
    ]
    # No other IAM grant on the project or elsewhere hands out run.invoker: the scan's, the
    # worker's, and one per API caller on the API.
    invokers = [r for r in stack.resources if r.state.get("role") == "roles/run.invoker"]
    api_callers = [r for r in invokers if r.name.startswith("api-invoker-")]
    assert len(api_callers) >= 1
    assert len(invokers) == 2 + len(api_callers)


def test_services_are_internal_only_and_run_as_their_own_runtime_account(stack: StackRun) -> None:
    for key, account in (("scan", "scan"), ("worker", "worker")):
        service = _service(stack, key)
        assert service["ingress"] == "INGRESS_TRAFFIC_INTERNAL_ONLY"
        assert service["template"]["serviceAccount"] == _email(stack, account)
        assert _envs(stack, key)[env.FUNCTION_TARGET] == key


def test_push_oidc_audience_is_the_worker_url_and_the_endpoint(stack: StackRun) -> None:
    push = _push_subscription(stack)["pushConfig"]
    worker_urls = _service(stack, "worker")["urls"]
    assert push["oidcToken"]["audience"] in worker_urls
    assert push["pushEndpoint"] == push["oidcToken"]["audience"] == stack.outputs["worker_url"]
    assert push["oidcToken"]["serviceAccountEmail"] == _email(stack, "pusher")


def test_scheduler_oidc_audience_is_the_scan_url_and_the_target(stack: StackRun) -> None:
    target = _scheduler_job(stack)["httpTarget"]
    scan_urls = _service(stack, "scan")["urls"]
    assert target["oidcToken"]["audience"] in scan_urls
    assert target["uri"] == target["oidcToken"]["audience"] == stack.outputs["scan_url"]
    assert target["oidcToken"]["serviceAccountEmail"] == _email(stack, "scheduler")
    assert target["httpMethod"] == "POST"


def test_services_expect_the_audiences_and_invokers_that_call_them(stack: StackRun) -> None:
    scan, worker = _envs(stack, "scan"), _envs(stack, "worker")
    assert scan[scan_keys.SCAN_AUDIENCE] == _scheduler_job(stack)["httpTarget"]["uri"]
    assert scan[scan_keys.SCAN_ALLOWED_INVOKERS] == _email(stack, "scheduler")
    assert scan[scan_deployment.TOPIC] == stack.outputs["topic"]
    assert (
        worker[worker_keys.WORKER_AUDIENCE]
        == _push_subscription(stack)["pushConfig"]["pushEndpoint"]
    )
    assert worker[worker_keys.WORKER_ALLOWED_INVOKERS] == _email(stack, "pusher")


def test_scan_time_budget_is_below_the_scheduler_attempt_deadline(stack: StackRun) -> None:
    deadline = _seconds(_scheduler_job(stack)["attemptDeadline"])
    budget = int(_envs(stack, "scan")[scan_deployment.SCAN_TIME_BUDGET_S])
    publish = int(_envs(stack, "scan")[scan_keys.SCAN_PUBLISH_TIMEOUT_S])
    assert 15 <= deadline <= 1800
    assert budget + publish < deadline
    assert _seconds(_service(stack, "scan")["template"]["timeout"]) >= deadline


def test_push_ack_deadline_covers_the_worker_request_timeout(stack: StackRun) -> None:
    ack = _push_subscription(stack)["ackDeadlineSeconds"]
    timeout = _seconds(_service(stack, "worker")["template"]["timeout"])
    assert 10 <= ack <= 600
    assert timeout <= ack
    lease = int(_envs(stack, "worker")[worker_keys.WORKER_LEASE_S])
    assert timeout < lease < ack


def test_the_workers_deadlines_end_a_delivery_before_cloud_run_and_the_lease_do(
    stack: StackRun,
) -> None:
    # Cloud Run answers 504 at its request timeout and lets the handler run on
    # (https://cloud.google.com/run/docs/configuring/request-timeout): the delivery stops first.
    environ = _envs(stack, "worker")
    timeout = _seconds(_service(stack, "worker")["template"]["timeout"])
    max_delivery = int(environ[worker_keys.WORKER_MAX_DELIVERY_S])
    margin = int(environ[worker_keys.WORKER_DEADLINE_MARGIN_S])
    lease = int(environ[worker_keys.WORKER_LEASE_S])
    assert 1 <= max_delivery < timeout
    assert 0 <= margin < lease / 3  # a heartbeat (every third of the lease) before the stop


def test_an_enqueued_job_is_reclaimed_only_after_pub_sub_stopped_redelivering_it(
    stack: StackRun,
) -> None:
    # Every delivery may run to the ack deadline and every wait be the longest backoff
    # (https://cloud.google.com/pubsub/docs/handling-failures): past that the message is
    # dead-lettered or lost, and only then may the scan's reclaimer publish the job again.
    push = _push_subscription(stack)
    attempts = push["deadLetterPolicy"]["maxDeliveryAttempts"]
    backoff = _seconds(push["retryPolicy"]["maximumBackoff"])
    path = attempts * push["ackDeadlineSeconds"] + (attempts - 1) * backoff
    assert int(_envs(stack, "scan")[scan_keys.ENQUEUED_TIMEOUT_S]) > path


def test_dead_letter_policy_and_its_iam_are_present(stack: StackRun) -> None:
    push = _push_subscription(stack)
    dead_topic = stack.one(TOPIC, "dead-letter-topic").state
    policy = push["deadLetterPolicy"]
    assert (
        policy["deadLetterTopic"] == f"projects/{dead_topic['project']}/topics/{dead_topic['name']}"
    )
    assert 5 <= policy["maxDeliveryAttempts"] <= 100
    retry_later = int(_envs(stack, "worker")[worker_keys.WORKER_RETRY_LATER_AFTER_ATTEMPTS])
    assert retry_later < policy["maxDeliveryAttempts"]
    publisher = stack.one(
        "pubsub/topicIAMMember:TopicIAMMember", "pubsub-agent-publishes-dead-letters"
    )
    assert (publisher.state["topic"], publisher.state["role"], publisher.state["member"]) == (
        dead_topic["name"],
        "roles/pubsub.publisher",
        PUBSUB_AGENT,
    )
    subscriber = stack.one(
        "pubsub/subscriptionIAMMember:SubscriptionIAMMember", "pubsub-agent-subscribes-jobs"
    )
    assert (subscriber.state["subscription"], subscriber.state["role"]) == (
        push["name"],
        "roles/pubsub.subscriber",
    )
    assert subscriber.state["member"] == PUBSUB_AGENT
    inspect = stack.one(SUBSCRIPTION, "dead-letter-subscription").state
    assert inspect["topic"] == policy["deadLetterTopic"]
    assert "pushConfig" not in inspect


def test_pubsub_agent_may_sign_push_tokens_only_as_the_push_invoker(stack: StackRun) -> None:
    grants = [
        r.state
        for r in stack.resources
        if r.state.get("role") == "roles/iam.serviceAccountTokenCreator"
    ]
    pusher = stack.one(ACCOUNT, "sa-pusher").state
    assert [(g["serviceAccountId"], g["member"]) for g in grants] == [
        (pusher["name"], PUBSUB_AGENT)
    ]


def test_runtimes_have_least_privilege_and_invokers_have_no_project_roles(
    stack: StackRun,
) -> None:
    project_grants = {
        (r.state["member"], r.state["role"]) for r in stack.of_type("projects/iAMMember:IAMMember")
    }
    # Only the scan writes time series (its gauges) and reads one (the backlog age); the
    # worker's metrics are log-based, and Cloud Run ships both services' logs without
    # roles/logging.logWriter.
    scan, worker, api = (
        f"serviceAccount:{_email(stack, account)}" for account in ("scan", "worker", "api")
    )
    assert project_grants == {
        (api, "roles/datastore.user"),  # the API reads and writes job records only
        (scan, "roles/datastore.user"),
        (scan, "roles/monitoring.metricWriter"),
        (scan, "roles/monitoring.viewer"),  # the push subscription's oldest unacked age
        (worker, "roles/datastore.user"),
    }
    publisher = stack.one("pubsub/topicIAMMember:TopicIAMMember", "scan-publishes-jobs").state
    assert publisher["topic"] == stack.outputs["topic"]
    assert publisher["member"] == f"serviceAccount:{_email(stack, 'scan')}"
    media = stack.one("storage/bucketIAMMember:BucketIAMMember", "worker-media-bucket").state
    assert media["member"] == f"serviceAccount:{_email(stack, 'worker')}"
    assert media["bucket"] == _envs(stack, "worker")[worker_keys.MEDIA_BUCKET]
    role = stack.one("projects/iAMCustomRole:IAMCustomRole", "media-cleaner-role").state
    assert media["role"] == role["name"]
    assert sorted(role["permissions"]) == [
        "storage.buckets.get",  # bucket.exists(), when every object was already gone
        "storage.objects.delete",
        "storage.objects.get",
        "storage.objects.list",
    ]


def _alert_metric_types(run: StackRun) -> list[str]:
    types = []
    for policy in run.of_type("monitoring/alertPolicy:AlertPolicy"):
        for condition in policy.state["conditions"]:
            body = condition.get("conditionThreshold") or condition["conditionAbsent"]
            clause = body["filter"].split(" AND ")[0]
            assert clause.startswith('metric.type="'), clause
            types.append(clause[len('metric.type="') : -1])
    return types


def test_every_metric_an_alert_references_is_one_the_system_emits(stack: StackRun) -> None:
    emitted = {g.type for g in metrics.SCAN_GAUGES} | {m.type for m in metrics.LOG_METRICS}
    builtin = {"pubsub.googleapis.com/subscription/num_undelivered_messages"}
    referenced = _alert_metric_types(stack)
    assert len(referenced) == 11
    assert set(referenced) <= emitted | builtin
    assert {
        metrics.NEWER_RECORDS.type,
        metrics.UNKNOWN_ACTIONS.type,
        metrics.CLOCK_SKEW_REFUSALS.type,
        metrics.OLDEST_OVERDUE_AGE.type,
        metrics.STUCK_CLAIMS.type,
        metrics.FAILED_JOBS.type,
        metrics.STALE_ENQUEUED.type,
    } <= set(referenced)


def test_descriptors_and_log_metrics_cover_every_declared_metric(stack: StackRun) -> None:
    descriptors = {
        r.state["type"] for r in stack.of_type("monitoring/metricDescriptor:MetricDescriptor")
    }
    assert descriptors == {g.type for g in metrics.SCAN_GAUGES}
    log_metrics = {r.state["name"]: r.state for r in stack.of_type("logging/metric:Metric")}
    assert set(log_metrics) == {m.name for m in metrics.LOG_METRICS}
    for metric in metrics.LOG_METRICS:
        state = log_metrics[metric.name]
        assert f'jsonPayload.{metrics.LOG_EVENT}="{metric.event}"' in state["filter"]
        if metric.value_field:
            assert state["valueExtractor"] == f"EXTRACT(jsonPayload.{metric.value_field})"
            assert state["metricDescriptor"]["valueType"] == "DISTRIBUTION"
            assert "bucketOptions" in state
        else:
            assert state["metricDescriptor"]["valueType"] == "INT64"


def test_dead_letter_alert_watches_the_inspection_subscription(stack: StackRun) -> None:
    policy = stack.one("monitoring/alertPolicy:AlertPolicy", "alert-dead-letters").state
    condition = policy["conditions"][0]["conditionThreshold"]
    assert f'subscription_id="{stack.outputs["dead_letter_subscription"]}"' in condition["filter"]
    assert condition["comparison"] == "COMPARISON_GT"
    assert condition["thresholdValue"] == 0


def test_scan_absent_alert_waits_three_scheduler_intervals(stack: StackRun) -> None:
    policy = stack.one("monitoring/alertPolicy:AlertPolicy", "alert-scan-absent").state
    absent = policy["conditions"][0]["conditionAbsent"]
    interval = int(_envs(stack, "scan")[scan_deployment.SCAN_INTERVAL_S])
    assert _seconds(absent["duration"]) >= 3 * interval


def test_prod_is_protected_and_larger_than_dev(dev: StackRun, prod: StackRun) -> None:
    for key in ("scan", "worker"):
        assert _service(prod, key)["deletionProtection"] is True
        assert _service(dev, key)["deletionProtection"] is False
    dev_db = dev.one("firestore/database:Database", "firestore").state
    prod_db = prod.one("firestore/database:Database", "firestore").state
    assert prod_db["deleteProtectionState"] == "DELETE_PROTECTION_ENABLED"
    assert dev_db["deleteProtectionState"] == "DELETE_PROTECTION_DISABLED"
    prod_max = _service(prod, "worker")["template"]["scaling"]["maxInstanceCount"]
    dev_max = _service(dev, "worker")["template"]["scaling"]["maxInstanceCount"]
    assert prod_max > dev_max
    # Both scan every minute, paced (Cloud Scheduler's finest cadence; docs/scan.md, "Modes").
    assert _scheduler_job(prod)["schedule"] == _scheduler_job(dev)["schedule"] == "* * * * *"
    assert len(prod.of_type("monitoring/notificationChannel:NotificationChannel")) == 2
    assert dev.of_type("monitoring/notificationChannel:NotificationChannel") == []


@pytest.mark.parametrize("name", ["dev", "prod"])
def test_example_stacks_use_only_known_keys(name: str) -> None:
    for key in stack_config(name):
        namespace, _, setting = key.partition(":")
        if namespace == "gcp":
            assert setting in ("project", "region"), key
            continue
        assert namespace == PROJECT, key
        assert setting in SETTINGS_BY_NAME or setting in SECRET_KEYS, key


def test_name_prefix_renames_every_named_resource() -> None:
    run = run_stack("dev", overrides={"namePrefix": "dj-stage"})
    assert run.outputs["topic"] == "dj-stage-jobs"
    assert run.outputs["scan_url"].startswith("https://dj-stage-scan-")
    assert {r.state["accountId"] for r in run.of_type(ACCOUNT)} == {
        "dj-stage-scan-rt",
        "dj-stage-worker-rt",
        "dj-stage-scheduler",
        "dj-stage-pusher",
        "dj-stage-api-rt",
    }


def test_every_alert_filter_names_a_metric_and_a_resource_type(stack: StackRun) -> None:
    # Cloud Monitoring requires both in an alert condition's filter.
    for policy in stack.of_type("monitoring/alertPolicy:AlertPolicy"):
        for condition in policy.state["conditions"]:
            body = condition.get("conditionThreshold") or condition["conditionAbsent"]
            assert 'resource.type="' in body["filter"], policy.name


def test_gauge_alerts_watch_the_resource_the_scan_writes_its_gauges_on() -> None:
    from infra.monitoring import SCAN_GAUGE_RESOURCE
    from services.edge.monitoring import CloudMonitoringSink
    from services.telemetry.metrics import ScanReport

    report = ScanReport("run-1", 0.0, 0, 0, 0, 0, 0, 0, 0.0)
    series = CloudMonitoringSink(client=None, project="p").time_series(report)
    assert {s.resource.type for s in series} == {SCAN_GAUGE_RESOURCE}
    assert {s.metric.type for s in series} == {g.type for g in metrics.SCAN_GAUGES}


def test_dashboard_charts_every_gauge_log_metric_and_both_subscriptions(stack: StackRun) -> None:
    dashboard = json.loads(
        stack.one("monitoring/dashboard:Dashboard", "dashboard").state["dashboardJson"]
    )
    filters = [
        data["timeSeriesQuery"]["timeSeriesFilter"]["filter"]
        for widget in dashboard["gridLayout"]["widgets"]
        for data in widget["xyChart"]["dataSets"]
    ]
    charted = {f.split('"')[1] for f in filters}
    assert {g.type for g in metrics.SCAN_GAUGES} | {m.type for m in metrics.LOG_METRICS} <= charted
    for subscription in ("subscription", "dead_letter_subscription"):
        assert any(f'subscription_id="{stack.outputs[subscription]}"' in f for f in filters)


def test_stale_enqueued_alert_watches_the_scans_gauge_for_the_configured_minutes(
    stack: StackRun,
) -> None:
    policy = stack.one("monitoring/alertPolicy:AlertPolicy", "alert-stale-enqueued").state
    condition = policy["conditions"][0]["conditionThreshold"]
    assert metrics.STALE_ENQUEUED.type in condition["filter"]
    assert (condition["comparison"], condition["thresholdValue"]) == ("COMPARISON_GT", 0)
    assert _seconds(condition["duration"]) >= 60
    assert "runbook" in policy["documentation"]["content"].lower()
