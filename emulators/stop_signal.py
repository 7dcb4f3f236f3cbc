"""How an emulator's command line waits to be told to stop: a signal sets an event."""

from __future__ import annotations

import signal
import threading
from types import FrameType


class StopSignal:
    """Set when one of the signals it was installed for arrives; `wait()` blocks until then."""

    def __init__(self) -> None:
        self._event = threading.Event()

    @classmethod
    def on(cls, *signums: signal.Signals) -> StopSignal:
        """Install handlers for `signums` (replacing the defaults) and return the stop signal."""
        stop = cls()
        for signum in signums:
            signal.signal(signum, stop._handle)
        return stop

    def wait(self) -> None:
        self._event.wait()

    def _handle(self, signum: int, frame: FrameType | None) -> None:
        self._event.set()
