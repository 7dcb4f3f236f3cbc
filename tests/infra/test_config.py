"""The stack configuration is typed and validated: a bad value fails naming its key and range."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pulumi
import pytest
from pulumi.runtime import rpc

from infra.config import SETTINGS, SETTINGS_BY_NAME, parse_config
from infra.cron import parse_cron
from infra.errors import CronError, InfraConfigError
from tests.infra.conftest import ROOT, run_stack

MINIMAL: dict[str, Any] = {
    "image": "europe-west1-docker.pkg.dev/p/r/app:1",
    "mediaBucket": "media",
    "gcp:project": "p",
    "gcp:region": "europe-west1",
    "alertEmails": [],
    "apiCallers": [],
}

RANGED = [s for s in SETTINGS if s.kind in ("int", "duration")]


def _error(**overrides: Any) -> str:
    with pytest.raises(InfraConfigError) as caught:
        parse_config({**MINIMAL, **overrides})
    return str(caught.value)


def test_minimal_configuration_uses_documented_defaults() -> None:
    config = parse_config(MINIMAL)
    # Every minute, paced, up to 12,000 per run: 200 jobs/s, so the seed's 180,000-job
    # backlog drains in 15 min at the highest rate the operator may set (docs/scan.md).
    assert config.schedule == "* * * * *"
    assert config.scan_interval_s == 60
    assert (config.scan_mode, config.scan_end_when_idle, config.scan_poll_s) == ("paced", True, 5)
    assert config.scan_max_per_run / config.scan_interval_s == 200
    assert 180_000 / (config.scan_max_per_run / config.scan_interval_s) < 3600
    assert config.database_location == "europe-west1"
    assert config.deletion_protection is True
    assert config.scan_time_budget_s < config.scan_attempt_deadline_s
    assert config.worker_request_timeout_s <= config.push_ack_deadline_s


@pytest.mark.parametrize("setting", RANGED, ids=lambda s: s.name)
def test_integer_below_its_range_fails_naming_key_and_range(setting: Any) -> None:
    message = _error(**{setting.name: setting.low - 1})
    assert f"{setting.name}={setting.low - 1} is outside the allowed range" in message
    assert f"{setting.low}-{setting.high}" in message


@pytest.mark.parametrize("setting", RANGED, ids=lambda s: s.name)
def test_integer_above_its_range_fails_naming_key_and_range(setting: Any) -> None:
    message = _error(**{setting.name: setting.high + 1})
    assert f"{setting.name}={setting.high + 1} is outside the allowed range" in message
    assert f"{setting.low}-{setting.high}" in message


@pytest.mark.parametrize(
    ("key", "low", "high"),
    [
        ("scanAttemptDeadlineS", 15, 1800),
        ("pushAckDeadlineS", 10, 600),
        ("deadLetterAttempts", 5, 100),
        ("minBackoffS", 0, 600),
        ("maxBackoffS", 0, 600),
    ],
)
def test_google_limits_are_the_documented_ranges(key: str, low: int, high: int) -> None:
    assert (SETTINGS_BY_NAME[key].low, SETTINGS_BY_NAME[key].high) == (low, high)


@pytest.mark.parametrize(
    "overrides",
    [
        {
            "scanAttemptDeadlineS": 15,
            "scanTimeBudgetS": 13,
            "scanPublishTimeoutS": 1,
            "claimTimeoutS": 16,
        },
        {
            "scanAttemptDeadlineS": 1800,
            "scanTimeBudgetS": 1798,
            "scanPublishTimeoutS": 1,
            "claimTimeoutS": 1801,
            # A one-pass run's time budget is only a bound; a paced run's is its length.
            "scanMode": "one-pass",
        },
        {"pushAckDeadlineS": 10, "workerRequestTimeoutS": 5, "workerLeaseS": 9},
        {"pushAckDeadlineS": 600, "workerRequestTimeoutS": 598, "workerLeaseS": 599},
        {"deadLetterAttempts": 5},
        {"deadLetterAttempts": 100, "retryLaterAfterAttempts": 99},
        {"minBackoffS": 0, "maxBackoffS": 0},
        {"minBackoffS": 600, "maxBackoffS": 600},
        {"schedule": "* * * * *"},
    ],
)
def test_values_at_the_edges_of_their_ranges_are_accepted(overrides: dict[str, Any]) -> None:
    parse_config({**MINIMAL, **overrides})


@pytest.mark.parametrize(
    ("overrides", "expected"),
    [
        (
            {"scanTimeBudgetS": 150, "scanPublishTimeoutS": 30, "scanAttemptDeadlineS": 180},
            "scanTimeBudgetS + scanPublishTimeoutS = 150 + 30 must be less than "
            "scanAttemptDeadlineS=180",
        ),
        ({"workerRequestTimeoutS": 301, "pushAckDeadlineS": 300}, "workerRequestTimeoutS=301"),
        ({"workerLeaseS": 300, "pushAckDeadlineS": 300}, "workerLeaseS=300 must be less"),
        (
            {"retryLaterAfterAttempts": 5, "deadLetterAttempts": 5},
            "retryLaterAfterAttempts=5 must be less than deadLetterAttempts=5",
        ),
        ({"minBackoffS": 60, "maxBackoffS": 30}, "minBackoffS=60 must be at most maxBackoffS=30"),
        ({"workerLeaseS": 240, "workerRequestTimeoutS": 240}, "workerLeaseS=240 must exceed"),
        (
            {"workerMaxDeliveryS": 240, "workerRequestTimeoutS": 240},
            "workerMaxDeliveryS=240 must be less than workerRequestTimeoutS=240",
        ),
        (
            {"workerDeadlineMarginS": 90, "workerLeaseS": 270},
            "workerDeadlineMarginS=90 must be less than workerLeaseS / 3 = 90",
        ),
        (
            {"workerRequestTimeoutS": 1, "workerLeaseS": 5, "pushAckDeadlineS": 10},
            "workerRequestTimeoutS=1 leaves no whole second for a delivery",
        ),
        ({"claimTimeoutS": 180, "scanAttemptDeadlineS": 180}, "claimTimeoutS=180 must exceed"),
        ({"workerMinInstances": 5, "workerMaxInstances": 2}, "workerMinInstances=5"),
        (
            # 10 x 300 + 9 x 600 = 8400 s: a message can still be in Pub/Sub's hands.
            {"enqueuedTimeoutS": 8400, "deadLetterAttempts": 10, "maxBackoffS": 600},
            "enqueuedTimeoutS=8400 must exceed Pub/Sub's whole retry path",
        ),
        ({"terminalRetentionDays": 0}, "terminalRetentionDays=0 is outside the allowed range"),
        (
            {
                "enqueuedTimeoutS": 200,
                "deadLetterAttempts": 5,
                "pushAckDeadlineS": 10,
                "workerRequestTimeoutS": 5,
                "workerLeaseS": 9,
                "maxBackoffS": 0,
                "minBackoffS": 0,
                "retryLaterAfterAttempts": 1,
            },
            "enqueuedTimeoutS=200 must be 0 (automatic) or at least 300",
        ),
        ({"scanMinInstances": 3, "scanMaxInstances": 1}, "scanMinInstances=3"),
        ({"alertEmails": ["not-an-address"]}, "alertEmails: 'not-an-address'"),
        ({"namePrefix": "Deferred_Jobs"}, "namePrefix='Deferred_Jobs'"),
        ({"timeZone": "Mars/Olympus_Mons"}, "timeZone='Mars/Olympus_Mons' is not a tz"),
        ({"namePrefix": "a-prefix-much-too-long-for-ids"}, "namePrefix="),
        ({"pushAckDeadlineS": "soon"}, "pushAckDeadlineS: 'soon' is not a duration"),
        ({"deletionProtection": "yes"}, "deletionProtection='yes' is not a valid bool"),
        ({"image": ""}, "image is required"),
        ({"mediaBucket": None}, "mediaBucket is required"),
        ({"gcp:project": None}, "gcp:project is required"),
        ({"alertEmails": None}, "alertEmails is required"),
        ({"apiCallers": None}, "apiCallers is required"),
        (
            {"alertEmails": ["oncall@example.com"]},
            "alertEmails: 'oncall@example.com' is a placeholder",
        ),
        ({"alertEmails": ["ops@jobs.example.org"]}, "alertEmails: 'ops@jobs.example.org' is a"),
        ({"alertEmails": ["ops@corp.test"]}, "alertEmails: 'ops@corp.test' is a placeholder"),
        (
            {"apiCallers": ["media@my-project.iam.gserviceaccount.com.invalid"]},
            "apiCallers: 'media@my-project.iam.gserviceaccount.com.invalid' is not",
        ),
        ({"cpu": "0.5"}, "cpu='0.5' is below 1 vCPU"),
        (
            {"cpu": "500m", "scanConcurrency": 2, "workerConcurrency": 1},
            "cpu='500m' is below 1 vCPU, which Cloud Run allows only with a maximum "
            "concurrency of 1, but scanConcurrency=2",
        ),
        ({"cpu": "0.05"}, "cpu='0.05' is not a Cloud Run CPU limit"),
        ({"cpu": "1.5"}, "cpu='1.5' is not a Cloud Run CPU limit"),
        ({"cpu": "16"}, "cpu='16' is not a Cloud Run CPU limit"),
        ({"cpu": "one"}, "cpu='one' is not a Cloud Run CPU limit"),
    ],
)
def test_inconsistent_configuration_fails_naming_the_key(
    overrides: dict[str, Any], expected: str
) -> None:
    assert expected in _error(**overrides)


def test_the_enqueued_timeout_defaults_to_pubsubs_retry_path_plus_an_hour() -> None:
    config = parse_config({**MINIMAL, "deadLetterAttempts": 10, "pushAckDeadlineS": 300})
    assert config.enqueued_timeout_s == 10 * 300 + 9 * 600 + 3600
    explicit = parse_config({**MINIMAL, "enqueuedTimeoutS": 9000})
    assert explicit.enqueued_timeout_s == 9000


def test_every_problem_is_reported_at_once() -> None:
    message = _error(pushAckDeadlineS=5, deadLetterAttempts=200, schedule="* * *")
    assert "pushAckDeadlineS" in message
    assert "deadLetterAttempts" in message
    assert "schedule" in message


@pytest.mark.parametrize(
    ("schedule", "field"),
    [
        ("60 * * * *", "minute"),
        ("* 24 * * *", "hour"),
        ("* * 0 * *", "day-of-month"),
        ("* * 32 * *", "day-of-month"),
        ("* * * 13 *", "month"),
        ("* * * * 8", "day-of-week"),
        ("*/0 * * * *", "minute"),
        ("5-1 * * * *", "minute"),
        ("x * * * *", "minute"),
        ("* * * FOO *", "month"),
        ("* * * * * *", "5"),
        ("* * * *", "5"),
    ],
)
def test_invalid_schedule_fails_naming_the_bad_field(schedule: str, field: str) -> None:
    message = _error(schedule=schedule)
    assert "schedule" in message
    assert field in message


@pytest.mark.parametrize(
    ("schedule", "gap_s"),
    [
        ("* * * * *", 60),
        ("*/5 * * * *", 300),
        ("*/7 * * * *", 7 * 60),  # 56 -> 0 is 4 min, 0 -> 7 is 7 min
        ("0,30 * * * *", 1800),
        ("0 * * * *", 3600),
        ("0 */4 * * *", 4 * 3600),
        ("15 9-17 * * MON-FRI", (24 * 3 - 8) * 3600),  # Friday 17:15 -> Monday 09:15
        ("0 0 * * *", 86400),
        ("0 0 1 * *", 31 * 86400),
        ("0 0 1,15 * 0", 7 * 86400),  # both day fields restricted: either matches
    ],
)
def test_schedule_longest_gap_between_runs(schedule: str, gap_s: int) -> None:
    assert parse_cron(schedule).longest_gap_s() == gap_s


def test_schedule_too_sparse_for_the_absence_alert_fails() -> None:
    assert "scan-absent alert" in _error(schedule="0 0 * * *")
    parse_config({**MINIMAL, "schedule": "0 */7 * * *"})


def test_day_names_and_sunday_as_seven_are_accepted() -> None:
    assert parse_cron("0 12 * JAN-MAR 7").days_of_week == frozenset({0})
    assert parse_cron("0 12 * * sun").days_of_week == frozenset({0})
    with pytest.raises(CronError):
        parse_cron("0 12 * * SUNDAY")


def test_bad_stack_configuration_fails_the_program_naming_the_key() -> None:
    with pytest.raises(InfraConfigError, match="pushAckDeadlineS=5 is outside"):
        run_stack("dev", overrides={"pushAckDeadlineS": 5})


def test_slack_channel_reads_its_token_as_a_secret() -> None:
    run = run_stack("dev", overrides={"slackChannel": "#jobs"}, secrets={"slackAuthToken": "t0k"})
    channels = run.of_type("monitoring/notificationChannel:NotificationChannel")
    assert [c.state["type"] for c in channels] == ["slack"]
    # Pulumi wraps a secret on the wire as {signature key: secret signature, "value": ...}.
    sensitive = channels[0].state["sensitiveLabels"]
    assert sensitive[rpc._special_sig_key] == rpc._special_secret_sig
    assert sensitive["value"] == {"authToken": "t0k"}


def test_slack_channel_without_its_secret_token_fails_naming_it() -> None:
    with pytest.raises(pulumi.ConfigMissingError, match="slackAuthToken"):
        run_stack("dev", overrides={"slackChannel": "#jobs"})


def test_deploy_guide_documents_every_key_with_its_default_and_range() -> None:
    rows = {
        line.split("|")[1].strip(): line
        for line in (ROOT / "docs" / "deploy.md").read_text().splitlines()
        if line.startswith("| `")
    }
    for setting in SETTINGS:
        row = rows[f"`{setting.name}`"]
        if setting.kind in ("int", "duration"):
            assert f"`{setting.default}`" in row, setting.name
            assert f"{setting.low}\N{EN DASH}{setting.high}" in row, setting.name
    assert "`slackAuthToken`" in rows


def test_pulumi_project_points_main_at_infra() -> None:
    text = (ROOT / "Pulumi.yaml").read_text()
    assert "name: deferred-jobs" in text
    assert "main: infra/" in text
    assert Path(ROOT / "infra" / "__main__.py").is_file()


@pytest.mark.parametrize(
    ("overrides", "max_delivery_s", "margin_s"),
    [
        ({}, 180, 5),  # the defaults: the worker's own
        ({"workerRequestTimeoutS": 120, "workerLeaseS": 150}, 90, 5),  # 3/4 of the request
        ({"pushAckDeadlineS": 10, "workerRequestTimeoutS": 5, "workerLeaseS": 9}, 3, 2),
        ({"workerMaxDeliveryS": 200, "workerDeadlineMarginS": 30}, 200, 30),
    ],
)
def test_the_workers_deadlines_default_inside_the_request_timeout_and_the_lease(
    overrides: dict[str, Any], max_delivery_s: int, margin_s: int
) -> None:
    config = parse_config({**MINIMAL, **overrides})
    assert (config.worker_max_delivery_s, config.worker_deadline_margin_s) == (
        max_delivery_s,
        margin_s,
    )
    assert config.worker_max_delivery_s < config.worker_request_timeout_s
    assert config.worker_deadline_margin_s < config.worker_lease_s / 3


@pytest.mark.parametrize(
    ("overrides", "expected"),
    [
        (
            {"scanTimeBudgetS": 51},
            "scanTimeBudgetS=51 must be at most the schedule's interval - 10 = 50",
        ),
        (
            {"scanTimeBudgetS": 30, "scanPollS": 30},
            "scanPollS=30 must be less than scanTimeBudgetS=30",
        ),
        ({"scanMode": "fast"}, "scanMode='fast' must be one of one-pass, paced"),
        ({"scanPartitions": 2}, "scanPartitions=2 must be at most shards=1"),
        (
            {"scanPartitions": 4, "shards": 8, "scanMaxInstances": 1, "scanConcurrency": 2},
            "scanMaxInstances x scanConcurrency = 1 x 2 = 2 must be at least scanPartitions=4",
        ),
    ],
)
def test_scan_pacing_and_partitions_are_checked_at_preview(
    overrides: dict[str, Any], expected: str
) -> None:
    assert expected in _error(**overrides)


def test_a_paced_run_may_be_longer_on_a_slower_schedule() -> None:
    config = parse_config(
        {
            **MINIMAL,
            "schedule": "*/5 * * * *",
            "scanTimeBudgetS": 240,
            "scanAttemptDeadlineS": 300,
            "claimTimeoutS": 600,
        }
    )
    assert config.scan_interval_s == 300 and config.scan_time_budget_s == 240


def test_cpu_below_one_vcpu_names_each_concurrency_above_one() -> None:
    # Cloud Run: below 1 vCPU the maximum concurrency must be 1
    # (https://cloud.google.com/run/docs/configuring/services/cpu).
    message = _error(
        cpu="0.5", workerConcurrency=10, apiCallers=["a-caller@p.iam.gserviceaccount.com"]
    )
    assert "workerConcurrency=10" in message and "apiConcurrency=80" in message
    assert "scanConcurrency" not in message  # the scan's default is 1


def test_cpu_below_one_vcpu_is_accepted_when_every_deployed_concurrency_is_one() -> None:
    # No callers: no api service, so its concurrency does not count.
    config = parse_config({**MINIMAL, "cpu": "0.5", "workerConcurrency": 1})
    assert config.cpu == "0.5"
    for cpu in ("1", "2", "8", "1000m", "0.08"):
        parse_config({**MINIMAL, "cpu": cpu, "workerConcurrency": 1})


def test_an_explicit_empty_list_is_a_decision_and_accepted() -> None:
    config = parse_config(MINIMAL)
    assert (config.alert_emails, config.api_callers) == ((), ())
