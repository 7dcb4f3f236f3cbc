"""constraints.txt: every runtime distribution the image installs, pinned, and nothing else.

    python -m tests.image.constraints --write   # regenerate from pyproject.toml's ranges
    python -m tests.image.constraints --check   # exit 1 when constraints.txt is not exact

Both ask pip itself what a clean install of the project would install
(`pip install --dry-run --ignore-installed --report`, https://pip.pypa.io/en/stable/reference/installation-report/),
so nothing of this machine's environment leaks in: `--write` without constraints (the newest
versions the ranges allow), `--check` with them, and the check holds when that resolution is
exactly the pinned set (a new dependency without a pin, a pin no longer needed, or a pin
outside a range all fail). The image tier runs the check; the image itself installs with
`--constraint constraints.txt` and a test compares its `pip freeze` with the file.
"""

from __future__ import annotations

import argparse
import json
import re
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
CONSTRAINTS = ROOT / "constraints.txt"
PROJECT = "deferred-jobs"
HEADER = (
    "# Every runtime distribution of a clean `pip install .`, pinned; regenerate with\n"
    "# `python -m tests.image.constraints --write` (docs/image.md). The image installs with\n"
    "# `pip install --constraint constraints.txt`.\n"
)


def canonical(name: str) -> str:
    """PEP 503 normalised name."""
    return re.sub(r"[-_.]+", "-", name).lower()


def read_pins(text: str) -> dict[str, str]:
    """`name==version` lines (comments, blanks ignored) by canonical name."""
    pins = {}
    for raw in text.splitlines():
        line = raw.split("#", 1)[0].strip()
        if not line:
            continue
        name, sep, version = line.partition("==")
        if not sep:
            raise ValueError(f"not a name==version pin: {raw!r}")
        pins[canonical(name)] = version.strip()
    return pins


def resolve(constraints: Path | None = None) -> dict[str, str]:
    """What a clean install of the project would install (without the project itself)."""
    with tempfile.TemporaryDirectory() as scratch:
        report = Path(scratch) / "report.json"
        command = [
            sys.executable,
            "-m",
            "pip",
            "install",
            "--dry-run",
            "--ignore-installed",
            "--quiet",
            f"--report={report}",
        ]
        if constraints is not None:
            command.append(f"--constraint={constraints}")
        command.append(str(ROOT))
        done = subprocess.run(command, capture_output=True, text=True, timeout=600, check=False)
        if done.returncode != 0:
            raise RuntimeError(f"pip could not resolve the project:\n{done.stderr}")
        installs = json.loads(report.read_text())["install"]
    resolved = {
        canonical(item["metadata"]["name"]): item["metadata"]["version"] for item in installs
    }
    resolved.pop(PROJECT, None)
    return resolved


def render(pins: dict[str, str]) -> str:
    return HEADER + "".join(f"{name}=={pins[name]}\n" for name in sorted(pins))


def differences(pinned: dict[str, str], resolved: dict[str, str]) -> list[str]:
    problems = [f"{n}: resolved {resolved[n]} but not pinned" for n in resolved if n not in pinned]
    problems += [f"{n}=={pinned[n]}: pinned but not installed" for n in pinned if n not in resolved]
    problems += [
        f"{n}: pinned {pinned[n]}, resolved {resolved[n]}"
        for n in pinned
        if n in resolved and pinned[n] != resolved[n]
    ]
    return sorted(problems)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m tests.image.constraints", description=__doc__)
    action = parser.add_mutually_exclusive_group(required=True)
    action.add_argument("--write", action="store_true", help="regenerate constraints.txt")
    action.add_argument("--check", action="store_true", help="exit 1 unless it is exact")
    args = parser.parse_args(argv)
    if args.write:
        CONSTRAINTS.write_text(render(resolve()))
        print(f"wrote {CONSTRAINTS}")
        return 0
    problems = differences(read_pins(CONSTRAINTS.read_text()), resolve(CONSTRAINTS))
    for problem in problems:
        print(problem, file=sys.stderr)
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
