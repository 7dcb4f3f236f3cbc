"""Which package may import which: the whole table, read from every module's own imports.

From the bottom up (README, "Where things are"):
- `services/jobs`, the domain, and `services/telemetry`: standard library only;
- `services/store`, the Firestore adapter: the two below and the Google client libraries, never
  an HTTP framework;
- `services/edge`, the Cloud Run edge: the three below and whatever a server needs;
- the services `api`, `scan`, `worker`, `cli` (and `console`): the four layers, never each other;
- the launchers `services/local`, `infra` and `emulators` on top; nothing in `services/` imports
  them, and `infra` does not import `emulators`.
Inside the store, its roles (one module each) sit on its plumbing and never on each other.
"""

from __future__ import annotations

import ast
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]

DOMAIN = "services.jobs"
TELEMETRY = "services.telemetry"
STORE = "services.store"
EDGE = "services.edge"
SERVICES = ("services.api", "services.scan", "services.worker", "services.cli", "services.console")
LAUNCHERS = ("services.local", "infra", "emulators")

# The project packages each may import (its own always allowed).
ALLOWED: dict[str, set[str]] = {
    DOMAIN: set(),
    TELEMETRY: {DOMAIN},
    STORE: {DOMAIN, TELEMETRY},
    EDGE: {DOMAIN, TELEMETRY, STORE},
    **{service: {DOMAIN, TELEMETRY, STORE, EDGE} for service in SERVICES},
    "services.local": {DOMAIN, TELEMETRY, STORE, EDGE, *SERVICES, "emulators"},
    "infra": {DOMAIN, TELEMETRY, STORE, EDGE, *SERVICES},
    "emulators": {DOMAIN, TELEMETRY, STORE, EDGE},
}
# Third-party distributions the two bottom layers must never need; the store never speaks HTTP.
HTTP_FRAMEWORKS = {"flask", "werkzeug", "functions_framework", "gunicorn", "requests"}

STORE_ROLES = {
    "scheduling",
    "administration",
    "claims",
    "reclaims",
    "leases",
    "shared_keys",
    "forecasts",
    "selections",
}
STORE_FRONT = {"job_store"}


def package_of(module: str) -> str | None:
    parts = module.split(".")
    if parts[0] == "services" and len(parts) > 1:
        return f"services.{parts[1]}"
    if parts[0] in {"infra", "emulators"}:
        return parts[0]
    return None


def module_name(path: Path) -> str:
    parts = list(path.relative_to(ROOT).with_suffix("").parts)
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def imports(path: Path) -> Iterator[tuple[int, str]]:
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            yield node.lineno, node.module
            for alias in node.names:
                yield node.lineno, f"{node.module}.{alias.name}"
        elif isinstance(node, ast.Import):
            for alias in node.names:
                yield node.lineno, alias.name


def sources() -> Iterator[Path]:
    for top in ("services", "infra", "emulators"):
        yield from (
            p for p in sorted((ROOT / top).rglob("*.py")) if p != ROOT / "services" / "__init__.py"
        )


def violations(path: Path, module: str) -> list[str]:
    own = package_of(module)
    assert own in ALLOWED, f"{path}: package {own} is missing from the layer table"
    return [
        f"{module}:{line} {own} imports {name}"
        for line, name in imports(path)
        if (target := package_of(name)) in ALLOWED and target != own and target not in ALLOWED[own]
    ]


def test_every_import_between_packages_follows_the_layer_table() -> None:
    assert [v for path in sources() for v in violations(path, module_name(path))] == []


@pytest.mark.parametrize("layer", [DOMAIN, TELEMETRY])
def test_the_domain_and_telemetry_use_the_standard_library_only(layer: str) -> None:
    folder = ROOT / Path(*layer.split("."))
    offending = [
        f"{path.relative_to(ROOT)}:{line} {name}"
        for path in sorted(folder.rglob("*.py"))
        for line, name in imports(path)
        if package_of(name) is None and name.split(".")[0] not in sys.stdlib_module_names
    ]
    assert offending == []


def test_the_store_never_speaks_http() -> None:
    offending = [
        f"{path.relative_to(ROOT)}:{line} {name}"
        for path in sorted((ROOT / "services" / "store").rglob("*.py"))
        for line, name in imports(path)
        if name.split(".")[0] in HTTP_FRAMEWORKS
    ]
    assert offending == []


def store_modules_imported(path: Path) -> set[str]:
    return {
        name.removeprefix(f"{STORE}.").split(".")[0]
        for _, name in imports(path)
        if name.startswith(f"{STORE}.")
    }


def test_no_role_of_the_store_imports_another_or_the_store_class() -> None:
    folder = ROOT / "services" / "store"
    assert {p.stem for p in folder.glob("*.py")} >= STORE_ROLES | STORE_FRONT
    for role in sorted(STORE_ROLES):
        used = store_modules_imported(folder / f"{role}.py")
        assert not used & (STORE_ROLES | STORE_FRONT), (role, used & (STORE_ROLES | STORE_FRONT))


def test_the_stores_plumbing_imports_no_role() -> None:
    folder = ROOT / "services" / "store"
    plumbing = {p.stem for p in folder.glob("*.py")} - STORE_ROLES - STORE_FRONT - {"__init__"}
    for module in sorted(plumbing):
        used = store_modules_imported(folder / f"{module}.py")
        assert not used & (STORE_ROLES | STORE_FRONT), (module, used)


def test_no_package_module_re_exports_names() -> None:
    """One import path per name: a package's `__init__` holds its docstring, nothing else."""
    offending = []
    for path in sources():
        if path.name != "__init__.py":
            continue
        body = ast.parse(path.read_text()).body
        if any(isinstance(node, (ast.Import, ast.ImportFrom)) for node in body):
            offending.append(str(path.relative_to(ROOT)))
    assert offending == []


@pytest.mark.parametrize(
    ("module", "source"),
    [
        ("services.scan.probe", "from services.worker import processor\n"),
        ("services.jobs.probe", "from services.store import documents\n"),
        ("services.store.probe", "import services.edge.startup\n"),
        ("infra.probe", "from emulators.scheduler import scheduler\n"),
        ("services.cli.probe", "from services.local import stack\n"),
    ],
)
def test_the_table_catches_an_import_against_it(tmp_path: Path, module: str, source: str) -> None:
    """The check itself can fail (on a file outside the tree, so nothing else sees it)."""
    probe = tmp_path / "probe.py"
    probe.write_text(source)
    assert len(violations(probe, module)) >= 1
