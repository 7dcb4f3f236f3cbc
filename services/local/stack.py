"""The process supervisor of the local stack: starts children, watches them, stops them all.

Each child gets its own process group, so Ctrl-C in the terminal reaches only the supervisor,
which then stops children in reverse start order (SIGTERM to the group, SIGKILL after a grace
period). A group, not just the PID, because functions-framework runs gunicorn, whose workers
are grandchildren. Output goes to one log file per child, opened for append (an earlier run's
lines stay; readiness and log tails read only this run's part, from the offset it started at);
when a child dies, its log tail is part of the error.
"""

from __future__ import annotations

import contextlib
import logging
import os
import signal
import socket
import subprocess
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from types import TracebackType

logger = logging.getLogger(__name__)

# How long a child may take to stop after SIGTERM: a service finishing its in-flight request
# (a scan run's own time budget is a few seconds locally), an emulator flushing its state.
_STOP_GRACE_S = 5.0
_LOG_TAIL_LINES = 30


class StackError(Exception):
    """The local stack could not start or keep running."""


class PortInUse(StackError):
    """A port the stack needs is already taken."""

    def __init__(self, name: str, port: int, flag: str) -> None:
        self.port = port
        super().__init__(
            f"port {port} for {name} on 127.0.0.1 is already in use; stop what holds it "
            f"or pass {flag} <free port> (0 picks one)"
        )


class ChildDied(StackError):
    """A child process of the stack exited."""


def port_accepts(port: int, host: str = "127.0.0.1", timeout_s: float = 0.5) -> bool:
    with contextlib.suppress(OSError), socket.create_connection((host, port), timeout=timeout_s):
        return True
    return False


@dataclass
class Child:
    """One supervised process: its name, Popen handle and log file."""

    name: str
    process: subprocess.Popen[bytes]
    log_path: Path
    log_offset: int = 0  # where this run's output starts in the (appended) log

    @property
    def pid(self) -> int:
        return self.process.pid

    def log_text(self) -> str:
        """This run's output so far."""
        try:
            with self.log_path.open("rb") as log:
                log.seek(self.log_offset)
                return log.read().decode("utf-8", errors="replace")
        except OSError:
            return ""

    def log_tail(self, lines: int = _LOG_TAIL_LINES) -> str:
        return "\n".join(self.log_text().splitlines()[-lines:])


@dataclass
class Supervisor:
    """Starts child processes in their own process groups and stops every one of them."""

    log_dir: Path
    children: list[Child] = field(default_factory=list)

    def start(
        self,
        name: str,
        argv: Sequence[str],
        *,
        env: Mapping[str, str] | None = None,
        cwd: Path | None = None,
    ) -> Child:
        """Start `argv` as child `name`; stdout and stderr go to `<log_dir>/<name>.log`."""
        self.log_dir.mkdir(parents=True, exist_ok=True)
        log_path = self.log_dir / f"{name}.log"
        # Appended, never truncated: truncating a log another process still writes to leaves
        # it full of NUL bytes. Readiness reads from `log_offset`, so a previous run's
        # "ready" line does not count for this child.
        with log_path.open("ab") as log:
            offset = log.tell()
            process = subprocess.Popen(
                list(argv),
                stdin=subprocess.DEVNULL,
                stdout=log,
                stderr=subprocess.STDOUT,
                env=dict(env) if env is not None else None,
                cwd=cwd,
                process_group=0,
            )
        child = Child(name, process, log_path, offset)
        self.children.append(child)
        logger.debug("started %s (pid %d): %s", name, process.pid, " ".join(argv))
        return child

    def check_alive(self) -> None:
        """Raise ChildDied, with its log tail, if any child has exited."""
        for child in self.children:
            code = child.process.poll()
            if code is not None:
                raise ChildDied(
                    f"{child.name} (pid {child.pid}) exited with code {code}; "
                    f"last lines of {child.log_path}:\n{child.log_tail()}"
                )

    def wait_until(
        self,
        child: Child,
        ready: Callable[[], bool],
        *,
        timeout_s: float,
        what: str,
    ) -> None:
        """Poll `ready` until true; fail fast if `child` dies, or after `timeout_s`."""
        deadline = time.monotonic() + timeout_s
        while not ready():
            code = child.process.poll()
            if code is not None:
                raise ChildDied(
                    f"{child.name} exited with code {code} before {what}; "
                    f"last lines of {child.log_path}:\n{child.log_tail()}"
                )
            if time.monotonic() > deadline:
                raise StackError(
                    f"{child.name} did not get {what} within {timeout_s:.0f} s; "
                    f"last lines of {child.log_path}:\n{child.log_tail()}"
                )
            time.sleep(0.1)

    def stop_all(self, grace_s: float = _STOP_GRACE_S) -> None:
        """Stop children in reverse start order: SIGTERM their group, SIGKILL after `grace_s`."""
        for child in reversed(self.children):
            _signal_group(child, signal.SIGTERM)
        deadline = time.monotonic() + grace_s
        for child in reversed(self.children):
            remaining = max(0.0, deadline - time.monotonic())
            try:
                child.process.wait(timeout=remaining)
            except subprocess.TimeoutExpired:
                logger.warning(
                    "%s (pid %d) still running %g s after SIGTERM; killing it",
                    child.name,
                    child.pid,
                    grace_s,
                )
                _signal_group(child, signal.SIGKILL)
                child.process.wait()
            # The leader is gone; its group may still hold a straggler (a gunicorn worker).
            _signal_group(child, signal.SIGKILL)
        self.children.clear()

    def __enter__(self) -> Supervisor:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.stop_all()


def _signal_group(child: Child, signum: signal.Signals) -> None:
    # The child leads its own group (process_group=0), so its PID is the group ID.
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(child.pid, signum)
