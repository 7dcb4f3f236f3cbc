"""docs/configuration.md is what `python -m infra.configuration --write` makes of the code, and
every `JOBS_*` name the services spell is one a Settings (or jobsctl) declares."""

from __future__ import annotations

import re

from infra import configuration
from infra.config import SETTINGS
from services.cli import backends as cli_backends
from services.console import settings as console_settings
from tests.infra.conftest import ROOT

# A JOBS_* name not inside a longer one (DEFERRED_JOBS_API_URL is the local producer's).
JOBS_NAME = re.compile(r"(?<![A-Za-z0-9_])JOBS_[A-Z0-9_]*[A-Z0-9]")
DECLARED = {
    *(key for _, module, _ in configuration.READERS for key in module.ALL_KEYS),
    *cli_backends.OWN_KEYS,
    *console_settings.EXPORT_ONLY_KEYS,
}


def test_the_configuration_page_is_what_the_generator_writes() -> None:
    page = (ROOT / "docs" / "configuration.md").read_text()
    assert page == configuration.render(), (
        f"docs/configuration.md is stale: run `{configuration.COMMAND}` and commit the result"
    )


def test_every_jobs_name_spelled_in_services_is_declared_by_a_settings() -> None:
    spelled: dict[str, set[str]] = {}
    for path in sorted((ROOT / "services").rglob("*")):
        if path.suffix in (".py", ".json", ".md") and path.is_file():
            for name in JOBS_NAME.findall(path.read_text()):
                spelled.setdefault(name, set()).add(str(path.relative_to(ROOT)))
    undeclared = {name: sorted(paths) for name, paths in spelled.items() if name not in DECLARED}
    assert not undeclared, (
        "JOBS_* names read (or documented) outside every Settings' ALL_KEYS and jobsctl's "
        f"OWN_KEYS: {undeclared}"
    )


def test_the_page_lists_every_declared_variable_and_every_stack_key() -> None:
    page = configuration.render()
    for name in DECLARED:
        assert f"| `{name}` |" in page
    for setting in SETTINGS:
        assert f"| `{setting.name}` |" in page


def test_every_variable_the_stack_sets_names_where_its_value_comes_from() -> None:
    for variable, per_service in configuration.stack_sources().items():
        for service, source in per_service.items():
            assert source.keys or source.wired or source.fixed is not None, (variable, service)


def test_the_test_settings_are_labelled_and_not_set_by_the_stack() -> None:
    rows = {row.name: row for row in configuration.variables()}
    for name in configuration.TEST_SETTINGS:
        assert rows[name].note.startswith("test setting")
        assert rows[name].set_by == "not set by the stack"
