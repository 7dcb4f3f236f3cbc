"""`python -m services.local` arms a watchdog once every child stopped: an interpreter exit
that hangs (here: a non-daemon thread that never ends) prints every thread's stack and exits
1 instead of hanging the shell."""

from __future__ import annotations

import subprocess
import sys

from services.local.system import ROOT

HANGS_AT_EXIT = """
import threading
from services.local.__main__ import arm_exit_watchdog

threading.Thread(target=threading.Event().wait, name="never-ends").start()
print("stopped: everything", flush=True)
arm_exit_watchdog(0.5)
"""

# Armed long enough that a loaded machine's slow interpreter teardown never reaches it: what
# is tested is that an exit which ends disarms it, not how fast the exit is.
EXITS = """
from services.local.__main__ import arm_exit_watchdog

arm_exit_watchdog(30)
"""


def _run(code: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, timeout=60
    )


def test_an_exit_that_hangs_prints_every_threads_stack_and_exits_1() -> None:
    proc = _run(HANGS_AT_EXIT)
    assert proc.returncode == 1, proc.stderr
    assert proc.stdout == "stopped: everything\n"
    assert "Timeout (0:00:00.500000)!" in proc.stderr
    assert "in wait" in proc.stderr  # the never-ending thread's frame, named


def test_an_exit_that_finishes_is_left_alone() -> None:
    proc = _run(EXITS)
    assert (proc.returncode, proc.stderr) == (0, "")
