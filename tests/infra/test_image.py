"""The Dockerfile: a base pinned by digest, pinned dependencies and build backend, a non-root
user with a home of its own, and the function the service names. (tests/image builds and runs
it.)"""

from __future__ import annotations

import ast
import re
import tomllib

from emulators.cloudrun import image as container_image
from infra import env
from infra.config import image_problems
from tests.infra.conftest import ROOT


def _instructions() -> list[tuple[str, str]]:
    text = (ROOT / "Dockerfile").read_text().replace("\\\n", " ")
    lines = [line.strip() for line in text.splitlines()]
    return [
        (line.split(None, 1)[0].upper(), line.split(None, 1)[1])
        for line in lines
        if line and not line.startswith("#")
    ]


def test_the_base_is_python_311_slim_pinned_by_digest_with_its_refresh_command() -> None:
    op, base = _instructions()[0]
    name, at, digest = base.partition("@")
    assert (op, name, at) == ("FROM", "python:3.11-slim", "@")
    assert re.fullmatch(r"sha256:[0-9a-f]{64}", digest), digest
    assert image_problems(f"registry/app@{digest}") == []  # not a placeholder digest
    text = (ROOT / "Dockerfile").read_text()
    assert "docker buildx imagetools inspect python:3.11-slim" in text
    assert "crane digest python:3.11-slim" in text


def test_the_build_backend_is_pinned_exactly() -> None:
    pyproject = tomllib.loads((ROOT / "pyproject.toml").read_text())
    (requirement,) = pyproject["build-system"]["requires"]
    assert re.fullmatch(r"setuptools==\d+(\.\d+)*", requirement), requirement


def test_the_images_function_sources_are_infras() -> None:
    for target, source in env.FUNCTION_SOURCES.items():
        assert container_image.function_source(target) == source


def test_container_runs_as_a_non_root_user_after_installing() -> None:
    instructions = _instructions()
    users = [i for i, (op, _) in enumerate(instructions) if op == "USER"]
    assert users, "no USER instruction"
    last_user = users[-1]
    assert instructions[last_user][1] not in ("root", "0", "0:0")
    assert all(op != "RUN" for op, _ in instructions[last_user:])


def test_the_project_installs_with_pinned_constraints_and_app_links_to_the_package() -> None:
    runs = [arg for op, arg in _instructions() if op == "RUN"]
    (install,) = [run for run in runs if "pip install" in run]
    assert "pip install --constraint /tmp/build/constraints.txt /tmp/build" in install
    assert "rm -rf /tmp/build" in install  # the build copy does not stay in the image
    assert "ln -s" in install and "services.__file__" in install
    workdirs = [arg for op, arg in _instructions() if op == "WORKDIR"]
    assert workdirs == ["/app"]


def test_the_app_user_has_a_home_of_its_own() -> None:
    (useradd,) = [arg for op, arg in _instructions() if op == "RUN" and "useradd" in arg]
    assert "--home-dir /home/app --create-home" in useradd
    envs = " ".join(arg for op, arg in _instructions() if op == "ENV")
    assert "HOME=/home/app" in envs


def test_cmd_starts_functions_framework_with_the_target_and_port_from_the_environment() -> None:
    cmds = [arg for op, arg in _instructions() if op == "CMD"]
    assert len(cmds) == 1
    # functions-framework's app and server, with Cloud Run's limits (services/edge/server.py).
    assert "python -P -m services.edge.server" in cmds[0]
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
