"""Reading settings from the environment: typed values, defaults, and every problem at once."""

from __future__ import annotations

import dataclasses
import logging
from datetime import timedelta

import pytest

from services.edge.settings import (
    AUTH_CLOCK_SKEW_S,
    BEHIND_CLOUD_RUN_IAM,
    COMMON_KEYS,
    FIRESTORE_TIMEOUT_S,
    GOOGLE_CERTS_URL,
    LOG_LEVEL,
    OIDC_CERTS_URL,
    PROJECT,
    TERMINAL_RETENTION_S,
    CommonSettings,
    EnvReader,
    SettingsError,
)


def test_values_are_parsed_to_their_types() -> None:
    env = EnvReader(
        {
            "JOBS_NAME": " scan ",
            "JOBS_BATCH": "200",
            "JOBS_RATE": "2.5",
            "JOBS_PAUSED": "Yes",
            "JOBS_TIMEOUT": "5m",
            "JOBS_EMAILS": "a@x.com, ,b@x.com,",
            "JOBS_URL": "https://worker.example.run.app/push",
            "JOBS_MODE": "fast",
        }
    )
    assert env.str("JOBS_NAME") == "scan"
    assert env.int("JOBS_BATCH", min=1, max=500) == 200
    assert env.float("JOBS_RATE") == 2.5
    assert env.bool("JOBS_PAUSED") is True
    assert env.duration_s("JOBS_TIMEOUT") == 300.0
    assert env.csv("JOBS_EMAILS") == ("a@x.com", "b@x.com")
    assert env.url("JOBS_URL") == "https://worker.example.run.app/push"
    assert env.choice("JOBS_MODE", ("SLOW", "FAST")) == "FAST"
    env.finish()


def test_defaults_apply_to_unset_and_empty_keys() -> None:
    env = EnvReader({"JOBS_EMPTY": "  ", "JOBS_COMMAS": " , ,"})
    assert env.str("JOBS_EMPTY", default="d") == "d"
    assert env.int("JOBS_MISSING", default=7) == 7
    assert env.float("JOBS_MISSING", default=0.5) == 0.5
    assert env.bool("JOBS_MISSING", default=False) is False
    assert env.duration_s("JOBS_MISSING", default=30.0) == 30.0
    assert env.csv("JOBS_COMMAS", default=("x",)) == ("x",)
    assert env.url("JOBS_MISSING", default="http://localhost:1") == "http://localhost:1"
    env.finish()


@pytest.mark.parametrize(
    ("raw", "seconds"),
    [("90", 90.0), ("90s", 90.0), ("1.5m", 90.0), ("2h", 7200.0), ("1d", 86400.0), ("500ms", 0.5)],
)
def test_durations_accept_units(raw: str, seconds: float) -> None:
    assert EnvReader({"JOBS_D": raw}).duration_s("JOBS_D") == seconds


@pytest.mark.parametrize("raw", ["TRUE", "1", "on", "yes"])
def test_true_spellings(raw: str) -> None:
    assert EnvReader({"JOBS_B": raw}).bool("JOBS_B") is True


@pytest.mark.parametrize("raw", ["false", "0", "OFF", "no"])
def test_false_spellings(raw: str) -> None:
    assert EnvReader({"JOBS_B": raw}).bool("JOBS_B") is False


def test_every_missing_and_invalid_key_is_named_in_one_error() -> None:
    env = EnvReader(
        {
            "JOBS_INT": "many",
            "JOBS_LOW": "0",
            "JOBS_HIGH": "501",
            "JOBS_FLOAT": "nan",
            "JOBS_BOOL": "maybe",
            "JOBS_DUR": "5 fortnights",
            "JOBS_URL": "worker.example.run.app",
            "JOBS_CHOICE": "LOUD",
        }
    )
    env.str("JOBS_REQUIRED")
    env.int("JOBS_INT")
    env.int("JOBS_LOW", min=1)
    env.int("JOBS_HIGH", min=1, max=500)
    env.float("JOBS_FLOAT")
    env.bool("JOBS_BOOL")
    env.duration_s("JOBS_DUR")
    env.url("JOBS_URL")
    env.choice("JOBS_CHOICE", ("INFO", "DEBUG"))
    env.csv("JOBS_LIST")
    with pytest.raises(SettingsError) as caught:
        env.finish()
    problems = caught.value.problems
    assert [p.split(":")[0] for p in problems] == [
        "JOBS_REQUIRED",
        "JOBS_INT",
        "JOBS_LOW",
        "JOBS_HIGH",
        "JOBS_FLOAT",
        "JOBS_BOOL",
        "JOBS_DUR",
        "JOBS_URL",
        "JOBS_CHOICE",
        "JOBS_LIST",
    ]
    message = str(caught.value)
    assert message.startswith("The service settings are invalid.")
    assert "JOBS_REQUIRED: is required" in message
    assert "JOBS_LOW: must be at least 1; got 0" in message
    assert "JOBS_HIGH: must be between 1 and 500; got 501" in message


def test_bad_values_fall_back_so_building_can_continue() -> None:
    env = EnvReader({"JOBS_INT": "x", "JOBS_DUR": "x"})
    assert env.int("JOBS_INT", default=3) == 3
    assert env.duration_s("JOBS_DUR", default=1.0, max=10) == 1.0
    assert env.int("JOBS_NONE") == 0
    assert len(env.problems) == 3


def test_duration_bounds_are_checked_in_seconds() -> None:
    env = EnvReader({"JOBS_D": "2h"})
    env.duration_s("JOBS_D", max=3600)
    assert env.problems == ("JOBS_D: must be at most 3600; got 7200.0",)


def test_url_schemes_can_be_restricted() -> None:
    env = EnvReader({"JOBS_URL": "http://insecure.example"})
    env.url("JOBS_URL", schemes=("https",))
    assert env.problems == (
        "JOBS_URL: must be an absolute https:// URL; got 'http://insecure.example'",
    )


def test_custom_cross_key_problems_are_reported_with_the_rest() -> None:
    env = EnvReader({})
    env.problem("JOBS_A", "must be less than JOBS_B")
    env.str("JOBS_B")
    with pytest.raises(SettingsError) as caught:
        env.finish()
    assert caught.value.problems == ("JOBS_A: must be less than JOBS_B", "JOBS_B: is required")


def test_settings_error_defaults_to_its_docstring() -> None:
    assert str(SettingsError()) == "The service settings are invalid."


def test_common_settings_defaults() -> None:
    env = EnvReader({"JOBS_PROJECT": "p"})
    common = CommonSettings.read(env)
    env.finish()
    assert common == CommonSettings(project="p")
    assert common.oidc_certs_url == GOOGLE_CERTS_URL
    assert common.auth_clock_skew_s == 10
    assert common.log_level_number == logging.INFO
    assert common.terminal_retention == timedelta(days=30)
    assert common.firestore_timeout_s == 10.0


def test_common_key_names_are_the_module_constants() -> None:
    assert (PROJECT, LOG_LEVEL, OIDC_CERTS_URL, AUTH_CLOCK_SKEW_S) == (
        "JOBS_PROJECT",
        "JOBS_LOG_LEVEL",
        "JOBS_OIDC_CERTS_URL",
        "JOBS_AUTH_CLOCK_SKEW_S",
    )
    assert TERMINAL_RETENTION_S == "JOBS_TERMINAL_RETENTION_S"
    assert FIRESTORE_TIMEOUT_S == "JOBS_FIRESTORE_TIMEOUT_S"
    # The infra stack sets this name on its branch too: it must stay exactly this.
    assert BEHIND_CLOUD_RUN_IAM == "JOBS_AUTH_BEHIND_CLOUD_RUN_IAM"
    assert set(COMMON_KEYS) == {
        PROJECT,
        LOG_LEVEL,
        OIDC_CERTS_URL,
        AUTH_CLOCK_SKEW_S,
        TERMINAL_RETENTION_S,
        FIRESTORE_TIMEOUT_S,
        BEHIND_CLOUD_RUN_IAM,
        "JOBS_SHARDS",
    }


def test_common_settings_read_every_key() -> None:
    env = EnvReader(
        {
            "JOBS_PROJECT": "deferred-jobs-local",
            "JOBS_LOG_LEVEL": "debug",
            "JOBS_OIDC_CERTS_URL": "http://127.0.0.1:8090/oauth2/v1/certs",
            "JOBS_AUTH_CLOCK_SKEW_S": "0",
            "JOBS_TERMINAL_RETENTION_S": "7d",
            "JOBS_FIRESTORE_TIMEOUT_S": "500ms",
            "JOBS_AUTH_BEHIND_CLOUD_RUN_IAM": "true",
            "K_SERVICE": "deferred-jobs-api",  # on Cloud Run, as the flag requires
        }
    )
    common = CommonSettings.read(env)
    env.finish()
    assert common == CommonSettings(
        "deferred-jobs-local",
        "DEBUG",
        "http://127.0.0.1:8090/oauth2/v1/certs",
        0,
        terminal_retention_s=7 * 86400,
        firestore_timeout_s=0.5,
        behind_cloud_run_iam=True,
    )
    assert common.terminal_retention == timedelta(days=7)


def test_services_are_not_behind_cloud_run_iam_unless_told() -> None:
    env = EnvReader({"JOBS_PROJECT": "p"})
    assert CommonSettings.read(env).behind_cloud_run_iam is False


def test_common_settings_name_every_bad_key() -> None:
    env = EnvReader(
        {
            "JOBS_LOG_LEVEL": "LOUD",
            "JOBS_OIDC_CERTS_URL": "nope",
            "JOBS_AUTH_CLOCK_SKEW_S": "-1",
            "JOBS_TERMINAL_RETENTION_S": "0",
            "JOBS_FIRESTORE_TIMEOUT_S": "forever",
            "JOBS_AUTH_BEHIND_CLOUD_RUN_IAM": "maybe",
        }
    )
    CommonSettings.read(env)
    with pytest.raises(SettingsError) as caught:
        env.finish()
    assert [p.split(":")[0] for p in caught.value.problems] == [
        "JOBS_PROJECT",
        "JOBS_LOG_LEVEL",
        "JOBS_OIDC_CERTS_URL",
        "JOBS_AUTH_CLOCK_SKEW_S",
        "JOBS_TERMINAL_RETENTION_S",
        "JOBS_FIRESTORE_TIMEOUT_S",
        "JOBS_AUTH_BEHIND_CLOUD_RUN_IAM",
    ]


def test_common_settings_are_frozen() -> None:
    with pytest.raises(dataclasses.FrozenInstanceError):
        CommonSettings("p").project = "q"  # type: ignore[misc]


def test_every_service_settings_takes_the_shared_keys_under_the_names_as_fields_gives() -> None:
    from services.api.settings import ApiSettings
    from services.scan.settings import ScanSettings
    from services.worker.settings import WorkerSettings

    common = CommonSettings(project="p", log_level="DEBUG", shards=3, firestore_timeout_s=2.5)
    shared = common.as_fields()
    for service in (ApiSettings, ScanSettings, WorkerSettings):
        names = {f.name for f in dataclasses.fields(service)}
        assert set(shared) <= names, (service.__name__, set(shared) - names)
    assert shared["certs_url"] == common.oidc_certs_url
    assert (shared["log_level"], shared["shards"], shared["firestore_timeout_s"]) == (
        "DEBUG",
        3,
        2.5,
    )


@pytest.mark.parametrize("service", [None, ""])
def test_the_behind_iam_flag_is_refused_off_cloud_run_naming_both_keys(
    service: str | None,
) -> None:
    environ = {"JOBS_PROJECT": "p", "JOBS_AUTH_BEHIND_CLOUD_RUN_IAM": "true"}
    if service is not None:
        environ["K_SERVICE"] = service
    env = EnvReader(environ)
    CommonSettings.read(env)
    with pytest.raises(SettingsError) as caught:
        env.finish()
    [problem] = caught.value.problems
    assert problem.startswith("JOBS_AUTH_BEHIND_CLOUD_RUN_IAM: ")
    assert "K_SERVICE is not set" in problem


def test_the_behind_iam_flag_is_accepted_on_cloud_run_and_off_is_always_fine() -> None:
    on = EnvReader(
        {"JOBS_PROJECT": "p", "JOBS_AUTH_BEHIND_CLOUD_RUN_IAM": "true", "K_SERVICE": "api"}
    )
    assert CommonSettings.read(on).behind_cloud_run_iam is True
    on.finish()
    off = EnvReader({"JOBS_PROJECT": "p", "JOBS_AUTH_BEHIND_CLOUD_RUN_IAM": "false"})
    assert CommonSettings.read(off).behind_cloud_run_iam is False
    off.finish()
