"""The stack configuration: every `pulumi.Config` read of the program happens here.

`load_config()` reads `Pulumi.<stack>.yaml` through Pulumi; `parse_config()` turns plain values
into a frozen, typed `StackConfig` and rejects anything Google would reject later (or accept and
misbehave with), naming the key and its allowed range. Every key, its default and its range is
in `SETTINGS`; docs/deploy.md lists the same table.
"""

from __future__ import annotations

import json
import re
import zoneinfo
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any, Literal

import pulumi

from infra.cron import longest_gap_s
from infra.errors import CronError, InfraConfigError
from infra.locations import location_problems
from services.edge.resource_names import NAME_PREFIX
from services.edge.scan_deployment import MIN_ENQUEUED_TIMEOUT_S
from services.edge.scheduler_job import (
    MAX_ATTEMPT_DEADLINE_S,
    MAX_RETRY_COUNT,
    MIN_ATTEMPT_DEADLINE_S,
)
from services.jobs.budget import PACED_MARGIN_S, SCAN_MODES
from services.jobs.durations import DurationError, parse_duration
from services.jobs.http_targets import HttpTarget, TargetsError, targets_from_mapping
from services.jobs.shard import MAX_SHARDS
from services.scan import cadence
from services.worker.deadline import HEARTBEATS_PER_LEASE
from services.worker.settings import (
    DEFAULT_DEADLINE_MARGIN_S,
    DEFAULT_MAX_DELIVERY_S,
    MAX_MAX_DELIVERY_S,
)

# "duration": a key ending in S, a number of whole seconds written in the one duration grammar
# (services/jobs/durations.py: 600, 600s, 10m, 1h30m, 2w), as the services read their JOBS_*_S.
# "object": a YAML mapping (Pulumi hands it to the program as JSON text).
Kind = Literal["int", "duration", "bool", "str", "list", "object"]

# Cloud Monitoring accepts a metric-absence duration of at most 23 h 30 min (inferred from the
# console's limit); the "scan runs absent" alert waits three scan intervals.
MAX_ABSENCE_S = 23 * 3600 + 30 * 60
ABSENT_INTERVALS = 3


@dataclass(frozen=True)
class Setting:
    """One configuration key: its type, default (None: required) and inclusive range."""

    name: str
    kind: Kind
    default: Any
    low: int | None = None
    high: int | None = None
    doc: str = ""


_DAY = 86_400

# The Cloud Run services whose billing a stack chooses (`<service>InstanceBilling`).
BILLED_SERVICES = ("scan", "worker", "api", "console")

SETTINGS: tuple[Setting, ...] = (
    Setting(
        "image",
        "str",
        None,
        doc="container image for both services, set per stack after the build (digest preferred)",
    ),
    Setting("namePrefix", "str", NAME_PREFIX, doc="prefix of every resource name"),
    Setting("mediaBucket", "str", None, doc="bucket whose objects the worker may delete"),
    Setting("createDatabase", "bool", True, doc="false adopts an existing database"),
    Setting("databaseLocation", "str", "", doc="Firestore location; empty = gcp:region"),
    Setting("deletionProtection", "bool", True, doc="Cloud Run and Firestore delete protection"),
    Setting(
        "pointInTimeRecovery", "bool", True, doc="Firestore PITR: 7 days of versions to read back"
    ),
    Setting(
        "backupRetentionDays",
        "int",
        14,
        0,
        98,
        "days each daily Firestore backup is kept; 0: no backup schedule",
    ),
    # The scan trigger's defaults are services/local's too (services/scan/cadence.py), its
    # limits Cloud Scheduler's (services/edge/scheduler_job.py, which the local one enforces too).
    Setting("schedule", "str", cadence.DEFAULT_SCHEDULE, doc="unix-cron schedule of the scan"),
    Setting("timeZone", "str", cadence.DEFAULT_TIME_ZONE, doc="time zone of the schedule"),
    Setting(
        "scanAttemptDeadlineS",
        "duration",
        cadence.DEFAULT_ATTEMPT_DEADLINE_S,
        int(MIN_ATTEMPT_DEADLINE_S),
        int(MAX_ATTEMPT_DEADLINE_S),
        "Cloud Scheduler attempt deadline",
    ),
    Setting(
        "scanRetryCount",
        "int",
        cadence.DEFAULT_RETRY_COUNT,
        0,
        MAX_RETRY_COUNT,
        "Cloud Scheduler retries of a failed scan",
    ),
    Setting(
        "scanTimeBudgetS",
        "duration",
        cadence.DEFAULT_RUN_TIME_BUDGET_S,
        1,
        1799,
        "scan run time budget (< attempt deadline); paced: how long a run works "
        f"(<= the schedule's interval - {PACED_MARGIN_S:g})",
    ),
    Setting(
        "scanMaxPerRun",
        "int",
        cadence.DEFAULT_RUN_MAX_PER_RUN,
        1,
        100_000,
        "jobs one scan run claims at most (12,000: 200 jobs/s at one run a minute)",
    ),
    Setting(
        "scanMode", "str", cadence.DEFAULT_SCAN_MODE, doc="one-pass or paced (docs/scan.md, Modes)"
    ),
    Setting(
        "scanPollS",
        "duration",
        cadence.DEFAULT_RUN_POLL_S,
        1,
        60,
        "paced: how often a run looks for newly due work",
    ),
    Setting(
        "scanEndWhenIdle",
        "bool",
        cadence.DEFAULT_RUN_END_WHEN_IDLE,
        doc="paced: a run ends as soon as nothing is due (cheap); false: it polls its whole "
        "time budget (lower due-to-claim latency, an instance busy all the time)",
    ),
    Setting(
        "scanPartitions",
        "int",
        1,
        1,
        MAX_SHARDS,
        "Scheduler jobs, each claiming its own group of shards (<= shards)",
    ),
    Setting(
        "scanPublishTimeoutS", "duration", 30, 1, 600, "how long a scan waits for its publishes"
    ),
    Setting("claimTimeoutS", "duration", 600, 16, _DAY, "claim age before the reclaimer takes it"),
    Setting("workerRequestTimeoutS", "duration", 240, 1, 600, "worker Cloud Run request timeout"),
    Setting("workerLeaseS", "duration", 270, 5, 600, "worker lease (request timeout < it < ack)"),
    Setting(
        "workerMaxDeliveryS",
        "duration",
        0,
        0,
        MAX_MAX_DELIVERY_S,
        "longest one delivery acts (< workerRequestTimeoutS); 0: 3/4 of it, at most "
        f"{DEFAULT_MAX_DELIVERY_S}",
    ),
    Setting(
        "workerDeadlineMarginS",
        "duration",
        0,
        0,
        600,
        "how long before its lease ends an action stops (< workerLeaseS / 3); 0: "
        f"{DEFAULT_DEADLINE_MARGIN_S}, or less for a short lease",
    ),
    Setting(
        "retryLaterDelayS", "duration", 30 * _DAY, 60, 3650 * _DAY, "delay of a retry-later outcome"
    ),
    Setting(
        "retryLaterAfterAttempts", "int", 4, 1, 99, "deliveries before the worker defers a job"
    ),
    Setting("pushAckDeadlineS", "duration", 300, 10, 600, "push ack deadline = push HTTP timeout"),
    Setting("deadLetterAttempts", "int", 10, 5, 100, "deliveries before dead-lettering"),
    Setting("minBackoffS", "duration", 10, 0, 600, "Pub/Sub retry minimum backoff"),
    Setting("maxBackoffS", "duration", 600, 0, 600, "Pub/Sub retry maximum backoff"),
    Setting("scanMinInstances", "int", 0, 0, 100, "scan minimum instances"),
    Setting("scanMaxInstances", "int", 1, 1, 100, "scan maximum instances"),
    Setting("scanConcurrency", "int", 1, 1, 1000, "scan requests per instance"),
    Setting("workerMinInstances", "int", 0, 0, 1000, "worker minimum instances"),
    Setting("workerMaxInstances", "int", 10, 1, 1000, "worker maximum instances"),
    Setting("workerConcurrency", "int", 10, 1, 1000, "worker requests per instance"),
    # Request-based billing unless a stack decides otherwise, per service: docs/deploy.md
    # ("Billing: request-based or instance-based") has the arithmetic of when it is cheaper.
    *(
        Setting(
            f"{service}InstanceBilling",
            "bool",
            False,
            doc=f"{service}: bill the instance's whole life (cheaper only when it is busy > 75 % "
            "of it); false: request-based billing",
        )
        for service in BILLED_SERVICES
    ),
    Setting(
        "cpu",
        "str",
        "1",
        doc="CPU limit of each service (below 1: every concurrency 1, request-based billing)",
    ),
    Setting("memory", "str", "512Mi", doc="memory limit of each service"),
    Setting("overdueAgeSloS", "duration", 3600, 1, 365 * _DAY, "oldest overdue age SLO"),
    Setting("overdueForMin", "int", 15, 1, 1410, "minutes above the SLO before alerting"),
    Setting("stuckClaimsForMin", "int", 15, 1, 1410, "minutes of stuck claims before alerting"),
    Setting(
        "enqueuedTimeoutS",
        "duration",
        0,
        0,
        7 * _DAY,
        "enqueued longer than this, a job is stale; 0: Pub/Sub's retry path + 1 h",
    ),
    Setting(
        "staleEnqueuedForMin", "int", 30, 1, 1410, "minutes of stale enqueued jobs before alerting"
    ),
    Setting(
        "terminalRetentionDays",
        "int",
        30,
        1,
        3650,
        "days a completed, cancelled or failed job is kept (TTL)",
    ),
    # Both name accounts of the deployer's own organisation, so no stack file commits them:
    # required per stack like `image` (an explicit [] is a decision, not an omission).
    Setting("alertEmails", "list", None, doc="email notification channels; [] for none"),
    Setting(
        "apiCallers",
        "list",
        None,
        doc="service accounts that may call the api; [] for no api service",
    ),
    Setting(
        "apiTrustedCallers",
        "list",
        (),
        doc="apiCallers that may act on every job, not only those they scheduled",
    ),
    Setting(
        "apiIngress",
        "str",
        "all",
        doc="all: reachable by every admitted caller, IAM-authenticated; internal: only from "
        "this project's VPC networks (callers need VPC egress, docs/deploy.md)",
    ),
    Setting("apiMaxInstances", "int", 10, 1, 1000, "api maximum instances"),
    Setting("apiConcurrency", "int", 80, 1, 1000, "api requests per instance"),
    Setting("slackChannel", "str", "", doc="Slack channel; needs the secret slackAuthToken"),
    # The web console behind IAP (docs/deploy.md, "The console"): people, not services.
    Setting(
        "consoleViewers",
        "list",
        (),
        doc="user:EMAIL or serviceAccount:EMAIL who may view the console; none of both lists: "
        "no console",
    ),
    Setting(
        "consoleOperators",
        "list",
        (),
        doc="user:EMAIL or serviceAccount:EMAIL who may view and act in the console",
    ),
    Setting("consoleMaxInstances", "int", 2, 1, 100, "console maximum instances"),
    Setting(
        "budgetAmount",
        "int",
        0,
        0,
        1_000_000,
        "monthly budget in the billing account's currency; alerts at 50/90/100 %; 0: no budget",
    ),
    Setting(
        "billingAccount",
        "str",
        "",
        doc="billing account ID (XXXXXX-XXXXXX-XXXXXX) the budget is created on",
    ),
    Setting(
        "shards",
        "int",
        1,
        1,
        MAX_SHARDS,
        "jobs index shards (JOBS_SHARDS) and the index set; change only as docs/capacity.md says",
    ),
    Setting(
        "httpTargets",
        "object",
        {},
        doc="services the HTTP action may call: name -> {url, audience, rate, concurrency, "
        "timeout_s, cloudRunService} (docs/actions.md)",
    ),
)

SETTINGS_BY_NAME = {setting.name: setting for setting in SETTINGS}
SECRET_KEYS = ("slackAuthToken",)

_NAME_PREFIX = re.compile(r"^[a-z][a-z0-9-]{0,18}[a-z0-9]$")
# A pinned image ends in @sha256:<64 lowercase hex>
# (https://cloud.google.com/artifact-registry/docs/docker/names).
_DIGEST = re.compile(r"^sha256:[0-9a-f]{64}$")
# What a hand-written placeholder looks like: <digest>, ${TAG}, {{image}}, "...", "TODO".
_PLACEHOLDER_MARKS = ("<", ">", "$", "{", "}", "...", "\N{HORIZONTAL ELLIPSIS}", " ")
_PLACEHOLDER_WORDS = ("todo", "fixme", "changeme", "placeholder", "replace-me", "replace_me")
_EMAIL = re.compile(r"^[^@\s]+@[^@\s]+\.[^@\s]+$")
# Domains reserved for examples and tests (RFC 2606, RFC 6761): an address there is a
# placeholder nobody receives mail at, and an account there belongs to no project.
_PLACEHOLDER_DOMAINS = ("example.com", "example.net", "example.org")
_PLACEHOLDER_TLDS = (".example", ".invalid", ".test", ".localhost")
# Cloud Run's CPU limits: 0.08 to 8 vCPU, whole numbers above 1; below 1 vCPU the maximum
# concurrency must be 1 (https://cloud.google.com/run/docs/configuring/services/cpu).
_CPU = re.compile(r"^(?:(\d+(?:\.\d{1,3})?)|(\d+)m)$")
MIN_CPU = 0.08
MAX_CPU = 8
# A service account's email: an account ID of 6-30 characters @ a gserviceaccount.com domain.
_SERVICE_ACCOUNT = re.compile(
    r"^[a-z0-9][a-z0-9-]{4,28}[a-z0-9]@[a-z0-9.-]+\.gserviceaccount\.com\Z"
)


# A target's stack-only field: the Cloud Run service of this project it is (`NAME`, in the
# stack's region, or `REGION/NAME`), so the worker's account gets roles/run.invoker on it. Not
# derived from a *.run.app URL: such a URL may belong to another project, and its service name
# is not reliably in it. Never passed to the services (JOBS_HTTP_TARGETS does not carry it).
CLOUD_RUN_SERVICE_FIELD = "cloudRunService"
# Cloud Run service names: lowercase letters, digits and '-', a letter first, at most 49.
_RUN_SERVICE = re.compile(
    r"^(?:(?P<region>[a-z]+-[a-z]+\d+)/)?(?P<name>[a-z](?:[a-z0-9-]{0,47}[a-z0-9])?)\Z"
)


@dataclass(frozen=True)
class RunTarget:
    """An HTTP target that is a Cloud Run service of the stack's project."""

    target: str
    region: str | None  # None: the stack's region
    service: str


@dataclass(frozen=True)
class StackTargets:
    """`httpTargets` validated: the targets as the services read them, and the Cloud Run ones."""

    targets: Mapping[str, HttpTarget]
    run_services: tuple[RunTarget, ...] = ()


def stack_targets(raw: Any, errors: list[str]) -> StackTargets:
    """`httpTargets` through the services' own parser (`targets_from_mapping`), every problem
    named `httpTargets.<name>.<field>`; `cloudRunService` is the stack's own field."""
    if not raw:
        return StackTargets({})
    if not isinstance(raw, Mapping):
        errors.append("httpTargets: expected a mapping of target name -> settings")
        return StackTargets({})
    plain: dict[str, Any] = {}
    services: list[RunTarget] = []
    for name, settings in raw.items():
        fields = dict(settings) if isinstance(settings, Mapping) else settings
        service = fields.pop(CLOUD_RUN_SERVICE_FIELD, None) if isinstance(fields, dict) else None
        plain[name] = fields
        if service is None:
            continue
        match = _RUN_SERVICE.match(service) if isinstance(service, str) else None
        if match is None:
            errors.append(
                f"httpTargets.{name}.{CLOUD_RUN_SERVICE_FIELD}: expected a Cloud Run service "
                "name of this project (NAME or REGION/NAME)"
            )
            continue
        services.append(RunTarget(str(name), match["region"], match["name"]))
    try:
        targets = targets_from_mapping(plain, source="httpTargets")
    except TargetsError as exc:
        errors.extend(exc.problems)
        return StackTargets({})
    return StackTargets(targets, tuple(services))


@dataclass(frozen=True)
class Scaling:
    min_instances: int
    max_instances: int
    concurrency: int
    # False: request-based billing (CPU only while a request is served, and billed so);
    # True: instance-based (CPU and billing for the instance's whole life).
    instance_billing: bool = False


# The console serves people's page views: many light requests per instance.
CONSOLE_CONCURRENCY = 80
API_INGRESS = {
    "all": "INGRESS_TRAFFIC_ALL",
    "internal": "INGRESS_TRAFFIC_INTERNAL_ONLY",
}
# Who may be granted the console: IAP signs the principal's email into its JWT and the console
# checks roles by that email, so a group (whose members IAP admits under their own emails)
# would pass IAP and then be refused by the console.
CONSOLE_MEMBER_KINDS = ("user", "serviceAccount")
# A budget's alert thresholds, fractions of the amount (on actual spend).
BUDGET_THRESHOLDS = (0.5, 0.9, 1.0)
_BILLING_ACCOUNT = re.compile(r"^[0-9A-F]{6}-[0-9A-F]{6}-[0-9A-F]{6}\Z")


@dataclass(frozen=True)
class Budget:
    amount: int
    billing_account: str


@dataclass(frozen=True)
class StackConfig:
    """The validated configuration of one stack."""

    project: str
    region: str
    image: str
    name_prefix: str
    media_bucket: str
    create_database: bool
    database_location: str
    deletion_protection: bool
    point_in_time_recovery: bool
    backup_retention_days: int
    schedule: str
    time_zone: str
    scan_interval_s: int  # the schedule's longest gap between two runs
    scan_attempt_deadline_s: int
    scan_retry_count: int
    scan_time_budget_s: int
    scan_max_per_run: int
    scan_publish_timeout_s: int
    claim_timeout_s: int
    worker_request_timeout_s: int
    worker_lease_s: int
    worker_max_delivery_s: int
    worker_deadline_margin_s: int
    retry_later_delay_s: int
    retry_later_after_attempts: int
    push_ack_deadline_s: int
    dead_letter_attempts: int
    min_backoff_s: int
    max_backoff_s: int
    scan_scaling: Scaling
    worker_scaling: Scaling
    cpu: str
    memory: str
    overdue_age_slo_s: int
    overdue_for_min: int
    stuck_claims_for_min: int
    enqueued_timeout_s: int
    stale_enqueued_for_min: int
    terminal_retention_days: int
    alert_emails: tuple[str, ...]
    slack_channel: str
    slack_auth_token: pulumi.Output[str] | None = None
    api_callers: tuple[str, ...] = ()
    api_trusted_callers: tuple[str, ...] = ()
    api_scaling: Scaling = Scaling(0, 10, 80)
    shards: int = 1
    scan_mode: str = "paced"
    scan_poll_s: int = 5
    scan_end_when_idle: bool = True
    scan_partitions: int = 1
    http_targets: StackTargets = StackTargets({})
    api_ingress: str = "all"
    console_viewers: tuple[str, ...] = ()
    console_operators: tuple[str, ...] = ()
    console_scaling: Scaling = Scaling(0, 2, CONSOLE_CONCURRENCY)
    budget: Budget | None = None

    @property
    def console_enabled(self) -> bool:
        """Whether the stack deploys the console (someone may use it)."""
        return bool(self.console_viewers or self.console_operators)

    @property
    def terminal_retention_s(self) -> int:
        return self.terminal_retention_days * _DAY

    @property
    def scan_absent_s(self) -> int:
        """How long no scan run may be seen before the absence alert fires (>= 2 minutes)."""
        minutes = -(-ABSENT_INTERVALS * self.scan_interval_s // 60)
        return max(120, minutes * 60)


def load_config() -> StackConfig:
    """Read this stack's configuration through Pulumi and validate it."""
    cfg = pulumi.Config()
    gcp = pulumi.Config("gcp")
    raw: dict[str, Any] = {setting.name: cfg.get(setting.name) for setting in SETTINGS}
    raw["gcp:project"] = gcp.get("project")
    raw["gcp:region"] = gcp.get("region")
    token = cfg.require_secret("slackAuthToken") if raw.get("slackChannel") else None
    return parse_config(raw, slack_auth_token=token)


def parse_config(
    raw: Mapping[str, Any], *, slack_auth_token: pulumi.Output[str] | None = None
) -> StackConfig:
    """Validate plain values (strings as Pulumi stores them, or YAML scalars) into a StackConfig.

    Every problem is collected, so one failed preview names every bad key at once.
    """
    errors: list[str] = []
    values = {setting.name: _coerce(setting, raw.get(setting.name), errors) for setting in SETTINGS}
    project = _require_gcp(raw, "gcp:project", errors)
    region = _require_gcp(raw, "gcp:region", errors)
    interval = _check_cross_fields(values, errors)
    errors.extend(location_problems(region, values["databaseLocation"]))
    targets = stack_targets(values["httpTargets"], errors)
    if errors:
        raise InfraConfigError("invalid stack configuration:\n  " + "\n  ".join(errors))
    return StackConfig(
        project=project,
        region=region,
        image=values["image"],
        name_prefix=values["namePrefix"],
        media_bucket=values["mediaBucket"],
        create_database=values["createDatabase"],
        database_location=values["databaseLocation"] or region,
        deletion_protection=values["deletionProtection"],
        point_in_time_recovery=values["pointInTimeRecovery"],
        backup_retention_days=values["backupRetentionDays"],
        schedule=values["schedule"],
        time_zone=values["timeZone"],
        scan_interval_s=interval,
        scan_attempt_deadline_s=values["scanAttemptDeadlineS"],
        scan_retry_count=values["scanRetryCount"],
        scan_time_budget_s=values["scanTimeBudgetS"],
        scan_max_per_run=values["scanMaxPerRun"],
        scan_publish_timeout_s=values["scanPublishTimeoutS"],
        claim_timeout_s=values["claimTimeoutS"],
        worker_request_timeout_s=values["workerRequestTimeoutS"],
        worker_lease_s=values["workerLeaseS"],
        worker_max_delivery_s=worker_max_delivery_s(values),
        worker_deadline_margin_s=worker_deadline_margin_s(values),
        retry_later_delay_s=values["retryLaterDelayS"],
        retry_later_after_attempts=values["retryLaterAfterAttempts"],
        push_ack_deadline_s=values["pushAckDeadlineS"],
        dead_letter_attempts=values["deadLetterAttempts"],
        min_backoff_s=values["minBackoffS"],
        max_backoff_s=values["maxBackoffS"],
        scan_scaling=Scaling(
            values["scanMinInstances"],
            values["scanMaxInstances"],
            values["scanConcurrency"],
            values["scanInstanceBilling"],
        ),
        worker_scaling=Scaling(
            values["workerMinInstances"],
            values["workerMaxInstances"],
            values["workerConcurrency"],
            values["workerInstanceBilling"],
        ),
        cpu=values["cpu"],
        memory=values["memory"],
        overdue_age_slo_s=values["overdueAgeSloS"],
        overdue_for_min=values["overdueForMin"],
        stuck_claims_for_min=values["stuckClaimsForMin"],
        enqueued_timeout_s=values["enqueuedTimeoutS"] or _auto_enqueued_timeout_s(values),
        stale_enqueued_for_min=values["staleEnqueuedForMin"],
        terminal_retention_days=values["terminalRetentionDays"],
        alert_emails=tuple(values["alertEmails"]),
        slack_channel=values["slackChannel"],
        slack_auth_token=slack_auth_token,
        api_callers=tuple(values["apiCallers"]),
        api_trusted_callers=tuple(values["apiTrustedCallers"]),
        api_scaling=Scaling(
            0, values["apiMaxInstances"], values["apiConcurrency"], values["apiInstanceBilling"]
        ),
        shards=values["shards"],
        scan_mode=values["scanMode"],
        scan_poll_s=values["scanPollS"],
        scan_end_when_idle=values["scanEndWhenIdle"],
        scan_partitions=values["scanPartitions"],
        http_targets=targets,
        api_ingress=values["apiIngress"],
        console_viewers=tuple(values["consoleViewers"]),
        console_operators=tuple(values["consoleOperators"]),
        console_scaling=Scaling(
            0, values["consoleMaxInstances"], CONSOLE_CONCURRENCY, values["consoleInstanceBilling"]
        ),
        budget=(
            Budget(values["budgetAmount"], values["billingAccount"])
            if values["budgetAmount"]
            else None
        ),
    )


def _require_gcp(raw: Mapping[str, Any], key: str, errors: list[str]) -> str:
    value = raw.get(key)
    if not value:
        errors.append(f"{key} is required")
        return ""
    return str(value)


def _coerce(setting: Setting, value: Any, errors: list[str]) -> Any:
    """One key's value in its type and range, or its default; appends to `errors` if bad."""
    if value is None or value == "":
        if setting.default is None:
            errors.append(f"{setting.name} is required ({setting.doc})")
        return setting.default
    try:
        typed = _CONVERTERS[setting.kind](value)
    except DurationError as exc:
        errors.append(f"{setting.name}: {exc}")
        return setting.default
    except (TypeError, ValueError):
        errors.append(f"{setting.name}={value!r} is not a valid {setting.kind}")
        return setting.default
    low, high = setting.low, setting.high
    if (
        setting.kind in ("int", "duration")
        and low is not None
        and high is not None
        and not low <= typed <= high
    ):
        errors.append(
            f"{setting.name}={typed} is outside the allowed range "
            f"{setting.low}-{setting.high} ({setting.doc})"
        )
        return setting.default
    return typed


def _to_int(value: Any) -> int:
    if isinstance(value, bool):
        raise TypeError("a bool is not an int")
    if isinstance(value, int):
        return value
    return int(str(value).strip())


def _to_seconds(value: Any) -> int:
    """Whole seconds from an int (YAML) or a duration string; DurationError if not one,
    ValueError if it has a fraction of a second (the Google fields these keys set take whole
    seconds)."""
    if isinstance(value, bool):
        raise TypeError("a bool is not a duration")
    if isinstance(value, int):
        return value
    seconds = parse_duration(str(value)).total_seconds()
    if seconds != int(seconds):
        raise DurationError(f"{value!r} is not a whole number of seconds")
    return int(seconds)


def _to_bool(value: Any) -> bool:
    if isinstance(value, bool):
        return value
    text = str(value).strip().lower()
    if text in ("true", "false"):
        return text == "true"
    raise ValueError(value)


def _to_list(value: Any) -> tuple[str, ...]:
    items = json.loads(value) if isinstance(value, str) else value
    if not isinstance(items, list | tuple) or not all(isinstance(i, str) for i in items):
        raise ValueError(value)
    return tuple(items)


def _to_object(value: Any) -> dict[str, Any]:
    found = json.loads(value) if isinstance(value, str) else value
    if not isinstance(found, Mapping):
        raise ValueError(value)
    return dict(found)


_CONVERTERS: dict[Kind, Callable[[Any], Any]] = {
    "int": _to_int,
    "duration": _to_seconds,
    "bool": _to_bool,
    "str": str,
    "list": _to_list,
    "object": _to_object,
}


def _check_cross_fields(values: dict[str, Any], errors: list[str]) -> int:
    """Rules between keys; returns the schedule's longest gap in seconds (0 if invalid)."""
    _check_names(values, errors)
    if values["image"]:
        errors.extend(image_problems(values["image"]))
    longest_run = values["scanTimeBudgetS"] + values["scanPublishTimeoutS"]
    if longest_run >= values["scanAttemptDeadlineS"]:
        errors.append(
            f"scanTimeBudgetS + scanPublishTimeoutS = {values['scanTimeBudgetS']} + "
            f"{values['scanPublishTimeoutS']} must be less than scanAttemptDeadlineS="
            f"{values['scanAttemptDeadlineS']}: a scan must finish and answer before Cloud "
            "Scheduler stops waiting"
        )
    if values["claimTimeoutS"] <= values["scanAttemptDeadlineS"]:
        errors.append(
            f"claimTimeoutS={values['claimTimeoutS']} must exceed scanAttemptDeadlineS="
            f"{values['scanAttemptDeadlineS']}: a live scan's claims must not be reclaimed"
        )
    if values["workerRequestTimeoutS"] > values["pushAckDeadlineS"]:
        errors.append(
            f"workerRequestTimeoutS={values['workerRequestTimeoutS']} must be at most "
            f"pushAckDeadlineS={values['pushAckDeadlineS']}: Pub/Sub stops waiting at the ack "
            "deadline and redelivers while the worker still runs"
        )
    if values["workerLeaseS"] <= values["workerRequestTimeoutS"]:
        errors.append(
            f"workerLeaseS={values['workerLeaseS']} must exceed workerRequestTimeoutS="
            f"{values['workerRequestTimeoutS']}: a running job's lease must outlive its request"
        )
    if values["workerLeaseS"] >= values["pushAckDeadlineS"]:
        errors.append(
            f"workerLeaseS={values['workerLeaseS']} must be less than pushAckDeadlineS="
            f"{values['pushAckDeadlineS']}: a redelivery after the ack deadline must find the "
            "lease expired"
        )
    _check_worker_deadlines(values, errors)
    if values["retryLaterAfterAttempts"] >= values["deadLetterAttempts"]:
        errors.append(
            f"retryLaterAfterAttempts={values['retryLaterAfterAttempts']} must be less than "
            f"deadLetterAttempts={values['deadLetterAttempts']}: the worker must defer a failing "
            "job before Pub/Sub dead-letters its message"
        )
    path_s = pubsub_retry_path_s(
        values["deadLetterAttempts"], values["pushAckDeadlineS"], values["maxBackoffS"]
    )
    if 0 < values["enqueuedTimeoutS"] < MIN_ENQUEUED_TIMEOUT_S:
        errors.append(
            f"enqueuedTimeoutS={values['enqueuedTimeoutS']} must be 0 (automatic) or at least "
            f"{MIN_ENQUEUED_TIMEOUT_S:g} (the scan's minimum)"
        )
    elif values["enqueuedTimeoutS"] and values["enqueuedTimeoutS"] <= path_s:
        errors.append(
            f"enqueuedTimeoutS={values['enqueuedTimeoutS']} must exceed Pub/Sub's whole retry "
            f"path, deadLetterAttempts x pushAckDeadlineS + (deadLetterAttempts - 1) x "
            f"maxBackoffS = {path_s}: a message still being redelivered is not lost"
        )
    if values["minBackoffS"] > values["maxBackoffS"]:
        errors.append(
            f"minBackoffS={values['minBackoffS']} must be at most "
            f"maxBackoffS={values['maxBackoffS']} (both 0-600)"
        )
    for service in ("scan", "worker"):
        low, high = values[f"{service}MinInstances"], values[f"{service}MaxInstances"]
        if low > high:
            errors.append(
                f"{service}MinInstances={low} must be at most {service}MaxInstances={high}"
            )
    if not _is_time_zone(values["timeZone"]):
        errors.append(f"timeZone={values['timeZone']!r} is not a tz database name (e.g. Etc/UTC)")
    for email in values["alertEmails"] or ():
        if not _EMAIL.match(email):
            errors.append(f"alertEmails: {email!r} is not an email address")
        elif is_placeholder_email(email):
            errors.append(f"alertEmails: {email!r} is a placeholder; set your own addresses")
    for email in values["apiCallers"] or ():
        if not _SERVICE_ACCOUNT.match(email):
            errors.append(f"apiCallers: {email!r} is not a service account email")
        elif is_placeholder_email(email):
            errors.append(f"apiCallers: {email!r} is a placeholder; set your own accounts")
    for email in values["apiTrustedCallers"]:
        if email not in (values["apiCallers"] or ()):
            errors.append(f"apiTrustedCallers: {email!r} is not one of apiCallers")
    errors.extend(cpu_problems(values))
    errors.extend(console_problems(values))
    errors.extend(budget_problems(values))
    if values["apiIngress"] not in API_INGRESS:
        errors.append(
            f"apiIngress={values['apiIngress']!r} must be one of {', '.join(API_INGRESS)}"
        )
    interval = _check_schedule(values["schedule"], errors)
    _check_scan_pacing(values, interval, errors)
    return interval


def _check_scan_pacing(values: dict[str, Any], interval: int, errors: list[str]) -> None:
    """The scan's mode, run length and partitions against the schedule and Cloud Run: the
    same rules the scan checks at start (services/scan/settings.py, run_bound_problems).
    Cloud Run's request timeout is the attempt deadline here (infra/program.py), so the
    attempt-deadline rule above covers both."""
    mode = values["scanMode"]
    if mode not in SCAN_MODES:
        errors.append(f"scanMode={mode!r} must be one of {', '.join(SCAN_MODES)}")
        return
    if mode == "paced" and interval:
        room = interval - int(PACED_MARGIN_S)
        if values["scanTimeBudgetS"] > room:
            # A late run delays the next scheduled one (Job.schedule,
            # https://cloud.google.com/scheduler/docs/reference/rest/v1/projects.locations.jobs).
            errors.append(
                f"scanTimeBudgetS={values['scanTimeBudgetS']} must be at most the schedule's "
                f"interval - {PACED_MARGIN_S:g} = {room} with scanMode=paced: a paced run works "
                "its whole time budget and must end before the next scheduled run"
            )
        if values["scanPollS"] >= values["scanTimeBudgetS"]:
            errors.append(
                f"scanPollS={values['scanPollS']} must be less than scanTimeBudgetS="
                f"{values['scanTimeBudgetS']} with scanMode=paced"
            )
    partitions = values["scanPartitions"]
    if partitions > values["shards"]:
        errors.append(
            f"scanPartitions={partitions} must be at most shards={values['shards']}: each "
            "partition owns at least one shard"
        )
    slots = values["scanMaxInstances"] * values["scanConcurrency"]
    if slots < partitions:
        errors.append(
            f"scanMaxInstances x scanConcurrency = {values['scanMaxInstances']} x "
            f"{values['scanConcurrency']} = {slots} must be at least scanPartitions="
            f"{partitions}: every partition's run must find a request slot at once"
        )


def console_problems(values: Mapping[str, Any]) -> list[str]:
    """`consoleViewers` and `consoleOperators`: IAM members the console can recognise."""
    problems = []
    for key in ("consoleViewers", "consoleOperators"):
        for entry in values[key] or ():
            kind, _, email = entry.partition(":")
            if kind == "group":
                problems.append(
                    f"{key}: {entry!r}: groups are refused: the console checks roles by the "
                    "email IAP signs into its header, a member's own, never the group's; list "
                    "each person as user:EMAIL"
                )
            elif kind not in CONSOLE_MEMBER_KINDS or not _EMAIL.match(email):
                problems.append(f"{key}: {entry!r} is not user:EMAIL or serviceAccount:EMAIL")
            elif is_placeholder_email(email):
                problems.append(f"{key}: {entry!r} is a placeholder; set your own people")
    return problems


def budget_problems(values: Mapping[str, Any]) -> list[str]:
    """A budget needs the billing account it is created on."""
    if not values["budgetAmount"]:
        return []
    if not _BILLING_ACCOUNT.match(values["billingAccount"] or ""):
        return [
            f"billingAccount={values['billingAccount']!r} must be a billing account ID "
            "(XXXXXX-XXXXXX-XXXXXX, `gcloud billing projects describe`) when budgetAmount is set"
        ]
    return []


def is_placeholder_email(email: str) -> bool:
    domain = email.rpartition("@")[2].lower()
    return domain.endswith(_PLACEHOLDER_TLDS) or any(
        domain == d or domain.endswith("." + d) for d in _PLACEHOLDER_DOMAINS
    )


def cpu_value(text: str) -> float | None:
    """Cloud Run's CPU limit in vCPU ("1", "0.5", "500m"), or None if not one."""
    match = _CPU.match(text.strip())
    if match is None:
        return None
    return float(match.group(1)) if match.group(1) else int(match.group(2)) / 1000


def cpu_problems(values: Mapping[str, Any]) -> list[str]:
    """`cpu` against Cloud Run's limits and, below 1 vCPU, against every concurrency and billing
    choice: Cloud Run refuses a revision with less than 1 vCPU and a maximum concurrency above 1
    (https://cloud.google.com/run/docs/configuring/services/cpu), or with less than 1 vCPU and
    instance-based billing (https://cloud.google.com/run/docs/configuring/billing-settings)."""
    text = str(values["cpu"])
    cpu = cpu_value(text)
    if cpu is None or not MIN_CPU <= cpu <= MAX_CPU or (cpu > 1 and not cpu.is_integer()):
        return [
            f"cpu={text!r} is not a Cloud Run CPU limit: {MIN_CPU:g} to 1 (e.g. 0.5 or 500m), "
            f"or a whole number up to {MAX_CPU}"
        ]
    if cpu >= 1:
        return []
    problems = [
        f"cpu={text!r} is below 1 vCPU, which Cloud Run allows only with request-based "
        f"billing, but {key}=true: raise cpu to 1 or set it to false "
        "(https://cloud.google.com/run/docs/configuring/billing-settings)"
        for key in (f"{service}InstanceBilling" for service in BILLED_SERVICES)
        if values.get(key)
    ]
    concurrent = [
        f"{key}={values[key]}"
        for key in ("scanConcurrency", "workerConcurrency", "apiConcurrency")
        if values[key] > 1 and (key != "apiConcurrency" or values["apiCallers"])
    ]
    if values["consoleViewers"] or values["consoleOperators"]:
        # The console's concurrency is fixed (CONSOLE_CONCURRENCY): a stack with a console
        # needs cpu >= 1.
        concurrent.append(f"the console's concurrency {CONSOLE_CONCURRENCY}")
    if concurrent:
        problems.append(
            f"cpu={text!r} is below 1 vCPU, which Cloud Run allows only with a maximum "
            f"concurrency of 1, but {', '.join(concurrent)}: raise cpu to 1 or set those to 1"
        )
    return problems


def _check_worker_deadlines(values: dict[str, Any], errors: list[str]) -> None:
    """The worker's own deadlines against Cloud Run's and the lease's."""
    max_delivery = worker_max_delivery_s(values)
    timeout = values["workerRequestTimeoutS"]
    if max_delivery < 1:
        errors.append(
            f"workerRequestTimeoutS={timeout} leaves no whole second for a delivery to act in "
            "(workerMaxDeliveryS 0 takes 3/4 of it): raise it"
        )
    elif max_delivery >= timeout:
        # Cloud Run answers the push 504 at its request timeout and lets the handler run on
        # (https://cloud.google.com/run/docs/configuring/request-timeout): a delivery must
        # stop and answer before then, or Pub/Sub redelivers while it still acts.
        errors.append(
            f"workerMaxDeliveryS={max_delivery} must be less than "
            f"workerRequestTimeoutS={timeout}: a delivery must stop and answer before Cloud "
            "Run gives up on its request"
        )
    margin_limit = values["workerLeaseS"] // HEARTBEATS_PER_LEASE
    if worker_deadline_margin_s(values) >= margin_limit:
        errors.append(
            f"workerDeadlineMarginS={values['workerDeadlineMarginS']} must be less than "
            f"workerLeaseS / {HEARTBEATS_PER_LEASE} = {margin_limit}: a heartbeat (every "
            "third of the lease) must come before the action's stop"
        )


def worker_max_delivery_s(values: Mapping[str, Any]) -> int:
    """workerMaxDeliveryS, or when 0, 3/4 of the request timeout (at most the worker's
    default): a quarter of the request left to write the outcome and answer."""
    if values["workerMaxDeliveryS"]:
        return int(values["workerMaxDeliveryS"])
    return min(DEFAULT_MAX_DELIVERY_S, values["workerRequestTimeoutS"] * 3 // 4)


def worker_deadline_margin_s(values: Mapping[str, Any]) -> int:
    """workerDeadlineMarginS, or when 0, the worker's default where the lease allows it (the
    worker's own rule for an unset JOBS_WORKER_DEADLINE_MARGIN_S)."""
    if values["workerDeadlineMarginS"]:
        return int(values["workerDeadlineMarginS"])
    return max(
        0, min(DEFAULT_DEADLINE_MARGIN_S, values["workerLeaseS"] // HEARTBEATS_PER_LEASE - 1)
    )


def pubsub_retry_path_s(attempts: int, ack_deadline_s: int, max_backoff_s: int) -> int:
    """The longest a message can spend between publish and dead letter: every delivery runs to
    the ack deadline and every wait between them is the longest backoff."""
    return attempts * ack_deadline_s + (attempts - 1) * max_backoff_s


# The margin of the automatic enqueued timeout beyond Pub/Sub's retry path.
STALE_MARGIN_S = 3600


def _auto_enqueued_timeout_s(values: Mapping[str, Any]) -> int:
    path_s = pubsub_retry_path_s(
        values["deadLetterAttempts"], values["pushAckDeadlineS"], values["maxBackoffS"]
    )
    return path_s + STALE_MARGIN_S


def _is_time_zone(name: str) -> bool:
    try:
        zoneinfo.ZoneInfo(name)
    except (ValueError, zoneinfo.ZoneInfoNotFoundError):
        return False
    return True


def image_problems(image: str) -> list[str]:
    """Why `image` cannot be deployed, naming the key: a placeholder or an impossible digest.

    A committed placeholder (an all-zero digest, `<digest>`) would pass every local check and
    fail only at `pulumi up`, after other resources changed; Cloud Run cannot pull it.
    """
    lowered = image.lower()
    if any(mark in image for mark in _PLACEHOLDER_MARKS) or any(
        word in lowered for word in _PLACEHOLDER_WORDS
    ):
        return [f"image={image!r} is a placeholder; set the pushed image (docs/deploy.md)"]
    _, at, digest = image.partition("@")
    if not at:
        return []
    if not _DIGEST.match(digest):
        return [f"image={image!r}: the digest must be sha256: and 64 lowercase hex digits"]
    if len(set(digest.removeprefix("sha256:"))) == 1:
        return [
            f"image={image!r} has a placeholder digest ({digest[7:9]}... repeated); "
            "pin the digest the registry reported for the pushed image (docs/deploy.md)"
        ]
    return []


def _check_names(values: dict[str, Any], errors: list[str]) -> None:
    prefix = values["namePrefix"]
    if not _NAME_PREFIX.match(prefix):
        errors.append(
            f"namePrefix={prefix!r} must be 2-20 characters of a-z, 0-9 and '-', starting with "
            "a letter (service account IDs are at most 30 characters)"
        )


def _check_schedule(expression: str, errors: list[str]) -> int:
    try:
        gap = longest_gap_s(expression)
    except CronError as exc:
        errors.append(f"schedule: {exc}")
        return 0
    if ABSENT_INTERVALS * gap > MAX_ABSENCE_S:
        errors.append(
            f"schedule={expression!r} leaves up to {gap} s between runs; at most "
            f"{MAX_ABSENCE_S // ABSENT_INTERVALS} s is allowed so that the scan-absent alert "
            f"({ABSENT_INTERVALS} intervals) fits Cloud Monitoring's limit"
        )
    return gap
