from __future__ import annotations

import pytest

from services.jobs.auth import GOOGLE_CERTS_URL
from services.scan import settings as scan_settings
from services.scan.budget import DEFAULT_HOUSEKEEPING_INTERVAL_S, ScanLimits
from services.scan.settings import ALL_KEYS, ScanSettings, SettingsError

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
    }
    assert set(env) == set(ALL_KEYS)
    s = ScanSettings.from_env({**env, "K_SERVICE": "deferred-jobs-scan"})  # the flag needs it
    assert s.shards == 4
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


def test_every_bad_key_is_named_in_one_error() -> None:
    env = {
        "JOBS_TOPIC": "projects/p/topics/jobs",
        "JOBS_SCAN_AUDIENCE": "not a url",
        "JOBS_SCAN_PAGE_SIZE": "0",
        "JOBS_SCAN_MAX_PER_RUN": "lots",
        "JOBS_METRICS": "prometheus",
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
