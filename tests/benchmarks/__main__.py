"""Benchmark tier: `make bench` (or `python -m tests.benchmarks [name ...]`) prints figures.

Each `bench_<name>.py` module in this folder has a `main() -> None` that starts what it needs
on 127.0.0.1, measures, and prints its figures. None of this runs in the default test run.
"""

from __future__ import annotations

import importlib
import pkgutil
import sys
from pathlib import Path


def main(argv: list[str]) -> int:
    here = Path(__file__).parent
    available = sorted(
        m.name.removeprefix("bench_")
        for m in pkgutil.iter_modules([str(here)])
        if m.name.startswith("bench_")
    )
    wanted = argv or available
    unknown = [name for name in wanted if name not in available]
    if unknown:
        print(f"unknown benchmark(s): {', '.join(unknown)}; available: {', '.join(available)}")
        return 2
    for name in wanted:
        print(f"== {name}", flush=True)
        importlib.import_module(f"tests.benchmarks.bench_{name}").main()
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
