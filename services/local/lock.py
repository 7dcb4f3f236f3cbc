"""One local stack per directory: `StackLock` holds `<dir>/stack.lock` for the stack's life.

A second `make run` in the same directory would otherwise overwrite the first one's env file
and truncate its live logs. The lock is an advisory `flock` on the file (released by the kernel
however the owner dies, so a crash never leaves a stale lock behind) and the file holds the
owner's PID so the refusal can name it.
"""

from __future__ import annotations

import contextlib
import fcntl
import os
from pathlib import Path
from types import TracebackType

from services.local.stack import StackError

LOCK_NAME = "stack.lock"


class StackLocked(StackError):
    """Another local stack already runs in this directory."""

    def __init__(self, directory: Path, owner: str) -> None:
        self.owner = owner
        who = f"pid {owner}" if owner else "another process"
        super().__init__(
            f"a local stack ({who}) already runs with {directory}: stop it first (Ctrl-C in "
            f"its terminal, or kill -INT {owner or '<pid>'}), or start this one with another "
            "directory: --log-dir DIR"
        )


class StackLock:
    """`with StackLock(directory):` — this process is the directory's only stack."""

    def __init__(self, directory: Path) -> None:
        self.path = directory / LOCK_NAME
        self._fd: int | None = None

    def acquire(self) -> None:
        try:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            fd = os.open(self.path, os.O_RDWR | os.O_CREAT, 0o644)
        except OSError as exc:
            raise StackError(
                f"--log-dir {self.path.parent}: {exc.strerror or exc}; pass a directory"
            ) from exc
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            owner = os.pread(fd, 32, 0).decode("ascii", errors="replace").strip()
            os.close(fd)
            raise StackLocked(self.path.parent, owner) from None
        os.ftruncate(fd, 0)
        os.pwrite(fd, f"{os.getpid()}\n".encode("ascii"), 0)
        self._fd = fd

    def release(self) -> None:
        if self._fd is None:
            return
        # Empty the file first: a reader between unlock and close must not see our PID.
        with contextlib.suppress(OSError):
            os.ftruncate(self._fd, 0)
        os.close(self._fd)  # closing releases the flock
        self._fd = None

    def __enter__(self) -> StackLock:
        self.acquire()
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.release()
