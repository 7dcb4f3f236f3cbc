"""Worker settings: defaults, parsing, and one error naming every bad key."""

from __future__ import annotations

import datetime

import pytest

from services.edge import settings as common
from services.edge.settings import SettingsError
from services.worker import settings as s
from services.worker.settings import WorkerSettings

MINIMAL = {
    common.PROJECT: "demo",
    s.WORKER_AUDIENCE: "https://worker.example.run.app",
    s.WORKER_ALLOWED_INVOKERS: "push@demo.iam.gserviceaccount.com",
}


def test_minimal_environment_gets_documented_defaults() -> None:
    settings = WorkerSettings.from_env(MINIMAL)
    assert settings.allowed_invokers == frozenset({"push@demo.iam.gserviceaccount.com"})
    assert settings.lease_s == 60
    assert settings.retry_later_delay_s == 30 * 86400
    assert settings.retry_later_after_attempts == 4
    assert settings.max_body_bytes == 64 * 1024
    assert settings.media_bucket is None
    assert settings.certs_url == "https://www.googleapis.com/oauth2/v1/certs"
    assert settings.retry_policy.long_retry_delay == datetime.timedelta(days=30)


def test_every_key_is_read() -> None:
    settings = WorkerSettings.from_env(
        {
            **MINIMAL,
            s.WORKER_ALLOWED_INVOKERS: "a@x.com, b@x.com",
            common.OIDC_CERTS_URL: "http://127.0.0.1:9/oauth2/v1/certs",
            s.WORKER_LEASE_S: "30",
            s.RETRY_LATER_DELAY_S: "3600",
            s.WORKER_RETRY_LATER_AFTER_ATTEMPTS: "9",
            s.MEDIA_BUCKET: "media-src",
            common.LOG_LEVEL: "debug",
            common.BEHIND_CLOUD_RUN_IAM: "1",
            common.MAX_CLOCK_SKEW_S: "20",
            "K_SERVICE": "deferred-jobs-worker",  # on Cloud Run, as the flag requires
        }
    )
    assert settings.behind_cloud_run_iam is True
    assert settings.max_clock_skew.total_seconds() == 20
    assert settings.allowed_invokers == frozenset({"a@x.com", "b@x.com"})
    assert (settings.lease_s, settings.retry_later_delay_s) == (30, 3600)
    assert settings.retry_policy.retry_later_after_attempts == 9
    assert (settings.media_bucket, settings.log_level) == ("media-src", "DEBUG")


def test_one_error_names_every_missing_and_invalid_key() -> None:
    with pytest.raises(SettingsError) as caught:
        WorkerSettings.from_env(
            {
                s.WORKER_ALLOWED_INVOKERS: "not-an-email",
                s.WORKER_LEASE_S: "0",
                s.RETRY_LATER_DELAY_S: "soon",
                s.WORKER_RETRY_LATER_AFTER_ATTEMPTS: "100",
                s.MEDIA_BUCKET: "Bad_Bucket!",
                common.LOG_LEVEL: "LOUD",
                common.OIDC_CERTS_URL: "ftp://x",
            }
        )
    message = str(caught.value)
    for key in (
        common.PROJECT,
        s.WORKER_AUDIENCE,
        s.WORKER_ALLOWED_INVOKERS,
        s.WORKER_LEASE_S,
        s.RETRY_LATER_DELAY_S,
        s.WORKER_RETRY_LATER_AFTER_ATTEMPTS,
        s.MEDIA_BUCKET,
        common.LOG_LEVEL,
        common.OIDC_CERTS_URL,
    ):
        assert key in message
    assert len(caught.value.problems) == 9


def test_key_constants_carry_the_jobs_prefix() -> None:
    assert all(key.startswith("JOBS_") for key in s.ALL_KEYS)
    assert len(set(s.ALL_KEYS)) == len(s.ALL_KEYS)


def test_the_worker_reads_every_shared_key_under_its_one_name() -> None:
    # One import path per name: the shared keys live in services.edge.settings only.
    assert not hasattr(s, "PROJECT")
    assert set(common.COMMON_KEYS) <= set(s.ALL_KEYS)


def test_terminal_retention_and_firestore_timeout_are_read() -> None:
    settings = WorkerSettings.from_env(
        {**MINIMAL, common.TERMINAL_RETENTION_S: "2d", common.FIRESTORE_TIMEOUT_S: "3s"}
    )
    assert settings.terminal_retention == datetime.timedelta(days=2)
    assert settings.firestore_timeout_s == 3.0
    defaults = WorkerSettings.from_env(MINIMAL)
    assert defaults.terminal_retention == datetime.timedelta(days=30)
    assert defaults.firestore_timeout_s == 10.0


def test_the_deadline_knobs_are_read_and_the_margin_stays_below_a_third_of_the_lease() -> None:
    defaults = WorkerSettings.from_env(MINIMAL)
    assert (defaults.deadline_margin_s, defaults.max_delivery_s) == (5, 180)
    settings = WorkerSettings.from_env(
        {
            **MINIMAL,
            s.WORKER_LEASE_S: "30",
            s.WORKER_DEADLINE_MARGIN_S: "9",
            s.WORKER_MAX_DELIVERY_S: "200",
        }
    )
    assert settings.deadline_margin == datetime.timedelta(seconds=9)
    assert settings.max_delivery == datetime.timedelta(seconds=200)
    # A margin a heartbeat (every lease / 3) could not beat is refused, naming the key.
    with pytest.raises(SettingsError, match=s.WORKER_DEADLINE_MARGIN_S):
        WorkerSettings.from_env(
            {**MINIMAL, s.WORKER_LEASE_S: "30", s.WORKER_DEADLINE_MARGIN_S: "10"}
        )
    with pytest.raises(SettingsError, match=s.WORKER_MAX_DELIVERY_S):
        WorkerSettings.from_env({**MINIMAL, s.WORKER_MAX_DELIVERY_S: "0"})


def test_http_targets_are_read_and_a_bad_one_is_named() -> None:
    settings = WorkerSettings.from_env(
        {**MINIMAL, s.HTTP_TARGETS: '{"trials": {"url": "https://trials.example", "rate": 5}}'}
    )
    assert settings.http_targets["trials"].rate == 5.0
    assert WorkerSettings.from_env(MINIMAL).http_targets == {}
    with pytest.raises(SettingsError) as caught:
        WorkerSettings.from_env({**MINIMAL, s.HTTP_TARGETS: '{"t": {"url": "http://x.example"}}'})
    assert any("JOBS_HTTP_TARGETS.t.url" in problem for problem in caught.value.problems)
