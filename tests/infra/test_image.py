"""The Dockerfile runs as a non-root user and starts the function the service names."""

from __future__ import annotations

import ast

from infra import env
from tests.infra.conftest import ROOT


def _instructions() -> list[tuple[str, str]]:
    text = (ROOT / "Dockerfile").read_text().replace("\\\n", " ")
    lines = [line.strip() for line in text.splitlines()]
    return [
        (line.split(None, 1)[0].upper(), line.split(None, 1)[1])
        for line in lines
        if line and not line.startswith("#")
    ]


def test_image_is_python_311_slim() -> None:
    assert _instructions()[0] == ("FROM", "python:3.11-slim")


def test_container_runs_as_a_non_root_user_after_installing() -> None:
    instructions = _instructions()
    users = [i for i, (op, _) in enumerate(instructions) if op == "USER"]
    assert users, "no USER instruction"
    last_user = users[-1]
    assert instructions[last_user][1] not in ("root", "0", "0:0")
    assert all(op != "RUN" for op, _ in instructions[last_user:])


def test_dependencies_install_from_the_project_with_pinned_constraints() -> None:
    runs = [arg for op, arg in _instructions() if op == "RUN"]
    assert any("pip install --constraint constraints.txt ." in run for run in runs)


def test_cmd_starts_functions_framework_with_the_target_and_port_from_the_environment() -> None:
    cmds = [arg for op, arg in _instructions() if op == "CMD"]
    assert len(cmds) == 1
    # functions-framework's app and server, with Cloud Run's limits (services/jobs/server.py).
    assert "python -m services.jobs.server" in cmds[0]
    assert "--target=${FUNCTION_TARGET}" in cmds[0]
    assert "--source=${FUNCTION_SOURCE}" in cmds[0]
    assert "--port=${PORT}" in cmds[0]


def test_each_function_source_defines_its_target_function() -> None:
    for target, source in env.FUNCTION_SOURCES.items():
        module = ast.parse((ROOT / source).read_text())
        functions = {node.name for node in module.body if isinstance(node, ast.FunctionDef)}
        assert target in functions, f"{source} defines no function {target!r}"


def test_image_context_keeps_tests_and_secrets_of_the_developer_out() -> None:
    ignored = (ROOT / ".dockerignore").read_text().split()
    for path in (".git", ".venv", "tests", "infra"):
        assert path in ignored
