from __future__ import annotations

import pytest

from services.api.settings import (
    API_ALLOWED_CALLERS,
    API_AUDIENCE,
    ApiSettings,
)
from services.edge.settings import PROJECT, SettingsError

GOOD = {
    PROJECT: "p",
    API_AUDIENCE: "https://api.example.run.app",
    API_ALLOWED_CALLERS: "a@p.iam.gserviceaccount.com, b@p.iam.gserviceaccount.com",
}


def test_settings_come_from_the_environment() -> None:
    settings = ApiSettings.from_env(GOOD)
    assert settings.allowed_callers == {
        "a@p.iam.gserviceaccount.com",
        "b@p.iam.gserviceaccount.com",
    }
    assert settings.max_body_bytes == 64 * 1024


def test_every_bad_key_is_named_at_once() -> None:
    with pytest.raises(SettingsError) as caught:
        ApiSettings.from_env({API_AUDIENCE: "not a url", API_ALLOWED_CALLERS: "nobody"})
    named = {problem.split(":")[0] for problem in caught.value.problems}
    assert named == {PROJECT, API_AUDIENCE, API_ALLOWED_CALLERS}
