"""Pulumi entry point (`main: infra/` in Pulumi.yaml): this repository's own stack, a thin
program that builds the component's args from the stack configuration, instantiates one
`DeferredJobs` and exports its outputs."""

import sys
from pathlib import Path

# Pulumi's Python host runs this directory as a script (runpy on `infra/`), so sys.path[0] is
# infra/ itself, not the repository root. Without the fix below, `import services...` fails when
# the project is not pip-installed, and worse, modules here would shadow top-level packages
# (infra/monitoring.py as `monitoring`). Put the repository root first so `infra.*` and
# `services.*` resolve exactly as they do in the tests.
_PROGRAM_DIR = Path(__file__).resolve().parent
_REPO_ROOT = _PROGRAM_DIR.parent
sys.path[:] = [p for p in sys.path if Path(p or ".").resolve() != _PROGRAM_DIR]
sys.path.insert(0, str(_REPO_ROOT))

import pulumi  # noqa: E402

from infra.stack import deploy_stack  # noqa: E402

for _name, _value in deploy_stack().outputs().items():
    pulumi.export(_name, _value)
