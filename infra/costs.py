"""docs/deploy.md's cost table, written from the cost model `jobsctl plan` prints
(services/cli/deployment_costs.py).

    python -m infra.costs --write    # rewrite the table in docs/deploy.md
    python -m infra.costs --check    # exit 1 if it differs
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from services.cli.deployment_costs import render

GUIDE = Path(__file__).resolve().parent.parent / "docs" / "deploy.md"
BEGIN = "<!-- cost table: python -m infra.costs --write -->"
END = "<!-- end of cost table -->"


def _replace(text: str, table: str) -> str:
    head, _, rest = text.partition(BEGIN)
    _, _, tail = rest.partition(END)
    return f"{head}{BEGIN}\n{table}\n{END}{tail}"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--write", action="store_true")
    parser.add_argument("--check", action="store_true")
    args = parser.parse_args(argv)
    text = GUIDE.read_text()
    wanted = _replace(text, render())
    if args.write:
        GUIDE.write_text(wanted)
        return 0
    if args.check:
        return 0 if text == wanted else 1
    print(render())
    return 0


if __name__ == "__main__":
    sys.exit(main())
