"""The console's settings: IAP's audience required unless a local stand-in, the stand-in refused
on Cloud Run, roles as plain emails."""

from __future__ import annotations

import pytest

from services.console.settings import IAP_KEYS_URL, ConsoleSettings
from services.edge.settings import SettingsError

AUDIENCE = "/projects/1/locations/europe-west1/services/jobs-console"


def test_a_deployed_console_reads_its_audience_and_roles() -> None:
    settings = ConsoleSettings.from_env(
        {
            "JOBS_PROJECT": "p",
            "JOBS_CONSOLE_IAP_AUDIENCE": AUDIENCE,
            "JOBS_CONSOLE_OPERATORS": "Ann@Example.com, bob@example.com",
            "JOBS_CONSOLE_VIEWERS": "eve@example.com",
        }
    )
    assert settings.operators == {"ann@example.com", "bob@example.com"}
    assert settings.viewers == {"eve@example.com"}
    assert settings.iap_keys_url == IAP_KEYS_URL and settings.stand_in_identity is None


@pytest.mark.parametrize(
    ("environ", "problem"),
    [
        ({"JOBS_CONSOLE_OPERATORS": "a@b.c"}, "JOBS_CONSOLE_IAP_AUDIENCE: required"),
        (
            {"JOBS_CONSOLE_IAP_AUDIENCE": "https://x.run.app", "JOBS_CONSOLE_OPERATORS": "a@b.c"},
            "JOBS_CONSOLE_IAP_AUDIENCE: must be /projects/",
        ),
        ({"JOBS_CONSOLE_IAP_AUDIENCE": AUDIENCE}, "JOBS_CONSOLE_OPERATORS: nobody may use"),
        (
            {"JOBS_CONSOLE_IAP_AUDIENCE": AUDIENCE, "JOBS_CONSOLE_OPERATORS": "group:ops@b.c"},
            "JOBS_CONSOLE_OPERATORS: not email addresses",
        ),
        (
            {"JOBS_CONSOLE_STAND_IN_IDENTITY": "me@local.test", "K_SERVICE": "jobs-console"},
            "JOBS_CONSOLE_STAND_IN_IDENTITY: set, but K_SERVICE is set too",
        ),
        ({"JOBS_CONSOLE_STAND_IN_IDENTITY": "me"}, "JOBS_CONSOLE_STAND_IN_IDENTITY: not an email"),
    ],
)
def test_a_bad_setting_is_named(environ: dict[str, str], problem: str) -> None:
    with pytest.raises(SettingsError) as raised:
        ConsoleSettings.from_env({"JOBS_PROJECT": "p", **environ})
    assert any(p.startswith(problem) for p in raised.value.problems), raised.value.problems


def test_a_local_stand_in_needs_no_audience() -> None:
    settings = ConsoleSettings.from_env(
        {"JOBS_PROJECT": "p", "JOBS_CONSOLE_STAND_IN_IDENTITY": "me@local.test"}
    )
    assert settings.stand_in_identity == "me@local.test"
