"""Ctrl-C and SIGTERM for the local stack's supervisor, held back while a client call runs.

Python raises KeyboardInterrupt wherever the main thread happens to be. Raised inside a gRPC
streaming call (the Firestore store's aggregation queries and reads are streams), it leaves
the call half-done, and the channel's finalizer then waits for that call forever when the
process exits: the stack printed `stopped: …` and never returned to the shell (py-spy:
`_ChannelCallState.__del__` in `Condition.wait`). Inside `shielded()` a signal is remembered
and raised when the block ends, between calls; everywhere else it interrupts at once, as before.
"""

from __future__ import annotations

import signal
from collections.abc import Iterator
from contextlib import contextmanager
from types import FrameType

STOP_SIGNALS = (signal.SIGINT, signal.SIGTERM)


class InterruptGate:
    """The stop signals' handler: KeyboardInterrupt now, or at the end of a shielded block."""

    def __init__(self) -> None:
        self._depth = 0
        self._pending = False

    def install(self) -> None:
        # SIGINT explicitly too: a shell starts a background job (`make run &`) with SIGINT
        # ignored, and Python keeps an inherited SIG_IGN, so `kill -INT` did nothing.
        for signum in STOP_SIGNALS:
            signal.signal(signum, self.handle)

    def handle(self, signum: int, frame: FrameType | None) -> None:
        if self._depth:
            self._pending = True
            return
        raise KeyboardInterrupt

    @contextmanager
    def shielded(self) -> Iterator[None]:
        """Run a client call to its end; a stop signal that came meanwhile is raised after."""
        self._depth += 1
        try:
            yield
        finally:
            self._depth -= 1
            if not self._depth and self._pending:
                self._pending = False
                raise KeyboardInterrupt
