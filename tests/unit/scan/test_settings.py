from __future__ import annotations

import pytest

from services.edge.settings import GOOGLE_CERTS_URL, SettingsError
from services.jobs.budget import DEFAULT_HOUSEKEEPING_INTERVAL_S, ScanLimits
from services.scan import settings as scan_settings
from services.scan.settings import ALL_KEYS, ScanSettings

VALID = {
    "JOBS_PROJECT": "p1",
    "JOBS_TOPIC": "jobs",
    "JOBS_SCAN_AUDIENCE": "https://scan-abc.a.run.app",
    "JOBS_SCAN_ALLOWED_INVOKERS": (
        "scheduler@p1.iam.gserviceaccount.com, ops@p1.iam.gserviceaccount.com"
    ),
}


def test_minimal_environment_takes_the_documented_defaults() -> None:
    settings = ScanSettings.from_env(VALID)
    assert settings.allowed_invokers == {
        "scheduler@p1.iam.gserviceaccount.com",
        "ops@p1.iam.gserviceaccount.com",
    }
    assert settings.certs_url == GOOGLE_CERTS_URL
    assert (settings.max_per_run, settings.page_size, settings.metrics) == (1000, 200, "cloud")
    assert settings.limits().claim_timeout_s == 600.0
    # Idle runs between housekeepings bill 2 operations: 15 min, three default schedule runs.
    assert settings.limits().housekeeping_interval_s == DEFAULT_HOUSEKEEPING_INTERVAL_S == 900
    assert ScanLimits().housekeeping_interval_s == DEFAULT_HOUSEKEEPING_INTERVAL_S


def test_every_key_is_read() -> None:
    env = {
        **VALID,
        "JOBS_OIDC_CERTS_URL": "http://127.0.0.1:9/oauth2/v1/certs",
        "JOBS_AUTH_CLOCK_SKEW_S": "5",
        "JOBS_SCAN_TIME_BUDGET_S": "2m",
        "JOBS_SCAN_MAX_PER_RUN": "5000",
        "JOBS_SCAN_PAGE_SIZE": "500",
        "JOBS_SCAN_INTERVAL_S": "300",
        "JOBS_SCAN_PUBLISH_TIMEOUT_S": "10",
        "JOBS_CLAIM_TIMEOUT_S": "15m",
        "JOBS_RECLAIM_LIMIT": "100",
        "JOBS_SCAN_HOUSEKEEPING_INTERVAL_S": "5m",
        "JOBS_METRICS": "LOG",
        "JOBS_SCAN_RUN_RETENTION_S": "7d",
        "JOBS_LOG_LEVEL": "debug",
        "JOBS_ENQUEUED_TIMEOUT_S": "90m",
        "JOBS_TERMINAL_RETENTION_S": "14d",
        "JOBS_FIRESTORE_TIMEOUT_S": "5s",
        "JOBS_AUTH_BEHIND_CLOUD_RUN_IAM": "true",
        "JOBS_SHARDS": "4",
        "JOBS_SCAN_MODE": "paced",
        "JOBS_SCAN_POLL_S": "10s",
        "JOBS_SCAN_END_WHEN_IDLE": "false",
        "JOBS_SCAN_ATTEMPT_DEADLINE_S": "5m",
        "JOBS_SCAN_PARTITIONS": "2",
        "JOBS_SUBSCRIPTION": "deferred-jobs-jobs-push",
        "JOBS_MONITORING_EMULATOR_HOST": "127.0.0.1:8087",
        "JOBS_HTTP_TARGETS": '{"trials": {"url": "https://trials.example", "rate": 5}}',
        "JOBS_MAX_CLOCK_SKEW_S": "20",
    }
    assert set(env) == set(ALL_KEYS)
    s = ScanSettings.from_env({**env, "K_SERVICE": "deferred-jobs-scan"})  # the flag needs it
    assert s.shards == 4
    assert s.max_clock_skew_s == 20
    assert (s.mode, s.poll_s, s.end_when_idle, s.attempt_deadline_s) == ("paced", 10, False, 300)
    assert s.partitions == 2 and s.limits().polls
    assert (s.subscription, s.monitoring_emulator_host) == (
        "deferred-jobs-jobs-push",
        "127.0.0.1:8087",
    )
    # The lease outlasts the longest run (time budget + publish timeout) by 30 s.
    assert s.limits().lease_s == 120 + 10 + 30
    assert (s.time_budget_s, s.max_per_run, s.page_size, s.interval_s) == (120, 5000, 500, 300)
    assert (s.publish_timeout_s, s.claim_timeout_s, s.reclaim_limit) == (10, 900, 100)
    assert (s.metrics, s.run_retention_s, s.log_level) == ("log", 7 * 86400, "DEBUG")
    assert s.certs_url.startswith("http://127.0.0.1")
    assert (s.enqueued_timeout_s, s.terminal_retention_s, s.firestore_timeout_s) == (
        5400,
        14 * 86400,
        5,
    )
    assert s.limits().enqueued_timeout_s == 5400
    assert s.behind_cloud_run_iam is True
    assert s.limits().housekeeping_interval_s == 300
    # Each target with a rate is a claim lane of its own (services/jobs/lanes.py).
    assert s.http_targets["trials"].rate == 5


def test_every_bad_key_is_named_in_one_error() -> None:
    env = {
        "JOBS_TOPIC": "projects/p/topics/jobs",
        "JOBS_SCAN_AUDIENCE": "not a url",
        "JOBS_SCAN_PAGE_SIZE": "0",
        "JOBS_SCAN_MAX_PER_RUN": "lots",
        "JOBS_METRICS": "prometheus",
        "JOBS_MAX_CLOCK_SKEW_S": "0",
    }
    with pytest.raises(SettingsError) as raised:
        ScanSettings.from_env(env)
    named = {problem.split(":", 1)[0] for problem in raised.value.problems}
    assert named == {
        "JOBS_PROJECT",
        "JOBS_TOPIC",
        "JOBS_SCAN_AUDIENCE",
        "JOBS_SCAN_ALLOWED_INVOKERS",
        "JOBS_SCAN_PAGE_SIZE",
        "JOBS_SCAN_MAX_PER_RUN",
        "JOBS_METRICS",
        "JOBS_MAX_CLOCK_SKEW_S",
    }


def test_a_claim_timeout_shorter_than_a_run_is_refused() -> None:
    env = {**VALID, "JOBS_SCAN_TIME_BUDGET_S": "60", "JOBS_CLAIM_TIMEOUT_S": "61"}
    with pytest.raises(SettingsError, match="JOBS_CLAIM_TIMEOUT_S"):
        ScanSettings.from_env(env)


def test_key_constants_are_exported_for_the_infra() -> None:
    assert scan_settings.SCAN_AUDIENCE == "JOBS_SCAN_AUDIENCE"
    assert all(key.startswith("JOBS_") for key in ALL_KEYS)
    assert len(set(ALL_KEYS)) == len(ALL_KEYS)


def test_reading_settings_uses_the_process_environment_by_default(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    for key, value in VALID.items():
        monkeypatch.setenv(key, value)
    assert ScanSettings.from_env().topic == "jobs"


def _problem_keys(env: dict[str, str]) -> set[str]:
    with pytest.raises(SettingsError) as raised:
        ScanSettings.from_env(env)
    return {problem.split(":", 1)[0].split("=", 1)[0] for problem in raised.value.problems}


def test_a_run_longer_than_the_attempt_deadline_is_refused_naming_both_keys() -> None:
    env = {**VALID, "JOBS_SCAN_TIME_BUDGET_S": "170", "JOBS_SCAN_PUBLISH_TIMEOUT_S": "10"}
    env["JOBS_CLAIM_TIMEOUT_S"] = "600"
    with pytest.raises(SettingsError) as raised:
        ScanSettings.from_env(env)
    text = str(raised.value)
    assert "JOBS_SCAN_TIME_BUDGET_S" in text and "JOBS_SCAN_ATTEMPT_DEADLINE_S=180" in text


def test_a_paced_run_must_end_a_margin_before_the_next_one() -> None:
    paced = {**VALID, "JOBS_SCAN_MODE": "paced", "JOBS_SCAN_INTERVAL_S": "60"}
    # 60 s interval - 10 s margin: a 51 s run would still work when the next is due.
    with pytest.raises(SettingsError, match="JOBS_SCAN_INTERVAL_S - 10s = 50s"):
        ScanSettings.from_env({**paced, "JOBS_SCAN_TIME_BUDGET_S": "51"})
    settings = ScanSettings.from_env({**paced, "JOBS_SCAN_TIME_BUDGET_S": "50"})
    assert settings.mode == "paced" and settings.end_when_idle is True
    # The same time budget in one-pass mode is only a bound, not a length: accepted.
    assert ScanSettings.from_env({**VALID, "JOBS_SCAN_TIME_BUDGET_S": "60"}).mode == "one-pass"


def test_a_poll_period_not_below_the_run_length_is_refused() -> None:
    env = {
        **VALID,
        "JOBS_SCAN_MODE": "paced",
        "JOBS_SCAN_TIME_BUDGET_S": "20",
        "JOBS_SCAN_POLL_S": "20",
    }
    assert "JOBS_SCAN_POLL_S" in _problem_keys(env)


@pytest.mark.parametrize(
    ("key", "value"),
    [
        ("JOBS_SCAN_MODE", "fast"),
        ("JOBS_SCAN_POLL_S", "0.5"),
        ("JOBS_SCAN_POLL_S", "61"),
        ("JOBS_SCAN_ATTEMPT_DEADLINE_S", "14"),
        ("JOBS_SCAN_ATTEMPT_DEADLINE_S", "31m"),
        ("JOBS_SCAN_END_WHEN_IDLE", "maybe"),
        ("JOBS_SCAN_PARTITIONS", "0"),
    ],
)
def test_pacing_keys_out_of_range_are_named(key: str, value: str) -> None:
    assert key in _problem_keys({**VALID, key: value})


def test_more_partitions_than_shards_are_refused() -> None:
    env = {**VALID, "JOBS_SCAN_PARTITIONS": "3", "JOBS_SHARDS": "2"}
    assert "JOBS_SCAN_PARTITIONS" in _problem_keys(env)


def test_the_launcher_exports_the_monitoring_endpoint_under_the_name_the_scan_reads() -> None:
    from emulators.launcher import MONITORING_ENV
    from services.scan.settings import MONITORING_EMULATOR_HOST

    assert MONITORING_ENV == MONITORING_EMULATOR_HOST
