"""docs/configuration.md, generated from the code's own declarations: every `JOBS_*` variable
and every Pulumi key in one place.

    python -m infra.configuration --write    # rewrite docs/configuration.md
    python -m infra.configuration --check    # exit 1 if it differs from what the code says

Where each fact comes from, so the page cannot drift from the code:
- the variables and who reads them: the services' `ALL_KEYS` (scan, worker, api) and the CLI's
  `OWN_KEYS`;
- a variable's type, default and range: the service's own `from_env`, run once on an empty
  environment with a reader that records every accessor call (the same `EnvReader`, so the
  figures are the ones the service applies);
- the Pulumi keys: `infra/config.py` `SETTINGS` (plus the provider keys and the secret);
- which key sets which variable: the source of `infra/env.py`'s and `infra/api.py`'s
  environment functions (`config.<field>`) followed through `parse_config` to the keys each
  field is computed from (`values["<key>"]`, through the helpers it calls).
"""

from __future__ import annotations

import argparse
import ast
import builtins
import contextlib
import inspect
import sys
import textwrap
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from types import ModuleType
from typing import Any

from infra import api as infra_api
from infra import config as infra_config
from infra import console as infra_console
from infra import env as infra_env
from services.api import settings as api_settings
from services.cli import backends as cli_backends
from services.console import settings as console_settings
from services.edge import settings as edge_settings
from services.scan import settings as scan_settings
from services.worker import settings as worker_settings

PAGE = Path(__file__).resolve().parent.parent / "docs" / "configuration.md"
COMMAND = "python -m infra.configuration --write"

# Variables that exist for tests and the local stack (emulators/), never for a deployment: the
# table labels them so nobody sets them on Cloud Run.
TEST_SETTINGS: Mapping[str, str] = {
    edge_settings.OIDC_CERTS_URL: "test setting: the OIDC emulator's keys (emulators/oidc)",
    scan_settings.MONITORING_EMULATOR_HOST: (
        "test setting: the Monitoring emulator's host:port (emulators/monitoring)"
    ),
    worker_settings.WORKER_ID_TOKEN_URL: (
        "test setting: the OIDC emulator's token endpoint for the ID tokens HTTP targets get "
        "(make run); unset, the metadata server"
    ),
    worker_settings.WORKER_ID_TOKEN_EMAIL: (
        "test setting: the account the OIDC emulator's tokens name (make run)"
    ),
}
# Variables an operator may set by hand on a service (not through the stack) or in jobsctl's
# shell; they stay, and the table says so.
OPERATOR_SETTINGS: Mapping[str, str] = {
    edge_settings.LOG_LEVEL: "operator setting: more or less logging while investigating",
    worker_settings.WORKER_DEADLINE_MARGIN_S: (
        "default and bound shown for the default lease: below a third of the lease"
    ),
    cli_backends.OPERATOR: "jobsctl: who you are in audit trails (default: your login name)",
    cli_backends.FIRESTORE_DATABASE: "jobsctl: a named Firestore database",
    cli_backends.DEAD_LETTER_SUBSCRIPTION: "jobsctl: the dead-letter pull subscription",
    console_settings.CONSOLE_URL: (
        "read by no service: where `make run` serves the console (its env file), for a shell, "
        "a browser or the browser tier"
    ),
}

# The Settings each service builds, in the order the table names readers.
READERS: tuple[tuple[str, ModuleType, Callable[[Mapping[str, str]], object]], ...] = (
    ("scan", scan_settings, scan_settings.ScanSettings.from_env),
    ("worker", worker_settings, worker_settings.WorkerSettings.from_env),
    ("api", api_settings, api_settings.ApiSettings.from_env),
    ("console", console_settings, console_settings.ConsoleSettings.from_env),
)
# The environment functions of the stack, per service, with the module they live in.
ENVIRONMENTS: tuple[tuple[str, Callable[..., object]], ...] = (
    ("scan", infra_env.scan_environment),
    ("worker", infra_env.worker_environment),
    ("api", infra_api.api_environment),
    ("console", infra_console.console_environment),
)
# Keys read outside SETTINGS: the provider's two and the secret.
PROVIDER_KEYS = ("gcp:project", "gcp:region")


@dataclass(frozen=True)
class Read:
    """One accessor call of a service's Settings: the variable's type, default and bounds."""

    kind: str
    default: object
    low: object = None
    high: object = None
    choices: tuple[str, ...] = ()


class _Recorder(edge_settings.EnvReader):
    """An EnvReader that remembers each accessor call (first call per key wins)."""

    def __init__(self, environ: Mapping[builtins.str, builtins.str]) -> None:
        super().__init__(environ)
        self.reads: dict[builtins.str, Read] = {}

    def _note(self, key: builtins.str, read: Read) -> None:
        self.reads.setdefault(key, read)

    def str(self, key: builtins.str, default: Any = edge_settings.REQUIRED) -> builtins.str:
        self._note(key, Read("string", default))
        return super().str(key, default)

    def choice(
        self, key: builtins.str, choices: Any, default: Any = edge_settings.REQUIRED
    ) -> builtins.str:
        options = tuple(choices)
        self._note(key, Read("choice", default, choices=options))
        return super().choice(key, options, default)

    def int(self, key: builtins.str, default: Any = edge_settings.REQUIRED, **bounds: Any) -> Any:
        self._note(key, Read("int", default, bounds.get("min"), bounds.get("max")))
        return super().int(key, default, **bounds)

    def float(self, key: builtins.str, default: Any = edge_settings.REQUIRED, **bounds: Any) -> Any:
        self._note(key, Read("number", default, bounds.get("min"), bounds.get("max")))
        return super().float(key, default, **bounds)

    def duration_s(
        self, key: builtins.str, default: Any = edge_settings.REQUIRED, **bounds: Any
    ) -> Any:
        self._note(key, Read("duration (s)", default, bounds.get("min"), bounds.get("max")))
        return super().duration_s(key, default, **bounds)

    def bool(self, key: builtins.str, default: Any = edge_settings.REQUIRED) -> builtins.bool:
        self._note(key, Read("bool", default))
        return super().bool(key, default)

    def csv(self, key: builtins.str, default: Any = edge_settings.REQUIRED) -> Any:
        self._note(key, Read("list (comma-separated)", default))
        return super().csv(key, default)

    def url(self, key: builtins.str, default: Any = edge_settings.REQUIRED, **kw: Any) -> Any:
        self._note(key, Read("URL", default))
        return super().url(key, default, **kw)


@contextlib.contextmanager
def _recording(module: ModuleType) -> Iterator[list[_Recorder]]:
    """Make `module`'s `EnvReader` a recorder for the duration; yields the readers it built."""
    made: list[_Recorder] = []

    class Recorder(_Recorder):
        def __init__(self, environ: Mapping[str, str]) -> None:
            super().__init__(environ)
            made.append(self)

    original = getattr(module, "EnvReader")  # noqa: B009  (a ModuleType has no typed attributes)
    setattr(module, "EnvReader", Recorder)  # noqa: B010
    try:
        yield made
    finally:
        setattr(module, "EnvReader", original)  # noqa: B010


def service_reads() -> dict[str, dict[str, Read]]:
    """{service: {variable: Read}} as each service's `from_env` reads an empty environment."""
    reads: dict[str, dict[str, Read]] = {}
    for service, module, from_env in READERS:
        with _recording(module) as made, contextlib.suppress(edge_settings.SettingsError):
            from_env({})
        recorded = {k: r for reader in made for k, r in reader.reads.items()}
        reads[service] = {key: recorded[key] for key in module.ALL_KEYS if key in recorded}
    return reads


# --- which stack key sets which variable, from the source ------------------------------------


def _function_source(function: Callable[..., object]) -> ast.FunctionDef:
    tree = ast.parse(textwrap.dedent(inspect.getsource(function)))
    node = tree.body[0]
    assert isinstance(node, ast.FunctionDef)
    return node


def _config_functions() -> dict[str, ast.FunctionDef]:
    tree = ast.parse(inspect.getsource(infra_config))
    return {node.name: node for node in tree.body if isinstance(node, ast.FunctionDef)}


def _properties() -> dict[str, set[str]]:
    """StackConfig's properties: {property: the fields it is computed from}."""
    node = ast.parse(textwrap.dedent(inspect.getsource(infra_config.StackConfig))).body[0]
    assert isinstance(node, ast.ClassDef)
    found: dict[str, set[str]] = {}
    for item in node.body:
        if isinstance(item, ast.FunctionDef):
            found[item.name] = {
                sub.attr
                for sub in ast.walk(item)
                if isinstance(sub, ast.Attribute)
                and isinstance(sub.value, ast.Name)
                and sub.value.id == "self"
            }
    return found


def _keys_of(
    expression: ast.AST,
    local: Mapping[str, ast.AST],
    functions: Mapping[str, ast.FunctionDef],
    seen: frozenset[str] = frozenset(),
) -> set[str]:
    """The stack keys an expression of infra/config.py is computed from: `values["k"]`,
    a provider key spelled as a string ("gcp:…"), local names followed to their assignment,
    and module functions followed through what they return."""
    keys: set[str] = set()
    for node in ast.walk(expression):
        if (
            isinstance(node, ast.Subscript)
            and isinstance(node.value, ast.Name)
            and node.value.id == "values"
            and isinstance(node.slice, ast.Constant)
        ):
            keys.add(str(node.slice.value))
        elif isinstance(node, ast.Constant) and node.value in PROVIDER_KEYS:
            keys.add(str(node.value))
        elif isinstance(node, ast.Name) and node.id in local and node.id not in seen:
            keys |= _keys_of(local[node.id], local, functions, seen | {node.id})
        elif (
            isinstance(node, ast.Call)
            and isinstance(node.func, ast.Name)
            and node.func.id in functions
            and node.func.id not in seen
        ):
            keys |= _returned_keys(functions[node.func.id], functions, seen | {node.func.id})
    return keys


def _assignments(function: ast.FunctionDef) -> dict[str, ast.AST]:
    return {
        target.id: node.value
        for node in ast.walk(function)
        if isinstance(node, ast.Assign)
        for target in node.targets
        if isinstance(target, ast.Name)
    }


def _returned_keys(
    function: ast.FunctionDef, functions: Mapping[str, ast.FunctionDef], seen: frozenset[str]
) -> set[str]:
    local = _assignments(function)
    # A local name is followed once per function: the caller's names do not hide the callee's.
    called = frozenset(name for name in seen if name in functions)
    keys: set[str] = set()
    for node in ast.walk(function):
        if isinstance(node, ast.Return) and node.value is not None:
            keys |= _keys_of(node.value, local, functions, called)
    return keys


def field_keys() -> dict[str, tuple[str, ...]]:
    """{StackConfig field or property: the stack keys it is computed from} (parse_config)."""
    functions = _config_functions()
    parse = functions["parse_config"]
    local = _assignments(parse)
    fields: dict[str, tuple[str, ...]] = {}
    for node in ast.walk(parse):
        if isinstance(node, ast.Call) and getattr(node.func, "id", "") == "StackConfig":
            for keyword in node.keywords:
                if keyword.arg is not None:
                    found = _keys_of(keyword.value, local, functions, frozenset({"parse_config"}))
                    fields[keyword.arg] = tuple(sorted(found, key=_key_order))
    for prop, uses in _properties().items():
        found = {key for use in uses for key in fields.get(use, ())}
        fields[prop] = tuple(sorted(found, key=_key_order))
    return fields


@dataclass(frozen=True)
class Source:
    """How the stack sets one variable on one service."""

    keys: tuple[str, ...] = ()  # the stack keys its value is computed from
    wired: bool = False  # from another resource (a name, a URL, an account)
    fixed: str | None = None  # always this value


def stack_sources() -> dict[str, dict[str, Source]]:
    """{variable: {service: Source}} from the stack's environment functions."""
    fields = field_keys()
    sources: dict[str, dict[str, Source]] = {}
    for service, function in ENVIRONMENTS:
        module = sys.modules[function.__module__]
        node = _function_source(function)
        config_arg, *other_args = (arg.arg for arg in node.args.args)
        for ret in ast.walk(node):
            if not (isinstance(ret, ast.Return) and isinstance(ret.value, ast.Dict)):
                continue
            for key_node, value_node in zip(ret.value.keys, ret.value.values, strict=True):
                assert key_node is not None
                variable = eval(compile(ast.Expression(key_node), "<key>", "eval"), vars(module))
                sources.setdefault(variable, {})[service] = _source(
                    value_node, module, config_arg, set(other_args), fields
                )
    return sources


def _source(
    value: ast.expr,
    module: ModuleType,
    config_arg: str,
    wiring_args: set[str],
    fields: Mapping[str, tuple[str, ...]],
) -> Source:
    keys: set[str] = set()
    wired = False
    for node in ast.walk(value):
        if isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name):
            if node.value.id == config_arg:
                keys |= set(fields[node.attr])
            elif node.value.id in wiring_args:
                wired = True
        elif isinstance(node, ast.Name) and node.id in wiring_args:
            wired = True
    if keys or wired:
        return Source(tuple(sorted(keys, key=_key_order)), wired)
    fixed = eval(compile(ast.Expression(value), "<value>", "eval"), vars(module))
    return Source(fixed=str(fixed))


# --- the page ---------------------------------------------------------------------------------


def _key_order(key: str) -> int:
    names = [*PROVIDER_KEYS, *(s.name for s in infra_config.SETTINGS), *infra_config.SECRET_KEYS]
    return names.index(key) if key in names else len(names)


def _value(value: object) -> str:
    if isinstance(value, edge_settings._Required):
        return "required"
    if isinstance(value, bool):
        return f"`{str(value).lower()}`"
    if isinstance(value, float):
        return f"`{_number(value)}`"
    if value in ("", (), None):
        return "empty"
    if isinstance(value, tuple):
        return "`" + ",".join(str(v) for v in value) + "`"
    return f"`{value}`"


def _range(read: Read) -> str:
    if read.choices:
        return " / ".join(f"`{c}`" for c in read.choices)
    if read.kind == "bool":
        return "`true` / `false`"

    if read.low is not None and read.high is not None:
        return f"{_number(read.low)} - {_number(read.high)}"
    if read.low is not None:
        return f"≥ {_number(read.low)}"
    if read.high is not None:
        return f"≤ {_number(read.high)}"
    return ""


def _number(value: object) -> str:
    """A whole float as an integer (2592000, not 2.592e+06), any other as written."""
    if isinstance(value, float):
        return str(int(value)) if value.is_integer() else f"{value:g}"
    return str(value)


def _set_by(per_service: Mapping[str, Source], readers: list[str]) -> str:
    parts: list[str] = []
    by_text: dict[str, list[str]] = {}
    for service in readers:
        source = per_service.get(service)
        if source is None:
            continue
        if source.fixed is not None:
            text = f"always `{source.fixed}`"
        else:
            named = [f"`{key}`" for key in source.keys]
            if source.wired:
                named.append("the deployment's resources")
            text = " + ".join(named)
        by_text.setdefault(text, []).append(service)
    for text, services in by_text.items():
        on = "" if len(services) == len(readers) else f" ({', '.join(services)})"
        parts.append(text + on)
    return "; ".join(parts) if parts else "not set by the stack"


@dataclass(frozen=True)
class Variable:
    name: str
    readers: tuple[str, ...]
    read: Read | None
    set_by: str
    note: str


def variables() -> list[Variable]:
    """Every JOBS_* variable: the services' ALL_KEYS, then jobsctl's own, in that order."""
    reads = service_reads()
    sources = stack_sources()
    names: list[str] = []
    for _, module, _ in READERS:
        names += [key for key in module.ALL_KEYS if key not in names]
    names += [key for key in cli_backends.OWN_KEYS if key not in names]
    names += [key for key in console_settings.EXPORT_ONLY_KEYS if key not in names]
    rows: list[Variable] = []
    for name in names:
        readers = [service for service, module, _ in READERS if name in module.ALL_KEYS]
        if name in cli_backends.OWN_KEYS:
            readers.append("jobsctl")
        read = next((reads[s][name] for s in readers if name in reads.get(s, {})), None)
        note = TEST_SETTINGS.get(name) or OPERATOR_SETTINGS.get(name, "")
        set_by = _set_by(sources.get(name, {}), readers)
        rows.append(Variable(name, tuple(readers), read, set_by, note))
    return rows


def feeds() -> dict[str, list[str]]:
    """{stack key: the variables its value reaches}."""
    fed: dict[str, list[str]] = {}
    for variable, per_service in stack_sources().items():
        for source in per_service.values():
            for key in source.keys:
                if variable not in fed.setdefault(key, []):
                    fed[key].append(variable)
    return fed


def _setting_range(setting: infra_config.Setting) -> str:
    if setting.kind == "bool":
        return "`true` / `false`"
    if setting.kind == "list":
        return "JSON list"
    if setting.low is not None and setting.high is not None:
        return f"{setting.low} - {setting.high}"
    return ""


def _cell(text: str) -> str:
    return text.replace("|", "\\|")


def render() -> str:
    """docs/configuration.md as the code declares it."""
    rows = variables()
    fed = feeds()
    unset = [row for row in rows if row.set_by == "not set by the stack"]
    lines = [
        "# Configuration: every variable and every stack key",
        "",
        f"Generated by `{COMMAND}` from the code's own declarations (the services' `ALL_KEYS`",
        "and `from_env`, jobsctl's `OWN_KEYS`, `infra/config.py` `SETTINGS`, and the",
        "environment functions of `infra/env.py` and `infra/api.py`); do not edit by hand.",
        "tests/infra/test_configuration_page.py fails when this page and the code disagree.",
        "",
        f"{len(rows)} `JOBS_*` variables ({len(rows) - len(unset)} set by the stack, "
        f"{len(unset)} not), {len(infra_config.SETTINGS) + len(infra_config.SECRET_KEYS)} "
        f"Pulumi keys of this program (plus the provider's {', '.join(PROVIDER_KEYS)}).",
        "A deployment sets only what the stack sets; a variable the stack does not set keeps",
        "its default on Cloud Run unless the note says who sets it.",
        "",
        "## `JOBS_*` variables",
        "",
        "| Variable | Read by | Type | Default | Allowed | Set by the stack from | Note |",
        "| --- | --- | --- | --- | --- | --- | --- |",
    ]
    for row in rows:
        read = row.read
        kind = read.kind if read else "string"
        default = _value(read.default) if read else "empty"
        allowed = _range(read) if read else ""
        cells = [
            f"`{row.name}`",
            ", ".join(row.readers),
            kind,
            default,
            allowed,
            row.set_by,
            row.note,
        ]
        lines.append("| " + " | ".join(_cell(c) for c in cells) + " |")
    lines += [
        "",
        "## Pulumi keys",
        "",
        "Set with `pulumi config set <key> <value>` (docs/deploy.md, step 5).",
        "",
        "| Key | Type | Default | Range | Feeds | Doc |",
        "| --- | --- | --- | --- | --- | --- |",
    ]
    for key in PROVIDER_KEYS:
        variables_fed = ", ".join(f"`{v}`" for v in fed.get(key, ())) or "—"
        doc = "the Google Cloud project" if key.endswith("project") else "the region"
        lines.append(f"| `{key}` | str | required |  | {variables_fed} | {doc} (provider key) |")
    for setting in infra_config.SETTINGS:
        default = "required" if setting.default is None else _value(setting.default)
        variables_fed = ", ".join(f"`{v}`" for v in fed.get(setting.name, ())) or "—"
        cells = [
            f"`{setting.name}`",
            setting.kind,
            default,
            _setting_range(setting),
            variables_fed,
            setting.doc,
        ]
        lines.append("| " + " | ".join(_cell(c) for c in cells) + " |")
    for key in infra_config.SECRET_KEYS:
        lines.append(f"| `{key}` | secret | — |  |  | set with `pulumi config set --secret` |")
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m infra.configuration", description=__doc__)
    mode = parser.add_mutually_exclusive_group(required=True)
    mode.add_argument("--write", action="store_true", help=f"rewrite {PAGE.name}")
    mode.add_argument("--check", action="store_true", help=f"exit 1 if {PAGE.name} is stale")
    args = parser.parse_args(argv)
    page = render()
    if args.write:
        PAGE.write_text(page)
        return 0
    current = PAGE.read_text() if PAGE.exists() else ""
    if current != page:
        sys.stderr.write(f"{PAGE} is stale: run {COMMAND}\n")
        return 1
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
